// GPT-2's byte-level BPE (Radford et al. 2019, "Language Models are Unsupervised Multitask
// Learners", section 2.2), loaded from a Hugging Face tokenizer folder, giving the ids Hugging
// Face `tokenizers` gives on every input.
//
// A folder holds vocab.json + merges.txt (GPT-2's original files), or tokenizer.json whose model
// is BPE with a ByteLevel pre-tokenizer; special tokens (<|endoftext|>) come from
// tokenizer.json's added_tokens or, for vocab.json, from the vocabulary itself.
//
// Threading: a loaded Tokenizer is immutable apart from an internal cache of encoded words
// guarded by its own (sharded) locks; Encode and Decode may run on many threads at once.
#ifndef PP_COMMON_TOKENIZER_H_
#define PP_COMMON_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace pp::common {

class Tokenizer {
 public:
  // InvalidArgument "DIR/FILE: what is wrong" (first broken line or entry named) for a folder
  // without the files, unreadable or oversized (over 64 MiB) files, malformed JSON, a merge naming
  // a token the vocabulary lacks, duplicate ids, and settings that would give other ids than
  // GPT-2's pipeline (a normalizer, another pre-tokenizer or model, dropout, added tokens with
  // lstrip/rstrip/single_word); never a crash on any bytes. tokenizer.json is read when present.
  static absl::StatusOr<Tokenizer> Load(const std::string& dir);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Token ids of `text`, those of `tokenizers`' encode(text, add_special_tokens=False); added
  // tokens written in the text (<|endoftext|>) become their id.
  // Invalid UTF-8 is read as Python's bytes.decode("utf-8", "replace") reads it (each maximal
  // invalid subsequence is U+FFFD), so the ids equal `tokenizers`' on that decoded string.
  std::vector<int32_t> Encode(absl::string_view text) const;
  // The bytes of `ids`; InvalidArgument for an id outside the vocabulary.
  // Decode(Encode(x)) == x for valid UTF-8 x.
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const;

  // One past the largest id (the vocabulary and the special tokens).
  int32_t vocab_size() const;
  // The id of <|endoftext|>, the document separator; nullopt when the folder has none.
  std::optional<int32_t> end_of_text() const;
  // The files Load read, relative to the folder (what ppctl export copies).
  const std::vector<std::string>& files() const;
  // True when a text cut right after a "\n" that has a printable non-space ASCII byte on each
  // side encodes as its two pieces do (Encode(a + b) == Encode(a) + Encode(b)): the GPT-2 pattern
  // always ends a pre-token there. False with add_prefix_space, without the pattern (use_regex
  // false), or when an added token holds a newline. ppctl tokenize cuts documents there to
  // encode one document on many threads.
  bool SplitsAfterNewlines() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace pp::common

#endif  // PP_COMMON_TOKENIZER_H_
