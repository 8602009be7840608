// The --tokenizer=DIR of `ppctl sample` and `ppctl export`: a Hugging Face tokenizer folder
// (common/tokenizer.h), else the one the checkpoint's job names (data.tokenizer), and the copy of
// it that export puts beside the model.
#ifndef PP_CLIENT_TOKENIZER_ARG_H_
#define PP_CLIENT_TOKENIZER_ARG_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/tokenizer.h"
#include "pp/v1/job.pb.h"

ABSL_DECLARE_FLAG(std::string, tokenizer);

namespace pp::client {

struct FoundTokenizer {
  std::string dir;  // the folder it was loaded from
  common::Tokenizer tokenizer;
};

// The folder `flag_dir` when set; else the job's data.tokenizer when it loads from here (the path
// is as the workers saw it, under their --data_root; a relative one resolves against this
// process's working directory); nullopt when the job had none. A job tokenizer that does not load
// here is one FailedPrecondition line that tells the user to pass --tokenizer=DIR.
absl::StatusOr<std::optional<FoundTokenizer>> FindTokenizer(const std::string& flag_dir,
                                                            const pp::v1::JobSpec& job);

// Copies the files the tokenizer was loaded from (Tokenizer::files()), and those of
// tokenizer_config.json, special_tokens_map.json, tokenizer.json, vocab.json and merges.txt its
// folder also has, into out_dir. Without a tokenizer_config.json it writes a minimal one (GPT-2's
// class, model_max_length, <|endoftext|> as bos/eos/unk when the vocabulary has it), so that
// transformers' AutoTokenizer.from_pretrained(out_dir) loads it. Returns the names written.
absl::StatusOr<std::vector<std::string>> CopyTokenizer(const FoundTokenizer& found,
                                                       int model_max_length,
                                                       const std::string& out_dir);

}  // namespace pp::client

#endif  // PP_CLIENT_TOKENIZER_ARG_H_
