// `ppctl sample CKPT_DIR --prompt=TEXT`: loads a checkpoint of any layout into this process and
// prints the prompt followed by the generated text (worker/trainer/sample.h). A byte-level model
// (vocab 256) reads and writes bytes; any other needs a tokenizer (--tokenizer, or the job's
// data.tokenizer: tokenizer_arg.h) to encode the prompt and decode the ids. No server.
#include <iostream>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "client/checkpoint_arg.h"
#include "client/command.h"
#include "client/tokenizer_arg.h"
#include "common/exit_code.h"
#include "worker/trainer/sample.h"

ABSL_DECLARE_FLAG(int32_t, threads);  // client/train_command.cc
ABSL_FLAG(std::string, prompt, "", "sample: the text to continue (required)");
ABSL_FLAG(int32_t, tokens, 64, "sample: tokens to generate after the prompt (bytes, byte-level)");
ABSL_FLAG(double, temperature, 1.0, "sample: softmax temperature; 0 is greedy (argmax)");
ABSL_FLAG(int32_t, top_k, 0, "sample: draw only from the K most likely tokens; 0: all");
ABSL_FLAG(uint64_t, seed, 0, "sample: the random stream; the same seed gives the same text");
ABSL_FLAG(bool, stop_at_eot, true,
          "sample: with a tokenizer, stop once <|endoftext|> is drawn (not printed)");

namespace pp::client {
namespace {

// The text generated after o.prompt through `found`'s vocabulary.
absl::StatusOr<std::string> GenerateText(trainer::Decoder& decoder, const FoundTokenizer& found,
                                         trainer::SampleOptions o) {
  const common::Tokenizer& tok = found.tokenizer;
  if (tok.vocab_size() > decoder.real_vocab_size()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the tokenizer ", found.dir, " has ", tok.vocab_size(),
                     " ids, more than the model's vocabulary of ", decoder.real_vocab_size()));
  }
  std::optional<int32_t> eot = tok.end_of_text();
  if (absl::GetFlag(FLAGS_stop_at_eot) && eot.has_value()) o.stop_token = *eot;
  absl::StatusOr<std::vector<int32_t>> ids =
      trainer::GenerateTokens(decoder, tok.Encode(o.prompt), o);
  if (!ids.ok()) return ids.status();
  if (!ids->empty() && ids->back() == o.stop_token) ids->pop_back();
  return tok.Decode(*ids);
}

absl::Status Sample(const std::string& ckpt_dir) {
  trainer::SampleOptions o;
  o.prompt = absl::GetFlag(FLAGS_prompt);
  o.tokens = absl::GetFlag(FLAGS_tokens);
  o.temperature = absl::GetFlag(FLAGS_temperature);
  o.top_k = absl::GetFlag(FLAGS_top_k);
  o.seed = absl::GetFlag(FLAGS_seed);
  if (o.prompt.empty()) return absl::InvalidArgumentError("--prompt=TEXT is required");
  if (o.tokens < 0) return absl::InvalidArgumentError("--tokens must be >= 0");
  if (!(o.temperature >= 0)) return absl::InvalidArgumentError("--temperature must be >= 0");
  if (o.top_k < 0) return absl::InvalidArgumentError("--top_k must be >= 0");
  if (absl::GetFlag(FLAGS_threads) < 0) return absl::InvalidArgumentError("--threads must be >= 0");
  absl::StatusOr<std::string> step_dir = ResolveCheckpointDir(ckpt_dir);
  if (!step_dir.ok()) return step_dir.status();
  pp::v1::JobSpec job;
  absl::StatusOr<std::unique_ptr<trainer::Decoder>> decoder =
      trainer::LoadDecoder(*step_dir, std::max(1, absl::GetFlag(FLAGS_threads)), &job);
  if (!decoder.ok()) return decoder.status();
  absl::StatusOr<std::optional<FoundTokenizer>> found =
      FindTokenizer(absl::GetFlag(FLAGS_tokenizer), job);
  if (!found.ok()) return found.status();
  absl::StatusOr<std::string> text;
  if (found->has_value()) {
    text = GenerateText(**decoder, **found, o);
  } else if ((*decoder)->real_vocab_size() != 256) {
    return absl::FailedPreconditionError(
        absl::StrCat("this model has vocab ", (*decoder)->vocab_size(), "; pass --tokenizer=DIR"));
  } else {
    text = trainer::Generate(**decoder, o);
  }
  if (!text.ok()) return text.status();
  std::cout << o.prompt << *text << "\n";
  return absl::OkStatus();
}

}  // namespace

Command SampleCommand() {
  Command c{"sample",
            "CKPT_DIR",
            "load the checkpoint CKPT_DIR (a step folder, or a job folder: its newest step; any "
            "layout) and print --prompt followed by --tokens generated tokens (KV cache; the same "
            "--seed gives the same text); bytes for a byte-level model, else through --tokenizer",
            {"prompt", "tokens", "temperature", "top_k", "seed", "tokenizer", "stop_at_eot",
             "threads"},
            [](const std::vector<std::string>& args) {
              if (args.size() != 1) {
                std::cerr << "ppctl sample: expected one CKPT_DIR (see ppctl sample --help)\n";
                return common::kExitUsage;
              }
              return ExitCode("sample", Sample(args[0]));
            }};
  c.flag_help["threads"] = "BLAS threads (default 0: 1)";
  c.flag_help["tokenizer"] =
      "the Hugging Face tokenizer folder to encode --prompt and decode with; default: the job's "
      "data.tokenizer when readable here; none: bytes (a vocab-256 model only)";
  return c;
}

}  // namespace pp::client
