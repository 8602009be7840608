// `ppctl export CKPT_DIR OUT_DIR --format=hf-gpt2`: a checkpoint of any layout as a Hugging Face
// GPT-2 folder (common/hf_gpt2.h). `ppctl import HF_DIR --job=SPEC`: trains the job spec SPEC in
// this process starting from that folder's weights (worker/trainer/train_from.h), after checking
// the folder against it. No server.
#include <iostream>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/checkpoint_arg.h"
#include "client/command.h"
#include "common/checkpoint.h"
#include "common/exit_code.h"
#include "common/hf_gpt2.h"
#include "common/job_spec.h"
#include "worker/trainer/train_from.h"

ABSL_DECLARE_FLAG(std::string, format);          // client/plan_command.cc
ABSL_DECLARE_FLAG(std::string, job);             // client/up_command.cc
ABSL_DECLARE_FLAG(std::string, checkpoint_dir);  // client/train_command.cc
ABSL_DECLARE_FLAG(int32_t, threads);             // client/train_command.cc

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
  if (absl::Status s = common::WriteHfGpt2(out_dir, model, checkpoint->tensors); !s.ok()) {
    return s;
  }
  std::cout << "exported " << *step_dir << " (step " << checkpoint->manifest.step() << ", "
            << checkpoint->tensors.size() << " tensors, vocab " << model.vocab_size() << ", "
            << model.n_layers() << " layers, C " << model.d_model() << ", T " << model.seq_len()
            << (model.tie_embeddings() ? ", tied head" : ", untied head") << ") to " << out_dir
            << "/{" << common::kHfConfigFile << "," << common::kHfWeightsFile << "}\n";
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
  std::cout << "imported " << hf_dir << " (" << hf->tensors.size() << " tensors, vocab "
            << hf->model.vocab_size() << ", " << hf->model.n_layers() << " layers, C "
            << hf->model.d_model() << ", T " << hf->model.seq_len()
            << (hf->model.tie_embeddings() ? ", tied head" : ", untied head") << "): training job "
            << spec->name() << " from it\n";
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
            "GPT2LMHeadModel.from_pretrained(OUT_DIR)",
            {"format"},
            [](const std::vector<std::string>& args) {
              if (args.size() != 2) {
                std::cerr << "ppctl export: expected CKPT_DIR OUT_DIR (see ppctl export --help)\n";
                return common::kExitUsage;
              }
              return ExitCode("export", Export(args[0], args[1]));
            }};
  c.flag_help["format"] = "required: hf-gpt2 (the Hugging Face GPT-2 layout; the only format)";
  return c;
}

Command ImportCommand() {
  Command c{"import",
            "HF_DIR",
            "train the job spec --job in this process starting from the weights of the Hugging "
            "Face GPT-2 folder HF_DIR (config.json + model.safetensors, e.g. save_pretrained's "
            "or ppctl export's), checked against it first; prints the step lines of ppctl train",
            {"job", "checkpoint_dir", "threads"},
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
