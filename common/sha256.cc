#include "common/sha256.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/strings/escaping.h"
#include "common/file_io.h"

namespace pp::common {
namespace {

using DigestContext = std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)>;

DigestContext NewContext() {
  DigestContext ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr);
  return ctx;
}

std::string FinalHex(EVP_MD_CTX* ctx) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_DigestFinal_ex(ctx, digest, &length);
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), length));
}

}  // namespace

std::string Sha256Hex(absl::string_view bytes) {
  DigestContext ctx = NewContext();
  EVP_DigestUpdate(ctx.get(), bytes.data(), bytes.size());
  return FinalHex(ctx.get());
}

absl::StatusOr<std::string> Sha256File(const std::string& path) {
  absl::StatusOr<RegularFile> file = RegularFile::Open(path);
  if (!file.ok()) return file.status();
  DigestContext ctx = NewContext();
  std::vector<uint8_t> buffer(1 << 20);
  for (uint64_t offset = 0; offset < file->size(); offset += buffer.size()) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buffer.size(), file->size() - offset));
    if (absl::Status read = file->ReadAt(offset, n, buffer.data()); !read.ok()) return read;
    EVP_DigestUpdate(ctx.get(), buffer.data(), n);
  }
  return FinalHex(ctx.get());
}

}  // namespace pp::common
