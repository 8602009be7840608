#include "worker/trainer/trainer.h"

#include <chrono>
#include <iostream>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/checkpoint.h"
#include "common/data_spec.h"
#include "common/epoch.h"
#include "common/file_io.h"
#include "common/hf_gpt2.h"
#include "common/job_spec.h"
#include "common/manifest.h"
#include "common/packing.h"
#include "common/precision.h"
#include "common/step_math.h"
#include "kernels/ops.h"
#include "worker/data/data.h"
#include "worker/executor/sum_squares.h"
#include "worker/model/model.h"
#include "worker/optim/optim.h"
#include "worker/trainer/flop_rate.h"
#include "worker/trainer/train_from.h"

namespace pp::trainer {
namespace {

// Checkpoint of `step` completed steps: one shard, then the manifest, then pruning.
absl::Status WriteCheckpoint(kernels::Ops& ops, model::StageModel& model,
                             const pp::v1::JobSpec& spec, const std::string& root, int step,
                             int64_t train_windows) {
  const std::vector<common::Tensor> tensors = model::HostTensors(ops, model.tensors());
  const std::string dir = common::StepDir(root, spec.name(), step);
  auto shard = common::WriteShard(dir, common::ShardFileName(0), tensors);
  if (!shard.ok()) return shard.status();
  pp::v1::CheckpointLayout layout;
  layout.set_pipeline(1);
  layout.set_chunks(1);
  layout.set_tensor(1);
  layout.set_data(1);
  layout.set_schedule("single-process");
  layout.add_stage_layers(spec.model().n_layers() + 2);
  const pp::v1::CheckpointManifest manifest = common::BuildManifest(
      spec.name(), step, spec, layout, {*shard},
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(),
      train_windows);
  if (auto s = common::CommitManifest(dir, manifest); !s.ok()) return s;
  return common::PruneCheckpoints(root, spec.name(), spec.checkpoint().keep());
}

// train.epochs alone: train.steps as ppcoord derives it (common/epoch.h ResolveEpochs), at this
// process's M x B sequences per step (it trains as one replica).
absl::Status ResolveEpochSteps(pp::v1::JobSpec* spec) {
  if (spec->train().epochs() == 0) return absl::OkStatus();
  absl::StatusOr<data::TrainData> train_data = data::TrainData::Open(*spec);
  if (!train_data.ok()) return train_data.status();
  pp::v1::JobSpec replica = *spec;
  replica.mutable_parallel()->set_data(1);
  absl::StatusOr<pp::v1::JobSpec> resolved =
      common::ResolveEpochs(replica, train_data->windows());
  if (!resolved.ok()) return resolved.status();
  spec->mutable_train()->set_steps(resolved->train().steps());
  return absl::OkStatus();
}

// Step `step`'s gradients of the M microbatches (B sequences of T tokens each), in microbatch
// order; the step loss = the microbatch losses summed in double, divided by M. Packed
// microbatches (one row each, common/packing.h): their lengths are read from the index first,
// and the loss is their token mean (common::TokenMeanLoss), as every pipeline rank does it.
// `end_of_text`: with documents "mask", each microbatch's documents (worker/data/data.h) are
// derived from its window exactly as every pipeline rank derives them.
struct StepOutcome {
  double loss = 0;
  int64_t tokens = 0;
};

// The model's input of microbatch `batch`, exactly as every pipeline rank builds it
// (worker/compute/model_compute.cc RunForward): a packed row's sequences and the step's tokens,
// else the window's document starts (into *doc_start, which must outlive the input).
model::StageInput InputOf(const data::Microbatch& batch, std::optional<int32_t> end_of_text,
                          int64_t step_tokens, std::vector<int32_t>* doc_start) {
  model::StageInput in;
  in.tokens = batch.inputs.data();
  in.targets = batch.targets.data();
  if (!batch.sequences.empty()) {
    in.sequences = batch.sequences.data();
    in.num_sequences = static_cast<int>(batch.sequences.size()) - 1;
    in.step_tokens = step_tokens;
    return in;
  }
  *doc_start = data::DocumentStarts(batch, end_of_text);
  in.doc_start = doc_start->empty() ? nullptr : doc_start->data();
  return in;
}
absl::StatusOr<StepOutcome> ForwardBackward(model::StageModel& model,
                                            const data::TrainData& train_data,
                                            std::optional<int32_t> end_of_text, int step, int M,
                                            int B, int T) {
  model.ZeroGrads();
  const int64_t position = common::DataPositionAtStep(step, M, B);
  const bool packed = train_data.packed() != nullptr;
  std::vector<int64_t> lengths(M, int64_t{B} * T);
  if (packed) {
    for (int j = 0; j < M; ++j) lengths[j] = train_data.RowTokens(position + j);
  }
  StepOutcome outcome;
  for (int64_t n : lengths) outcome.tokens += n;
  std::vector<double> losses;
  for (int j = 0; j < M; ++j) {
    auto batch = data::ReadMicrobatch(train_data, position, j, B, T);
    if (!batch.ok()) return batch.status();
    std::vector<int32_t> doc_start;
    auto mb_loss =
        model.Forward(j, InputOf(*batch, end_of_text, outcome.tokens, &doc_start), nullptr);
    if (!mb_loss.ok()) return mb_loss.status();
    if (auto s = model.Backward(j, nullptr, nullptr); !s.ok()) return s;
    losses.push_back(*mb_loss);
  }
  if (packed) {
    outcome.loss = common::TokenMeanLoss(losses, lengths);
  } else {
    for (double loss : losses) outcome.loss += loss;
    outcome.loss /= M;
  }
  return outcome;
}

// The eval loss (spec.eval): batches i = 0..batches-1 of M microbatches each, read like the
// steps' (position i*M*B) from the eval windows, each microbatch evaluated without touching a
// gradient; their mean losses summed in double in (batch, microbatch) order, divided by the count.
// Packed rows: each batch's token mean (common::TokenMeanLoss), those summed over the batches.
absl::StatusOr<double> EvalLoss(model::StageModel& model, const data::EvalSource& eval,
                                std::optional<int32_t> end_of_text, int batches, int M, int B,
                                int T) {
  double sum = 0.0;
  for (int i = 0; i < batches; ++i) {
    const int64_t position = common::DataPositionAtStep(i, M, B);
    std::vector<double> losses;
    std::vector<int64_t> lengths;
    for (int j = 0; j < M; ++j) {
      auto batch = data::ReadEvalMicrobatch(eval, position, j, B, T);
      if (!batch.ok()) return batch.status();
      std::vector<int32_t> doc_start;
      // No gradient is seeded: the row's own tokens stand for the step's.
      const int64_t tokens = static_cast<int64_t>(batch->inputs.size());
      auto mb_loss = model.Evaluate(InputOf(*batch, end_of_text, tokens, &doc_start), nullptr);
      if (!mb_loss.ok()) return mb_loss.status();
      if (!eval.packed) sum += *mb_loss;
      losses.push_back(*mb_loss);
      lengths.push_back(tokens);
    }
    if (eval.packed) sum += common::TokenMeanLoss(losses, lengths);
  }
  return sum / (eval.packed ? static_cast<double>(batches) : static_cast<double>(batches) * M);
}

// The eval windows with spec.eval, else nullopt.
absl::StatusOr<std::optional<data::EvalSource>> OpenEval(const pp::v1::JobSpec& spec) {
  if (!common::EvalEnabled(spec)) return std::optional<data::EvalSource>();
  absl::StatusOr<data::EvalSource> opened = data::OpenEvalSource(spec);
  if (!opened.ok()) return opened.status();
  return std::optional<data::EvalSource>(*std::move(opened));
}

// After `done` of `steps` steps: the evaluation when one is due, kept in `result` and logged.
absl::Status EvaluateIfDue(const pp::v1::JobSpec& spec, model::StageModel& model,
                           const std::optional<data::EvalSource>& eval, int done, int steps,
                           std::ostream* log, TrainResult& result) {
  if (!eval.has_value() || !(common::EvalDue(spec, done) || done == steps)) {
    return absl::OkStatus();
  }
  const pp::v1::TrainSpec& train = spec.train();
  absl::StatusOr<double> loss =
      EvalLoss(model, *eval, data::DocumentEndOfText(spec), spec.eval().batches(),
               train.microbatches(), train.microbatch_size(), spec.model().seq_len());
  if (!loss.ok()) return loss.status();
  result.evals.push_back({done, *loss});
  if (log != nullptr) *log << absl::StrFormat("eval step %d/%d loss %.6f\n", done, steps, *loss);
  return absl::OkStatus();
}

// Step `step`'s (0-based) AdamW update unless its loss or global gradient norm is not finite:
// then weights and moments stay as they are, exactly as the distributed runtime skips it.
// Returns the pre-clip global norm, and what was not finite.
struct Update {
  double norm = 0;
  std::optional<executor::NonFinite> non_finite;
};
Update ApplyUnlessNonFinite(kernels::Ops& ops, std::vector<model::ModelTensor>& tensors,
                            const pp::v1::TrainSpec& train, int step, double loss) {
  const optim::AdamWConfig adamw = optim::AdamWConfigAtStep(train, step + 1);
  executor::RankSums sums;  // the one rank of a single process
  sums.loss = loss;
  const optim::SumSquares by_name = optim::GradSumSquares(ops, tensors);
  for (const auto& [name, sum] : by_name) sums.sums.push_back({name, sum});
  Update update;
  update.norm = optim::GlobalNorm(by_name);
  update.non_finite = executor::FindNonFinite({sums});
  if (!update.non_finite) {
    optim::ApplyAdamW(ops, tensors, adamw, step + 1,
                      optim::ClipScale(update.norm, adamw.grad_clip));
  }
  return update;
}

// The log line of step `done` (1-based) that took `seconds`.
std::string StepLine(const pp::v1::JobSpec& spec, int done, int steps, double loss,
                     const Update& update, double seconds, int64_t tokens) {
  return absl::StrFormat("step %d/%d loss %.6f lr %.3g grad_norm %.4f %.3f s %.0f tok/s%s\n", done,
                         steps, loss, common::LearningRateAt(spec.train(), done), update.norm,
                         seconds, static_cast<double>(tokens) / seconds,
                         update.non_finite ? " (skipped: not finite)" : "");
}

}  // namespace

namespace {

// The model of every unit; with `init` its values replace the seeded ones (moments stay zero).
absl::StatusOr<std::unique_ptr<model::StageModel>> CreateModel(kernels::Ops& ops,
                                                               const model::ModelConfig& config,
                                                               const model::StageOptions& stage,
                                                               const InitialWeights* init) {
  auto model = model::StageModel::Create(&ops, config, stage);
  if (!model.ok() || init == nullptr) return model;
  for (model::ModelTensor& t : (*model)->tensors()) {
    auto it = init->find(t.name);
    if (it == init->end() || it->second.data.size() != t.size) {
      return absl::InvalidArgumentError(
          absl::StrCat("the initial weights have no tensor ", t.name, " of ", t.size, " values"));
    }
    ops.CopyToDevice(t.value, it->second.data.data(), t.size);
  }
  return model;
}

// One stage holding every unit, as the spec's train and parallel.recompute say.
absl::StatusOr<model::StageOptions> WholeModelStage(const pp::v1::JobSpec& spec,
                                                    const model::ModelConfig& config) {
  model::StageOptions stage;
  stage.first_unit = 0;
  stage.last_unit = model::NumUnits(config) - 1;
  stage.microbatch_size = spec.train().microbatch_size();
  stage.microbatches = spec.train().microbatches();
  if (common::PacksMicrobatches(spec)) stage.max_tokens = spec.train().tokens_per_microbatch();
  stage.seed = spec.train().seed();
  absl::StatusOr<common::Recompute> recompute =
      common::RecomputeFromName(spec.parallel().recompute());
  if (!recompute.ok()) return recompute.status();
  stage.recompute = *recompute;
  absl::StatusOr<common::Precision> precision = common::PrecisionFromName(spec.train().precision());
  if (!precision.ok()) return precision.status();
  stage.precision = *precision;
  return stage;
}

// Train's body; `init` null: the seeded initialisation.
absl::StatusOr<TrainResult> TrainWith(const pp::v1::JobSpec& spec, const TrainOptions& options,
                                      const InitialWeights* init) {
  auto config = model::ModelConfigFromSpec(spec.model());
  if (!config.ok()) return config.status();
  const pp::v1::TrainSpec& train = spec.train();
  const int M = train.microbatches(), B = train.microbatch_size(), T = config->seq_len;
  const int steps = options.steps > 0 ? options.steps : train.steps();
  absl::StatusOr<common::Precision> precision = common::PrecisionFromName(train.precision());
  if (!precision.ok()) return precision.status();
  auto ops = kernels::MakeOps(options.device,
                              options.threads > 0 ? options.threads : train.threads(), *precision);
  if (!ops.ok()) return ops.status();
  absl::StatusOr<model::StageOptions> stage = WholeModelStage(spec, *config);
  if (!stage.ok()) return stage.status();
  auto model = CreateModel(**ops, *config, *stage, init);
  if (!model.ok()) return model.status();
  absl::StatusOr<data::TrainData> train_data = data::TrainData::Open(spec);
  if (!train_data.ok()) return train_data.status();
  absl::StatusOr<std::optional<data::EvalSource>> eval = OpenEval(spec);
  if (!eval.ok()) return eval.status();
  TrainResult result;
  int bad_steps = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int step = 0; step < steps; ++step) {
    const auto step_start = std::chrono::steady_clock::now();
    absl::StatusOr<StepOutcome> outcome =
        ForwardBackward(**model, *train_data, data::DocumentEndOfText(spec), step, M, B, T);
    if (!outcome.ok()) return outcome.status();
    const double loss = outcome->loss;
    const Update update = ApplyUnlessNonFinite(**ops, (*model)->tensors(), train, step, loss);
    if (update.non_finite && ++bad_steps > train.max_bad_steps()) {
      return executor::TooManyBadSteps(step + 1, *update.non_finite, bad_steps,
                                       train.max_bad_steps());
    }
    result.skipped_steps += update.non_finite ? 1 : 0;
    result.losses.push_back(loss);
    result.step_seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count());
    result.tokens += outcome->tokens;
    if (options.log != nullptr) {
      *options.log << StepLine(spec, step + 1, steps, loss, update, result.step_seconds.back(),
                               outcome->tokens)
                   << std::flush;  // progress also through a pipe; bench/peer times the lines
    }
    if (auto s = EvaluateIfDue(spec, **model, *eval, step + 1, steps, options.log, result);
        !s.ok()) {
      return s;
    }
    const bool due = common::CheckpointDue(step + 1, steps, spec.checkpoint().every_steps());
    if (!options.checkpoint_root.empty() && due) {
      if (auto s = WriteCheckpoint(**ops, **model, spec, options.checkpoint_root, step + 1,
                                   train_data->windows());
          !s.ok()) {
        return s;
      }
    }
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.weights = (*model)->ValuesToHost();
  return result;
}

}  // namespace

absl::StatusOr<TrainResult> Train(const pp::v1::JobSpec& spec, const TrainOptions& options) {
  if (spec.model().init_from().empty()) return TrainWith(spec, options, nullptr);
  absl::StatusOr<common::HfGpt2Model> hf = common::ReadInitFrom(spec.model());
  if (!hf.ok()) return hf.status();
  return TrainWith(spec, options, &hf->tensors);
}

absl::StatusOr<TrainResult> TrainFrom(const pp::v1::JobSpec& spec, const TrainOptions& options,
                                      const InitialWeights& init) {
  return TrainWith(spec, options, &init);
}

namespace {

// A defaulted spec made what ppcoord stores (coordinator/planning.h PlanClientSpec): its files
// fixed once, validated, data.tokenizer's <|endoftext|> resolved (common/data_spec.h), and
// train.epochs made steps.
absl::Status ResolveAsSubmitted(pp::v1::JobSpec* spec) {
  absl::StatusOr<pp::v1::JobSpec> listed = common::ResolveDataGlobs(*spec);
  if (!listed.ok()) return listed.status();
  if (auto s = common::ValidateJobSpec(*listed); !s.ok()) return s;
  absl::StatusOr<pp::v1::JobSpec> documents = common::ResolveEndOfText(*std::move(listed));
  if (!documents.ok()) return documents.status();
  *spec = *std::move(documents);
  return ResolveEpochSteps(spec);
}

}  // namespace

int TrainMain(const std::string& spec_path, const TrainOptions& options) {
  auto spec = common::LoadJobSpec(spec_path);
  if (!spec.ok()) {
    std::cerr << spec.status().message() << "\n";
    return 1;
  }
  common::ApplyDefaults(&*spec);
  if (auto s = ResolveAsSubmitted(&*spec); !s.ok()) {
    std::cerr << spec_path << ": " << s.message() << "\n";
    return 1;
  }
  TrainOptions opts = options;
  if (opts.log == nullptr) opts.log = &std::cout;
  auto result = Train(*spec, opts);
  if (!result.ok()) {
    std::cerr << "train " << spec_path << ": " << result.status().message() << "\n";
    return 1;
  }
  std::cout << absl::StrFormat(
      "trained %d steps, %d tokens in %.2f s (%.0f tok/s), final loss %.6f\n",
      result->losses.size(), result->tokens, result->seconds, result->tokens / result->seconds,
      result->losses.empty() ? 0.0 : result->losses.back());
  if (!result->evals.empty()) {
    std::cout << absl::StrFormat("eval loss %.6f after step %d\n", result->evals.back().loss,
                                 result->evals.back().step);
  }
  // The peak of this one process at the threads it trained with (flop_rate.h).
  PeakSetup setup = PeakSetupOf(*spec, opts.device, 1);
  if (opts.threads > 0) setup.threads = opts.threads;
  const double tokens_per_second =
      result->seconds > 0 && result->tokens > 0 ? result->tokens / result->seconds : 0;
  std::cout << "FLOP rate " << FlopRateText(spec->model(), tokens_per_second, setup) << "\n";
  if (!options.losses_path.empty()) {
    std::string text;
    for (size_t i = 0; i < result->losses.size(); ++i) {
      absl::StrAppendFormat(&text, "%d %.17g\n", i + 1, result->losses[i]);
    }
    if (absl::Status s = common::WriteFileAtomic(options.losses_path, text); !s.ok()) {
      std::cerr << "train " << spec_path << ": losses file: " << s.message() << "\n";
      return 1;
    }
  }
  return 0;
}

}  // namespace pp::trainer
