#include "common/llmc_shard.h"


#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pp::common {
namespace {

// llm.c's Llama-3 shards: uint32 ids after the same 1024-byte header.
constexpr int32_t kLlmcLlama3Magic = 20240801;

int32_t Int32At(absl::string_view bytes, int index) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data()) + 4 * index;
  return static_cast<int32_t>(uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 |
                              uint32_t{p[3]} << 24);
}

absl::Status Bad(absl::string_view name, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(name, ": not an llm.c token shard: ", what));
}

}  // namespace

absl::StatusOr<int64_t> LlmcTokenCount(absl::string_view header, uint64_t file_size,
                                       absl::string_view name) {
  if (header.size() < static_cast<size_t>(kLlmcHeaderBytes)) {
    return Bad(name, absl::StrCat(file_size, " bytes, shorter than the ", kLlmcHeaderBytes,
                                  "-byte header"));
  }
  const int32_t magic = Int32At(header, 0);
  if (magic == kLlmcLlama3Magic) {
    return Bad(name, "magic 20240801 is llm.c's Llama-3 kind (uint32 ids), not supported; "
                     "GPT-2 shards have magic 20240520");
  }
  if (magic != kLlmcMagic) {
    return Bad(name, absl::StrCat("magic ", magic, ", expected ", kLlmcMagic));
  }
  const int32_t version = Int32At(header, 1);
  if (version != kLlmcVersion) {
    return Bad(name, absl::StrCat("version ", version, ", expected ", kLlmcVersion));
  }
  const int64_t tokens = Int32At(header, 2);
  if (tokens < 0) return Bad(name, absl::StrCat("token count ", tokens, " is negative"));
  // tokens <= INT32_MAX: the product cannot overflow.
  const uint64_t expected = static_cast<uint64_t>(kLlmcHeaderBytes) + 2 * static_cast<uint64_t>(tokens);
  if (file_size != expected) {
    return Bad(name, absl::StrCat("the header says ", tokens, " tokens (", expected,
                                  " bytes), the file has ", file_size, " bytes",
                                  file_size < expected ? " (truncated)" : ""));
  }
  return tokens;
}

std::string LlmcHeader(int64_t tokens) {
  std::string header(kLlmcHeaderBytes, '\0');
  const int32_t fields[3] = {kLlmcMagic, kLlmcVersion, static_cast<int32_t>(tokens)};
  for (int i = 0; i < 3; ++i) {
    const uint32_t v = static_cast<uint32_t>(fields[i]);
    for (int b = 0; b < 4; ++b) header[4 * i + b] = static_cast<char>((v >> (8 * b)) & 0xff);
  }
  return header;
}

}  // namespace pp::common
