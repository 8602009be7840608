#include "common/cert_deny_list.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file_io.h"

namespace pp::common {
namespace {

constexpr uint64_t kMaxDenyFileBytes = 1 << 20;
constexpr absl::string_view kOpensslPrefix = "sha256 fingerprint=";

// The fingerprint a line names, lowercase without colons; nullopt when it names none.
std::optional<std::string> FingerprintOf(absl::string_view line) {
  if (absl::StartsWithIgnoreCase(line, kOpensslPrefix)) line.remove_prefix(kOpensslPrefix.size());
  std::string hex;
  for (char c : line) {
    if (c != ':') hex.push_back(absl::ascii_tolower(c));
  }
  if (hex.size() != 64 || !std::all_of(hex.begin(), hex.end(), absl::ascii_isxdigit)) {
    return std::nullopt;
  }
  return hex;
}

std::string Certificates(size_t n) {
  return absl::StrCat(n, n == 1 ? " certificate" : " certificates");
}

}  // namespace

absl::StatusOr<CertDenyList::Fingerprints> CertDenyList::Parse(absl::string_view text,
                                                               absl::string_view source) {
  Fingerprints fingerprints;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    std::optional<std::string> fingerprint = FingerprintOf(line);
    if (!fingerprint.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, " line ", line_number,
          ": not a SHA-256 certificate fingerprint (64 hex digits, colons allowed)"));
    }
    fingerprints.insert(*std::move(fingerprint));
  }
  return fingerprints;
}

absl::StatusOr<CertDenyList::Fingerprints> CertDenyList::Read() const {
  const std::string source = absl::StrCat("--deny_certs=", path_);
  absl::StatusOr<std::string> text = ReadFile(path_, kMaxDenyFileBytes);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": cannot read: ", text.status().message()));
  }
  return Parse(*text, source);
}

absl::StatusOr<std::shared_ptr<CertDenyList>> CertDenyList::Load(const std::string& path) {
  std::shared_ptr<CertDenyList> list(new CertDenyList(path));
  if (path.empty()) return list;
  absl::StatusOr<Fingerprints> read = list->Read();
  if (!read.ok()) return read.status();
  absl::MutexLock lock(&list->mu_);
  list->denied_ = *std::move(read);
  return list;
}

absl::StatusOr<std::string> CertDenyList::Reload() {
  if (path_.empty()) return std::string("no --deny_certs: nothing to reload");
  absl::StatusOr<Fingerprints> read = Read();
  absl::MutexLock lock(&mu_);
  if (!read.ok()) {
    return absl::Status(read.status().code(),
                        absl::StrCat(read.status().message(), "; still denying the ",
                                     Certificates(denied_.size()), " read before"));
  }
  denied_ = *std::move(read);
  return absl::StrCat("--deny_certs=", path_, ": denying ", Certificates(denied_.size()));
}

bool CertDenyList::Denies(absl::string_view fingerprint) const {
  absl::MutexLock lock(&mu_);
  return denied_.contains(fingerprint);
}

absl::Status CertDenyList::Check(const PeerCert& peer, absl::string_view method) const {
  if (!Denies(peer.fingerprint)) return absl::OkStatus();
  return absl::UnauthenticatedError(
      absl::StrCat(method, ": the client certificate of ", peer.name, " (sha256 ",
                   peer.fingerprint, ") is revoked (--deny_certs=", path_, ")"));
}

}  // namespace pp::common
