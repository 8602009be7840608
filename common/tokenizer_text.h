// Private to common/tokenizer*.cc: the text side of GPT-2's tokenizer: UTF-8 repair, the
// pre-tokenization regex, and the byte <-> character map of byte-level BPE. Pure; thread-safe.
#ifndef PP_COMMON_TOKENIZER_TEXT_H_
#define PP_COMMON_TOKENIZER_TEXT_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace pp::common {

bool IsValidUtf8(absl::string_view text);
// `text` with each maximal invalid subsequence replaced by U+FFFD, exactly as Python's
// bytes.decode("utf-8", "replace") does (Unicode's "substitution of maximal subparts").
std::string ReplaceInvalidUtf8(absl::string_view text);

// Where the pre-token of `text` that starts at `pos` ends: GPT-2's pattern (encoder.py)
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// as HF `tokenizers` (Oniguruma) matches it. REQUIRES `text` valid UTF-8, pos < text.size() on
// a character boundary.
size_t Gpt2PreTokenEnd(absl::string_view text, size_t pos);

// bytes_to_unicode of GPT-2's encoder.py: the character (UTF-8) that stands for byte `b` in
// vocab.json and merges.txt.
std::string ByteToByteLevel(uint8_t b);
// The bytes a vocabulary token stands for; a token with a character outside the map is its own
// UTF-8 (as HF's ByteLevel decoder does: added tokens such as "<|endoftext|>").
std::string ByteLevelToBytes(absl::string_view token);

}  // namespace pp::common

#endif  // PP_COMMON_TOKENIZER_TEXT_H_
