#include "common/job_spec.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/auto_plan_spec.h"
#include "common/data_spec.h"
#include "common/file_io.h"
#include "common/hf_gpt2.h"
#include "common/packing.h"
#include "common/precision.h"
#include "common/proto_io.h"
#include "common/recompute.h"
#include "common/spec_bounds.h"
#include "common/spec_field.h"
#include "program/schedules.h"

namespace pp::common {
namespace {

using spec::Choice;
using spec::Field;

constexpr const char* kPartitions[] = {"uniform", "params", "cost", "explicit"};
constexpr const char* kDecayKinds[] = {"constant", "cosine", "linear"};

// Collects the parser's complaints instead of logging them.
class ErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (errors_.empty()) errors_ = absl::StrCat("line ", line + 1, ":", column + 1, ": ", message);
  }
  const std::string& errors() const { return errors_; }

 private:
  std::string errors_;
};

absl::Status Positive(absl::string_view field, int64_t value) {
  if (value >= 1) return absl::OkStatus();
  return Field(field, absl::StrCat("must be >= 1, got ", value));
}

absl::Status NonNegative(absl::string_view field, double value) {
  if (value >= 0 && std::isfinite(value)) return absl::OkStatus();
  return Field(field, absl::StrCat("must be a finite number >= 0, got ", value));
}

// parallel.chunks against the chunk rule of the schedule table (program/schedules.h), in a spec's
// words: "schedule zb-v needs 2 chunks, got 1", "schedule interleaved-1f1b needs >= 2 chunks".
absl::Status ValidateChunks(const prog::ScheduleKind& rule, int chunks) {
  if (prog::CheckChunkRule(rule, chunks).ok()) return absl::OkStatus();
  auto count = [](int n) { return absl::StrCat(n, n == 1 ? " chunk" : " chunks"); };
  std::string wanted;
  if (rule.min_chunks == rule.max_chunks) {
    wanted = count(rule.min_chunks);
  } else if (rule.max_chunks == 0) {
    wanted = absl::StrCat(">= ", count(rule.min_chunks));
  } else {
    wanted = absl::StrCat(rule.min_chunks, "..", count(rule.max_chunks));
  }
  return Field("parallel.chunks",
               absl::StrCat("schedule ", rule.name, " needs ", wanted, ", got ", chunks));
}

absl::Status ValidateModel(const pp::v1::ModelSpec& model) {
  for (auto [field, value] :
       {std::pair<const char*, int64_t>{"model.vocab_size", model.vocab_size()},
        {"model.seq_len", model.seq_len()},
        {"model.d_model", model.d_model()},
        {"model.n_heads", model.n_heads()},
        {"model.n_layers", model.n_layers()}}) {
    if (absl::Status s = Positive(field, value); !s.ok()) return s;
  }
  if (model.d_model() % model.n_heads() != 0) {
    return Field("model.n_heads",
                 absl::StrCat(model.n_heads(), " does not divide model.d_model ", model.d_model()));
  }
  if (model.real_vocab_size() < 0 || model.real_vocab_size() > model.vocab_size()) {
    return Field("model.real_vocab_size",
                 absl::StrCat("must be in [0, model.vocab_size ", model.vocab_size(), "], got ",
                              model.real_vocab_size()));
  }
  return absl::OkStatus();
}

absl::Status ValidatePartition(const pp::v1::ParallelSpec& parallel, int64_t units,
                               int64_t stages);

// A schedule named from the table with chunks it allows, or one carried as CSV (whose layout the
// planner checks against pipeline, chunks and train.microbatches: coordinator/plan/plan.h).
absl::Status ValidateScheduleChoice(const pp::v1::ParallelSpec& parallel) {
  if (!parallel.schedule_file().empty() && parallel.program_size() > 0) {
    return Field("parallel.program", "give the schedule once: parallel.schedule_file or "
                                     "parallel.program, not both");
  }
  if (CarriesSchedule(parallel)) {
    if (parallel.schedule().empty()) return absl::OkStatus();
    return Field("parallel.schedule",
                 absl::StrCat("must be empty when ", CarriedScheduleField(parallel),
                              " carries the schedule, got \"", parallel.schedule(), "\""));
  }
  const std::string& schedule = parallel.schedule();
  if (absl::Status s = Choice("parallel.schedule", schedule, prog::TrainingScheduleNames());
      !s.ok())
    return s;
  return ValidateChunks(*prog::FindSchedule(schedule), parallel.chunks());
}

absl::Status ValidateParallel(const pp::v1::JobSpec& spec) {
  const pp::v1::ParallelSpec& parallel = spec.parallel();
  if (IsAutoSchedule(parallel)) return ValidateAutoParallel(spec);
  for (auto [field, value] :
       {std::pair<const char*, int64_t>{"parallel.pipeline", parallel.pipeline()},
        {"parallel.chunks", parallel.chunks()},
        {"parallel.tensor", parallel.tensor()},
        {"parallel.data", parallel.data()}}) {
    if (absl::Status s = Positive(field, value); !s.ok()) return s;
  }
  if (spec.model().n_heads() % parallel.tensor() != 0) {
    return Field(
        "parallel.tensor",
        absl::StrCat(parallel.tensor(), " does not divide model.n_heads ", spec.model().n_heads()));
  }
  if (parallel.recompute() != "auto") {
    if (auto mode = RecomputeFromName(parallel.recompute()); !mode.ok()) return mode.status();
  }
  if (absl::Status s = ValidateScheduleChoice(parallel); !s.ok()) return s;
  // Partition units: the embedding, n_layers blocks, and the head.
  int64_t units = int64_t{spec.model().n_layers()} + 2;
  int64_t stages = int64_t{parallel.pipeline()} * parallel.chunks();
  if (units < stages) {
    return Field("parallel.pipeline",
                 absl::StrCat("pipeline ", parallel.pipeline(), " x chunks ", parallel.chunks(),
                              " = ", stages, " stages but the model has only ", units,
                              " partition units (model.n_layers + 2)"));
  }
  return ValidatePartition(parallel, units, stages);
}

// parallel.partition, and with "explicit" the stage_layers over `stages` stages that cover the
// model's `units` partition units.
absl::Status ValidatePartition(const pp::v1::ParallelSpec& parallel, int64_t units,
                               int64_t stages) {
  if (absl::Status s = Choice("parallel.partition", parallel.partition(), kPartitions); !s.ok()) {
    return s;
  }
  if (parallel.partition() != "explicit") {
    if (!parallel.stage_layers().empty()) {
      return Field("parallel.stage_layers", "only allowed with partition \"explicit\"");
    }
    return absl::OkStatus();
  }
  if (parallel.stage_layers_size() != stages) {
    return Field("parallel.stage_layers",
                 absl::StrCat("has ", parallel.stage_layers_size(),
                              " entries, need pipeline x chunks = ", stages));
  }
  int64_t sum = 0;
  for (int i = 0; i < parallel.stage_layers_size(); ++i) {
    if (parallel.stage_layers(i) < 1) {
      return Field(absl::StrCat("parallel.stage_layers[", i, "]"),
                   absl::StrCat("must be >= 1, got ", parallel.stage_layers(i)));
    }
    sum += parallel.stage_layers(i);
  }
  if (sum != units) {
    return Field("parallel.stage_layers",
                 absl::StrCat("sum to ", sum, ", need model.n_layers + 2 = ", units));
  }
  return absl::OkStatus();
}

// train.steps >= 1 unless train.epochs stands for it (common/epoch.h ResolveEpochs turns epochs
// into steps when ppcoord knows the data; a stored spec holds both).
absl::Status ValidateTrain(const pp::v1::TrainSpec& train) {
  if (absl::Status s = NonNegative("train.epochs", train.epochs()); !s.ok()) return s;
  const int64_t steps = train.epochs() > 0 ? std::max(1, train.steps()) : train.steps();
  for (auto [field, value] : {std::pair<const char*, int64_t>{"train.steps", steps},
                              {"train.microbatches", train.microbatches()},
                              {"train.microbatch_size", train.microbatch_size()},
                              {"train.threads", train.threads()}}) {
    if (absl::Status s = Positive(field, value); !s.ok()) return s;
  }
  for (auto [field, value] : {std::pair<const char*, double>{"train.lr", train.lr()},
                              {"train.weight_decay", train.weight_decay()},
                              {"train.grad_clip", train.grad_clip()},
                              {"train.max_bad_steps", train.max_bad_steps()},
                              {"train.warmup_steps", train.warmup_steps()},
                              {"train.decay_steps", train.decay_steps()},
                              {"train.min_lr", train.min_lr()}}) {
    if (absl::Status s = NonNegative(field, value); !s.ok()) return s;
  }
  if (!train.decay().empty()) {
    if (absl::Status s = Choice("train.decay", train.decay(), kDecayKinds); !s.ok()) return s;
  }
  if (auto precision = PrecisionFromName(train.precision()); !precision.ok()) {
    return precision.status();
  }
  if (train.min_lr() > train.lr()) {
    return Field("train.min_lr", absl::StrCat("must be <= train.lr (", train.lr(), "), got ",
                                              train.min_lr()));
  }
  for (auto [field, value] : {std::pair<const char*, double>{"train.beta1", train.beta1()},
                              {"train.beta2", train.beta2()}}) {
    if (!(value >= 0 && value < 1))
      return Field(field, absl::StrCat("must be in [0, 1), got ", value));
  }
  if (!(train.eps() > 0 && std::isfinite(train.eps()))) {
    return Field("train.eps", absl::StrCat("must be > 0, got ", train.eps()));
  }
  return absl::OkStatus();
}

// spec.elastic (docs/recovery.md "Elastic jobs"): its bounds around the layout of spec.parallel,
// which the job starts on; resizes need a schedule ppcoord generates for any depth.
absl::Status ValidateElastic(const pp::v1::JobSpec& spec) {
  if (!spec.has_elastic()) return absl::OkStatus();
  const pp::v1::ElasticSpec& e = spec.elastic();
  const int64_t layout = static_cast<int64_t>(std::max(1, spec.parallel().pipeline())) *
                         std::max(1, spec.parallel().data()) *
                         std::max(1, spec.parallel().tensor());
  const int tensor = std::max(1, spec.parallel().tensor());
  if (CarriesSchedule(spec.parallel())) {
    return Field("elastic",
                 absl::StrCat("needs a generated schedule: ", CarriedScheduleField(spec.parallel()),
                              " fixes the pipeline depth"));
  }
  if (e.min_workers() < tensor || e.min_workers() > layout) {
    return Field("elastic.min_workers",
                 absl::StrCat("must be in [parallel.tensor, the layout's workers] = [", tensor,
                              ", ", layout, "], got ", e.min_workers()));
  }
  if (e.max_workers() != 0 && (e.max_workers() < layout || e.max_workers() > kMaxWorldSize)) {
    return Field("elastic.max_workers",
                 absl::StrCat("must be 0 (the layout's workers) or in [", layout, ", ",
                              kMaxWorldSize, "], got ", e.max_workers()));
  }
  constexpr double kMaxWaitSeconds = 86400;
  for (const auto& [field, seconds] :
       {std::pair<const char*, double>{"elastic.grace_seconds", e.grace_seconds()},
        {"elastic.grow_after_seconds", e.grow_after_seconds()}}) {
    if (absl::Status s = NonNegative(field, seconds); !s.ok()) return s;
    if (seconds > kMaxWaitSeconds) {
      return Field(field, absl::StrCat("must be at most ", kMaxWaitSeconds, ", got ", seconds));
    }
  }
  return absl::OkStatus();
}

// eval: off (batches 0, nothing else set), or batches >= 1 with exactly one of data and
// holdout_fraction.
absl::Status ValidateEvalFields(const pp::v1::JobSpec& spec) {
  const pp::v1::EvalSpec& eval = spec.eval();
  const bool has_data = eval.has_data();
  const bool has_holdout = eval.holdout_fraction() != 0;
  if (eval.batches() < 0) {
    return Field("eval.batches", absl::StrCat("must be >= 0, got ", eval.batches()));
  }
  if (eval.every_steps() < 0) {
    return Field("eval.every_steps", absl::StrCat("must be >= 0, got ", eval.every_steps()));
  }
  if (eval.batches() == 0) {
    if (eval.every_steps() == 0 && !has_data && !has_holdout) return absl::OkStatus();
    return Field("eval.batches", "must be >= 1 when eval sets every_steps, data or holdout_fraction");
  }
  if (has_data == has_holdout) {
    return Field("eval", "needs exactly one of eval.data and eval.holdout_fraction");
  }
  if (has_data) return absl::OkStatus();  // its fields: ValidateDataFields (common/data_spec.h)
  if (!(eval.holdout_fraction() > 0 && eval.holdout_fraction() < 1)) {
    return Field("eval.holdout_fraction",
                 absl::StrCat("must be in (0, 1), got ", eval.holdout_fraction()));
  }
  return absl::OkStatus();
}

// model.init_from: a Hugging Face GPT-2 folder whose config.json is the spec's model. Its weights
// are checked where they are loaded (each worker, the trainer): reading them here would cost
// ppcoord a copy of the model for every submission.
absl::Status ValidateInitFrom(const pp::v1::ModelSpec& model,
                              const std::vector<std::string>& roots) {
  if (model.init_from().empty()) return absl::OkStatus();
  absl::StatusOr<pp::v1::ModelSpec> hf = ReadHfGpt2Config(model.init_from(), roots);
  if (!hf.ok()) return Field("model.init_from", hf.status().message());
  const std::string config = absl::StrCat(model.init_from(), "/", kHfConfigFile);
  pp::v1::ModelSpec fitted = model;
  if (absl::Status s = FitModelSpec(*hf, config, &fitted); !s.ok()) return s;
  if (fitted.tie_embeddings() != model.tie_embeddings()) {
    return Field("model.tie_embeddings",
                 absl::StrCat("the spec says ", model.tie_embeddings() ? "true" : "false", ", ",
                              config, " says tie_word_embeddings ",
                              hf->tie_embeddings() ? "true" : "false"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<pp::v1::JobSpec> ParseJobSpec(absl::string_view text, absl::string_view origin) {
  pp::v1::JobSpec spec;
  absl::string_view stripped = absl::StripLeadingAsciiWhitespace(text);
  if (!stripped.empty() && stripped.front() == '{') {
    absl::Status parsed = JsonToMessage(text, &spec);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(origin, ": not a valid JobSpec (JSON): ", parsed.message()));
    }
    return spec;
  }
  google::protobuf::TextFormat::Parser parser;
  ErrorCollector errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(std::string(text), &spec)) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": not a valid JobSpec (text format): ", errors.errors()));
  }
  return spec;
}

absl::StatusOr<pp::v1::JobSpec> LoadJobSpec(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  return ParseJobSpec(*text, path);
}

int32_t RealVocabSize(const pp::v1::ModelSpec& model) {
  return model.real_vocab_size() > 0 ? model.real_vocab_size() : model.vocab_size();
}

bool IsAutoSchedule(const pp::v1::ParallelSpec& parallel) {
  return parallel.schedule() == prog::kAutoSchedule;
}


void ApplyDefaults(pp::v1::JobSpec* spec) {
  pp::v1::ParallelSpec* parallel = spec->mutable_parallel();
  const bool auto_schedule = IsAutoSchedule(*parallel);
  if (auto_schedule) ApplyAutoPlanDefaults(parallel->mutable_auto_plan());
  // 1 for every schedule. The table's default_chunks agrees for the one-chunk schedules; for zb-v
  // (2) a spec without chunks is refused ("needs 2 chunks, got 1"), not given a layout it did not
  // ask for, as callers and the tests rely on, and interleaved-1f1b is refused the same way.
  if (parallel->chunks() == 0 && !auto_schedule) parallel->set_chunks(1);
  if (parallel->tensor() == 0) parallel->set_tensor(1);
  if (parallel->data() == 0) parallel->set_data(1);
  if (parallel->partition().empty() && !auto_schedule) parallel->set_partition("cost");
  if (parallel->recompute().empty()) parallel->set_recompute("none");
  pp::v1::TrainSpec* train = spec->mutable_train();
  if (train->beta1() == 0) train->set_beta1(0.9);
  if (train->beta2() == 0) train->set_beta2(0.95);
  if (train->eps() == 0) train->set_eps(1e-8);
  if (train->threads() == 0) train->set_threads(1);
  if (train->tokens_per_microbatch() > 0 && train->microbatch_size() == 0) {
    train->set_microbatch_size(1);  // a packed microbatch is one row (common/packing.h)
  }
  if (train->precision().empty()) train->set_precision("fp32");
  if (spec->checkpoint().keep() == 0) spec->mutable_checkpoint()->set_keep(3);
  ApplyDataDefaults(spec);
}

absl::Status ValidateJobSpecFields(const pp::v1::JobSpec& spec) {
  if (absl::Status s = ValidateModel(spec.model()); !s.ok()) return s;
  if (absl::Status s = ValidateParallel(spec); !s.ok()) return s;
  if (absl::Status s = ValidateTrain(spec.train()); !s.ok()) return s;
  if (absl::Status s = CheckSpecBounds(spec); !s.ok()) return s;
  if (spec.checkpoint().every_steps() < 0) {
    return Field("checkpoint.every_steps",
                 absl::StrCat("must be >= 0, got ", spec.checkpoint().every_steps()));
  }
  if (absl::Status s = Positive("checkpoint.keep", spec.checkpoint().keep()); !s.ok()) return s;
  if (spec.max_restarts() < 0) {
    return Field("max_restarts", absl::StrCat("must be >= 0, got ", spec.max_restarts()));
  }
  // With the restart backoff capped at 60 s (docs/jobs.md), a failing job ends within two hours.
  constexpr int kMaxRestarts = 100;
  if (spec.max_restarts() > kMaxRestarts) {
    return Field("max_restarts",
                 absl::StrCat("must be <= ", kMaxRestarts, ", got ", spec.max_restarts()));
  }
  if (absl::Status s = ValidateEvalFields(spec); !s.ok()) return s;
  if (absl::Status s = ValidateElastic(spec); !s.ok()) return s;
  if (absl::Status s = ValidateDataFields(spec); !s.ok()) return s;
  return ValidatePacking(spec);
}

absl::StatusOr<int64_t> CheckSpecFiles(const pp::v1::JobSpec& spec,
                                       const std::vector<std::string>& data_roots) {
  absl::StatusOr<int64_t> windows = CheckDataFiles(spec, data_roots);
  if (!windows.ok()) return windows.status();
  if (absl::Status s = ValidateInitFrom(spec.model(), data_roots); !s.ok()) return s;
  return windows;
}

absl::Status ValidateSpecFiles(const pp::v1::JobSpec& spec,
                               const std::vector<std::string>& data_roots) {
  return CheckSpecFiles(spec, data_roots).status();
}

absl::Status ValidateJobSpec(const pp::v1::JobSpec& spec,
                             const std::vector<std::string>& data_roots) {
  if (absl::Status s = ValidateJobSpecFields(spec); !s.ok()) return s;
  return ValidateSpecFiles(spec, data_roots);
}

std::vector<std::pair<std::string, std::string>> SpecInputPaths(const pp::v1::JobSpec& spec) {
  // A generated data set names no file (a missing path is ValidateDataFields' error to give).
  std::vector<std::pair<std::string, std::string>> paths = DataInputPaths("data", spec.data());
  for (auto& named : DataInputPaths("eval.data", spec.eval().data())) {
    paths.push_back(std::move(named));
  }
  if (!spec.model().init_from().empty()) {
    paths.emplace_back("model.init_from", spec.model().init_from());
  }
  return paths;
}

const char* CarriedScheduleField(const pp::v1::ParallelSpec& parallel) {
  return parallel.program_size() > 0 ? "parallel.program" : "parallel.schedule_file";
}

bool CarriesSchedule(const pp::v1::ParallelSpec& parallel) {
  return !parallel.schedule_file().empty() || parallel.program_size() > 0;
}

std::string CarriedScheduleCsv(const pp::v1::ParallelSpec& parallel) {
  if (!parallel.schedule_file().empty()) return parallel.schedule_file();
  return absl::StrJoin(parallel.program(), "\n");
}

std::string ScheduleLabel(const pp::v1::ParallelSpec& parallel) {
  return CarriesSchedule(parallel) ? std::string(prog::kScheduleFileName) : parallel.schedule();
}

}  // namespace pp::common
