#include "common/host_port.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace pp::common {
namespace {

// SimpleAtoi alone would also take a sign and surrounding spaces.
bool AllDigits(absl::string_view text) {
  const auto digit = [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); };
  return !text.empty() && text.size() <= 5 && std::all_of(text.begin(), text.end(), digit);
}

}  // namespace

bool HostPort::IsWildcard() const {
  return host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]";
}

std::string HostPort::ToString() const { return absl::StrCat(host, ":", port); }

absl::StatusOr<HostPort> ParseHostPort(absl::string_view address, absl::string_view flag) {
  const size_t colon = address.rfind(':');
  HostPort out;
  const absl::string_view port =
      colon == absl::string_view::npos ? absl::string_view() : address.substr(colon + 1);
  if (!AllDigits(port) || !absl::SimpleAtoi(port, &out.port) || out.port > 65535) {
    const std::string what = flag.empty() ? absl::StrCat("address '", address, "'")
                                          : absl::StrCat("--", flag, "=", address);
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": want HOST:PORT (port 0 picks a free port)"));
  }
  out.host = std::string(address.substr(0, colon));
  return out;
}

}  // namespace pp::common
