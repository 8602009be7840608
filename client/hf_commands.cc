// `ppctl export CKPT_DIR OUT_DIR --format=hf-gpt2`: a checkpoint of any layout as a Hugging Face
// GPT-2 folder (common/hf_gpt2.h), with the job's tokenizer beside it (tokenizer_arg.h). `ppctl
// import HF_DIR --job=SPEC`: trains the job spec SPEC in this process starting from that folder's
// weights (worker/trainer/train_from.h), after checking the folder against it; --pad_vocab_to
// pads GPT-2's 50257 to a multiple (job.proto model.real_vocab_size). No server.
#include <iostream>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/checkpoint_arg.h"
#include "client/command.h"
#include "client/tokenizer_arg.h"
#include "common/checkpoint.h"
#include "common/exit_code.h"
#include "common/hf_gpt2.h"
#include "common/job_spec.h"
#include "common/spec_bounds.h"
#include "worker/trainer/train_from.h"

ABSL_DECLARE_FLAG(std::string, format);          // client/plan_command.cc
ABSL_DECLARE_FLAG(std::string, job);             // client/up_command.cc
ABSL_DECLARE_FLAG(std::string, checkpoint_dir);  // client/train_command.cc
ABSL_DECLARE_FLAG(int32_t, threads);             // client/train_command.cc
ABSL_FLAG(int32_t, pad_vocab_to, 0,
          "import: round the vocabulary up to a multiple of N (zero rows for the padding ids, "
          "masked out of the loss): 64 makes GPT-2's 50257 50304; 0: no padding");

namespace pp::client {
namespace {

constexpr char kHfFormat[] = "hf-gpt2";

absl::Status Export(const std::string& ckpt_dir, const std::string& out_dir) {
  if (absl::GetFlag(FLAGS_format) != kHfFormat) {
    return absl::InvalidArgumentError(absl::StrCat("--format must be ", kHfFormat, ", got \"",
                                                   absl::GetFlag(FLAGS_format), "\""));
  }
  absl::StatusOr<std::string> step_dir = ResolveCheckpointDir(ckpt_dir);
  if (!step_dir.ok()) return step_dir.status();
  // Only the weights: a TP checkpoint's slices are assembled by the loader, moments skipped.
  absl::StatusOr<common::Checkpoint> checkpoint = common::LoadCheckpoint(
      *step_dir, [](const std::string& name) { return !absl::StartsWith(name, "optim."); });
  if (!checkpoint.ok()) return checkpoint.status();
  const pp::v1::ModelSpec& model = checkpoint->manifest.spec().model();
  // Found before anything is written: a job tokenizer that does not load here stops the export.
  absl::StatusOr<std::optional<FoundTokenizer>> tokenizer =
      FindTokenizer(absl::GetFlag(FLAGS_tokenizer), checkpoint->manifest.spec());
  if (!tokenizer.ok()) return tokenizer.status();
  if (absl::Status s = common::WriteHfGpt2(out_dir, model, checkpoint->tensors); !s.ok()) {
    return s;
  }
  std::vector<std::string> files = {common::kHfConfigFile, common::kHfWeightsFile};
  if (tokenizer->has_value()) {
    absl::StatusOr<std::vector<std::string>> copied =
        CopyTokenizer(**tokenizer, model.seq_len(), out_dir);
    if (!copied.ok()) return copied.status();
    files.insert(files.end(), copied->begin(), copied->end());
  }
  const int real = common::RealVocabSize(model);
  std::cout << "exported " << *step_dir << " (step " << checkpoint->manifest.step() << ", "
            << checkpoint->tensors.size() << " tensors, vocab " << real
            << (real < model.vocab_size() ? absl::StrCat(" (", model.vocab_size(), " padded)") : "")
            << ", " << model.n_layers() << " layers, C " << model.d_model() << ", T "
            << model.seq_len() << (model.tie_embeddings() ? ", tied head" : ", untied head")
            << ") to " << out_dir << "/{" << absl::StrJoin(files, ",") << "}\n";
  return absl::OkStatus();
}

// --pad_vocab_to=N: the spec's vocab_size becomes config.json's rounded up to a multiple of N and
// its real_vocab_size config.json's (FitModelSpec then checks both against the folder).
absl::Status PadVocab(const common::HfGpt2Model& hf, pp::v1::ModelSpec* spec) {
  const int64_t pad = absl::GetFlag(FLAGS_pad_vocab_to), real = hf.model.vocab_size();
  if (pad == 0) return absl::OkStatus();
  if (pad < 0 || pad > common::kMaxVocabSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("--pad_vocab_to must be in [0, ", common::kMaxVocabSize, "], got ", pad));
  }
  const int64_t padded = (real + pad - 1) / pad * pad;  // both <= 2^20: no overflow
  if (padded > common::kMaxVocabSize || (spec->vocab_size() != 0 && spec->vocab_size() != padded)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--pad_vocab_to=", pad, " makes vocab_size ", padded, " from config.json's ", real,
        ", but the spec says ", spec->vocab_size(), " (the limit is ", common::kMaxVocabSize, ")"));
  }
  spec->set_vocab_size(static_cast<int32_t>(padded));
  if (spec->real_vocab_size() == 0) spec->set_real_vocab_size(static_cast<int32_t>(real));
  return absl::OkStatus();
}

// The job spec of --job with the model sizes it leaves out taken from `hf` (those it sets must
// agree), defaulted and validated.
absl::StatusOr<pp::v1::JobSpec> ImportSpec(const common::HfGpt2Model& hf,
                                           const std::string& hf_dir) {
  const std::string spec_path = absl::GetFlag(FLAGS_job);
  if (spec_path.empty()) return absl::InvalidArgumentError("--job=SPEC is required");
  absl::StatusOr<pp::v1::JobSpec> spec = common::LoadJobSpec(spec_path);
  if (!spec.ok()) return spec.status();
  if (absl::Status s = PadVocab(hf, spec->mutable_model()); !s.ok()) return s;
  if (absl::Status s = common::FitModelSpec(
          hf.model, absl::StrCat(hf_dir, "/", common::kHfConfigFile), spec->mutable_model());
      !s.ok()) {
    return s;
  }
  common::ApplyDefaults(&*spec);
  if (absl::Status s = common::ValidateJobSpec(*spec); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(spec_path, ": ", s.message()));
  }
  return spec;
}

absl::Status Import(const std::string& hf_dir) {
  if (absl::GetFlag(FLAGS_job).empty()) return absl::InvalidArgumentError("--job=SPEC is required");
  if (absl::GetFlag(FLAGS_threads) < 0) return absl::InvalidArgumentError("--threads must be >= 0");
  // The whole folder is read and checked before anything trains.
  absl::StatusOr<common::HfGpt2Model> hf = common::ReadHfGpt2(hf_dir);
  if (!hf.ok()) return hf.status();
  absl::StatusOr<pp::v1::JobSpec> spec = ImportSpec(*hf, hf_dir);
  if (!spec.ok()) return spec.status();
  common::PadVocabRows(spec->model(), &hf->tensors);  // the spec may pad the folder's vocabulary
  std::cout << "imported " << hf_dir << " (" << hf->tensors.size() << " tensors, vocab "
            << hf->model.vocab_size()
            << (spec->model().vocab_size() > hf->model.vocab_size()
                    ? absl::StrCat(" padded to ", spec->model().vocab_size())
                    : "")
            << ", " << hf->model.n_layers() << " layers, C " << hf->model.d_model() << ", T "
            << hf->model.seq_len() << (hf->model.tie_embeddings() ? ", tied head" : ", untied head")
            << "): training job " << spec->name() << " from it\n";
  trainer::TrainOptions options;
  options.threads = absl::GetFlag(FLAGS_threads);
  options.checkpoint_root = absl::GetFlag(FLAGS_checkpoint_dir);
  options.log = &std::cout;
  absl::StatusOr<trainer::TrainResult> result = trainer::TrainFrom(*spec, options, hf->tensors);
  if (!result.ok()) return result.status();
  std::cout << "trained " << result->losses.size() << " steps from " << hf_dir << ", final loss "
            << (result->losses.empty() ? 0.0 : result->losses.back()) << "\n";
  return absl::OkStatus();
}

}  // namespace

Command ExportCommand() {
  Command c{"export",
            "CKPT_DIR OUT_DIR",
            "write the checkpoint CKPT_DIR (a step folder, or a job folder: its newest step; any "
            "layout) as OUT_DIR/config.json + model.safetensors for transformers' "
            "GPT2LMHeadModel.from_pretrained(OUT_DIR), only the real vocabulary's rows of a "
            "padded model; with the job's tokenizer files beside them (for AutoTokenizer)",
            {"format", "tokenizer"},
            [](const std::vector<std::string>& args) {
              if (args.size() != 2) {
                std::cerr << "ppctl export: expected CKPT_DIR OUT_DIR (see ppctl export --help)\n";
                return common::kExitUsage;
              }
              return ExitCode("export", Export(args[0], args[1]));
            }};
  c.flag_help["format"] = "required: hf-gpt2 (the Hugging Face GPT-2 layout; the only format)";
  c.flag_help["tokenizer"] =
      "the tokenizer folder to copy; default: the job's data.tokenizer, which must then be "
      "readable from here; none when the job had none";
  return c;
}

Command ImportCommand() {
  Command c{"import",
            "HF_DIR",
            "train the job spec --job in this process starting from the weights of the Hugging "
            "Face GPT-2 folder HF_DIR (config.json + model.safetensors, e.g. save_pretrained's "
            "or ppctl export's), checked against it first; prints the step lines of ppctl train",
            {"job", "checkpoint_dir", "threads", "pad_vocab_to"},
            [](const std::vector<std::string>& args) {
              if (args.size() != 1) {
                std::cerr << "ppctl import: expected one HF_DIR (see ppctl import --help)\n";
                return common::kExitUsage;
              }
              return ExitCode("import", Import(args[0]));
            }};
  c.flag_help["job"] =
      "required: the job spec FILE (proto3 JSON or text) to train from HF_DIR; the model sizes it "
      "leaves out are taken from config.json, those it sets must match";
  c.flag_help["threads"] = "BLAS threads; 0 (the default): the spec's train.threads";
  return c;
}

}  // namespace pp::client
