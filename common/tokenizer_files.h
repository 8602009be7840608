// Private to common/tokenizer*.cc: a Hugging Face tokenizer folder as read from its files, before
// Tokenizer builds its tables (and checks that merges name tokens of the vocabulary).
#ifndef PP_COMMON_TOKENIZER_FILES_H_
#define PP_COMMON_TOKENIZER_FILES_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace pp::common {

// Ids stay below this, so a table indexed by id is bounded whatever a file says (GPT-2 has
// 50,257; the largest public vocabularies are a few hundred thousand).
inline constexpr int32_t kMaxTokenId = (1 << 24) - 1;
// Files above this are refused before they are read (GPT-2's tokenizer.json is 1.4 MB).
inline constexpr uint64_t kMaxTokenizerFileBytes = 64ull << 20;

struct TokenizerFiles {
  struct AddedToken {
    std::string content;
    int32_t id = 0;
  };
  // Token text as the files spell it: byte-level characters (bytes_to_unicode), "Ġthe".
  std::vector<std::pair<std::string, int32_t>> vocab;
  // In rank order (the first merges first).
  std::vector<std::pair<std::string, std::string>> merges;
  // "DIR/merges.txt:LINE" or "DIR/tokenizer.json: model.merges[I]": where merges[i] came from.
  std::function<std::string(size_t)> merge_origin;
  // "DIR/vocab.json" or "DIR/tokenizer.json: model.vocab".
  std::string vocab_origin;
  // Split out of the text before pre-tokenization, leftmost then longest (HF AddedVocabulary).
  std::vector<AddedToken> added;
  std::optional<std::string> unk_token;
  // ByteLevel pre-tokenizer options (HF's defaults when tokenizer.json omits them: true, true).
  bool add_prefix_space = false;
  bool use_regex = true;
  // HF BPE option (Llama 3): a pre-token that is itself in the vocabulary skips the merges.
  bool ignore_merges = false;
  std::vector<std::string> files;
};

// Reads DIR/tokenizer.json, or else DIR/vocab.json + DIR/merges.txt. InvalidArgument naming the
// file (and line or JSON field) for anything missing, oversized, malformed or unsupported.
absl::StatusOr<TokenizerFiles> ReadTokenizerFiles(const std::string& dir);

}  // namespace pp::common

#endif  // PP_COMMON_TOKENIZER_FILES_H_
