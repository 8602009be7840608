#include "common/device.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace pp::common {

std::string Device::ToString() const { return cuda ? absl::StrCat("cuda:", cuda_index) : "cpu"; }

absl::StatusOr<Device> ParseDevice(absl::string_view text, absl::string_view flag) {
  Device device;
  if (text == "cpu") return device;
  absl::string_view index = text;
  const auto digit = [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); };
  if (absl::ConsumePrefix(&index, "cuda:") && !index.empty() && index.size() <= 9 &&
      std::all_of(index.begin(), index.end(), digit) &&
      absl::SimpleAtoi(index, &device.cuda_index)) {
    device.cuda = true;
    return device;
  }
  const std::string what =
      flag.empty() ? absl::StrCat("device '", text, "'") : absl::StrCat("--", flag, "=", text);
  return absl::InvalidArgumentError(absl::StrCat(what, ": want cpu or cuda:N"));
}

}  // namespace pp::common
