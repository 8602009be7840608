// llm.c's token shard format (karpathy/llm.c dev/data/data_common.py, "gpt-2" kind), which
// `ppctl tokenize` writes and data.format "llmc" reads:
//   header: 256 little-endian int32 (1024 bytes): [0] magic 20240520, [1] version 1,
//           [2] token count n, the rest 0
//   body:   n little-endian uint16 token ids
// The file is exactly 1024 + 2n bytes. llm.c's Llama-3 kind (magic 20240801, uint32 ids) is
// recognised only to be refused by name. Pure: no I/O; errors name `name` (a path) and say what is
// wrong, never the file's bytes.
#ifndef PP_COMMON_LLMC_SHARD_H_
#define PP_COMMON_LLMC_SHARD_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pp::common {

inline constexpr int32_t kLlmcMagic = 20240520;
inline constexpr int32_t kLlmcVersion = 1;
inline constexpr int64_t kLlmcHeaderBytes = 256 * 4;
// The most tokens a header can state (an int32).
inline constexpr int64_t kLlmcMaxTokens = INT32_MAX;

// The token count of a shard whose first kLlmcHeaderBytes bytes are `header` and whose size is
// `file_size`. InvalidArgument "NAME: ..." when the header is short, the magic or version is
// wrong, the count is negative, or 1024 + 2 x count != file_size (a truncated or padded shard).
absl::StatusOr<int64_t> LlmcTokenCount(absl::string_view header, uint64_t file_size,
                                       absl::string_view name);

// The 1024-byte header of a shard of `tokens` ids. REQUIRES 0 <= tokens <= kLlmcMaxTokens.
std::string LlmcHeader(int64_t tokens);

}  // namespace pp::common

#endif  // PP_COMMON_LLMC_SHARD_H_
