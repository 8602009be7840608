// SHA-256 (OpenSSL libcrypto, EVP) as 64 lowercase hex digits, for checkpoint shard integrity.
// Sha256File streams the file with pread (constant memory, no mapping: a file truncated while it is
// hashed is a DataLoss error, never a SIGBUS) and opens it as common::RegularFile::Open does.
#ifndef PP_COMMON_SHA256_H_
#define PP_COMMON_SHA256_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pp::common {

std::string Sha256Hex(absl::string_view bytes);
absl::StatusOr<std::string> Sha256File(const std::string& path);

}  // namespace pp::common

#endif  // PP_COMMON_SHA256_H_
