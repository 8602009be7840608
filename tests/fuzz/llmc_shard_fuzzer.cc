// libFuzzer harness: common/llmc_shard.h LlmcTokenCount on arbitrary bytes and sizes. The first 8
// bytes (little-endian) are the file's size, the rest its first bytes (the header, or less). A
// count it accepts is a shard's: exactly 1024 + 2 x count bytes, a count that LlmcHeader writes
// back to a header it reads the same; a refusal is one line that starts with the file's name.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/match.h"
#include "common/llmc_shard.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pp::common;
  if (size < 8) return 0;
  uint64_t file_size = 0;
  for (int i = 7; i >= 0; --i) file_size = file_size << 8 | data[i];
  const absl::string_view header(reinterpret_cast<const char*>(data) + 8, size - 8);
  const std::string name = "/d/shard.bin";
  absl::StatusOr<int64_t> tokens = LlmcTokenCount(header, file_size, name);
  if (!tokens.ok()) {
    const std::string message(tokens.status().message());
    if (!absl::StartsWith(message, name + ": not an llm.c token shard: ") ||
        message.find('\n') != std::string::npos) {
      std::abort();
    }
    return 0;
  }
  if (*tokens < 0 || *tokens > kLlmcMaxTokens ||
      header.size() < static_cast<size_t>(kLlmcHeaderBytes) ||
      file_size != static_cast<uint64_t>(kLlmcHeaderBytes) + 2 * static_cast<uint64_t>(*tokens)) {
    std::abort();
  }
  const std::string written = LlmcHeader(*tokens);
  // The fields it reads (magic, version, count) are the ones it writes.
  if (written.size() != static_cast<size_t>(kLlmcHeaderBytes) ||
      std::memcmp(written.data(), header.data(), 12) != 0) {
    std::abort();
  }
  absl::StatusOr<int64_t> again = LlmcTokenCount(written, file_size, name);
  if (!again.ok() || *again != *tokens) std::abort();
  return 0;
}
