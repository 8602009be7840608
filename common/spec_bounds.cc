#include "common/spec_bounds.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/job_spec.h"
#include "common/packing.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/unknown_field_set.h"
#include "program/schedules.h"

namespace pp::common {
namespace {

// One size field and its ceiling.
struct FieldBound {
  const char* field;
  int64_t value;
  int64_t limit;
  const char* unit;  // "" or " bytes", after the value
  const char* why;
};

// One factor of a product: a field, or a constant of the formula (field nullptr).
struct Factor {
  const char* field;
  int64_t value;
};

absl::Status OverLimit(absl::string_view subject, absl::string_view amount, int64_t limit,
                       absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat(subject, ": ", amount, " is over the limit ", limit, " (", why, ")"));
}

int64_t ProgramBytes(const pp::v1::ParallelSpec& parallel) {
  int64_t bytes = 0;
  for (const std::string& row : parallel.program()) bytes += static_cast<int64_t>(row.size()) + 1;
  return bytes;
}

std::string Amount(std::optional<int64_t> value) {
  return value ? absl::StrCat(*value) : std::string("more than 2^63");
}

absl::Status CheckFields(const pp::v1::JobSpec& spec) {
  const pp::v1::ModelSpec& model = spec.model();
  const pp::v1::ParallelSpec& parallel = spec.parallel();
  const FieldBound bounds[] = {
      {"name", static_cast<int64_t>(spec.name().size()), kMaxNameBytes, " bytes",
       "it is stored, logged and sent with every event of the job"},
      {"model.vocab_size", model.vocab_size(), kMaxVocabSize, "",
       "above any tokenizer in use; a uint16 data file needs at most 65536"},
      {"model.seq_len", model.seq_len(), kMaxSeqLen, "",
       "attention keeps seq_len^2 scores per head and sequence, below 2^31"},
      {"model.d_model", model.d_model(), kMaxDModel, "",
       "an MLP weight holds 4 x d_model^2 elements, below 2^31"},
      {"model.n_layers", model.n_layers(), kMaxLayers, "",
       "the planner keeps tables of stages x (n_layers + 2) and partitions by params or cost in "
       "O(stages x (n_layers + 2)^2) steps"},
      {"parallel.pipeline", parallel.pipeline(), kMaxAxis, "", "one worker per rank"},
      {"parallel.chunks", parallel.chunks(), kMaxChunks, "", "stages per rank"},
      {"parallel.tensor", parallel.tensor(), kMaxAxis, "", "one worker per rank"},
      {"parallel.data", parallel.data(), kMaxAxis, "", "one worker per rank"},
      {"parallel.bucket_bytes", parallel.bucket_bytes(), kMaxBucketBytes, " bytes",
       "one all-reduce message of gradients"},
      {"parallel.schedule_file", static_cast<int64_t>(parallel.schedule_file().size()),
       kMaxScheduleCsvBytes, " bytes",
       "the spec travels in every task plan and checkpoint manifest, one 4 MiB gRPC message each"},
      {"parallel.program", ProgramBytes(parallel), kMaxScheduleCsvBytes, " bytes",
       "the spec travels in every task plan and checkpoint manifest, one 4 MiB gRPC message each"},
      {"train.microbatch_size", spec.train().microbatch_size(), kMaxMicrobatchSize, "",
       "sequences in one microbatch's activations"},
      {"train.threads", spec.train().threads(), kMaxThreads, "",
       "compute threads each worker process runs"},
      {"data.path", static_cast<int64_t>(spec.data().path().size()), kMaxPathBytes, " bytes",
       "PATH_MAX"},
      {"model.init_from", static_cast<int64_t>(model.init_from().size()), kMaxPathBytes,
       " bytes", "PATH_MAX"},
      {"data.generated_tokens", spec.data().generated_tokens(), kMaxGeneratedTokens, "",
       "every worker holds the generated corpus in memory, one byte per token"},
      {"checkpoint.keep", spec.checkpoint().keep(), kMaxCheckpointsKept, "",
       "each kept checkpoint is a whole copy of the model on disk"},
      {"eval.batches", spec.eval().batches(), kMaxEvalBatches, "",
       "every evaluation runs them all before training goes on"},
      {"eval.data.path", static_cast<int64_t>(spec.eval().data().path().size()), kMaxPathBytes,
       " bytes", "PATH_MAX"},
      {"eval.data.generated_tokens", spec.eval().data().generated_tokens(), kMaxGeneratedTokens,
       "", "every worker holds the generated corpus in memory, one byte per token"},
  };
  for (const FieldBound& b : bounds) {
    if (b.value > b.limit) return OverLimit(b.field, absl::StrCat(b.value, b.unit), b.limit, b.why);
  }
  if (parallel.bucket_bytes() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("parallel.bucket_bytes: must be >= 0, got ", parallel.bucket_bytes()));
  }
  return absl::OkStatus();
}

// "a x b x 4: 2 x 3 x 4 = 24 <what>, over the limit ..." when the product passes `limit`.
absl::Status CheckProduct(std::initializer_list<Factor> factors, absl::string_view what,
                          int64_t limit, absl::string_view why) {
  std::optional<int64_t> product = 1;
  for (const Factor& f : factors) {
    product = product ? CheckedProduct({*product, f.value}) : std::nullopt;
  }
  if (product && *product <= limit) return absl::OkStatus();
  std::vector<std::string> names, values;
  for (const Factor& f : factors) {
    names.push_back(f.field != nullptr ? f.field : absl::StrCat(f.value));
    values.push_back(absl::StrCat(f.value));
  }
  return OverLimit(absl::StrJoin(names, " x "),
                   absl::StrCat(absl::StrJoin(values, " x "), " = ", Amount(product), " ", what),
                   limit, why);
}

// The longest rank program times the ranks: what one step sends and reports.
absl::Status CheckScheduleSize(const pp::v1::JobSpec& spec) {
  const pp::v1::ParallelSpec& p = spec.parallel();
  const int64_t M = spec.train().microbatches();
  const std::optional<int64_t> world = CheckedProduct({p.pipeline(), p.tensor(), p.data()});
  std::optional<int64_t> per_rank =
      CarriesSchedule(p) ? MaxCarriedActionsPerRank(CarriedScheduleCsv(p))
                         : MaxActionsPerRank(p.schedule(), p.pipeline(), p.chunks(), M);
  if (IsAutoSchedule(p)) {  // the longest program the search may choose: split backwards
    const int64_t batch = M * spec.train().microbatch_size();
    per_rank = MaxActionsPerRank(
        "zb-h1", p.pipeline(), p.chunks() > 0 ? p.chunks() : p.auto_plan().max_chunks(),
        std::max<int64_t>(M, std::min<int64_t>(batch, p.auto_plan().max_microbatches())));
  }
  const std::optional<int64_t> total =
      world && per_rank ? CheckedProduct({*world, *per_rank}) : std::nullopt;
  if (total && *total <= kMaxActionsPerStep) return absl::OkStatus();
  constexpr const char* kWhy =
      "each rank's program and each step's measured trace of all ranks must fit one 4 MiB gRPC "
      "message";
  if (CarriesSchedule(p)) {
    return OverLimit(CarriedScheduleField(p),
                     absl::StrCat("its longest row makes ", Amount(total),
                                  " actions per step over all ranks (", Amount(world),
                                  " ranks x up to ", Amount(per_rank), " each)"),
                     kMaxActionsPerStep, kWhy);
  }
  return OverLimit(
      "train.microbatches",
      absl::StrCat(M, " microbatches make ", Amount(total), " actions per step over all ranks (",
                   Amount(world), " ranks x up to ", Amount(per_rank), " each: schedule ",
                   p.schedule(), " on parallel.pipeline ", p.pipeline(), " with parallel.chunks ",
                   p.chunks(), ")"),
      kMaxActionsPerStep, kWhy);
}

// The message field of the spec with the most bytes: what to shrink when the spec is too large.
std::string LargestField(const pp::v1::JobSpec& spec) {
  const google::protobuf::Reflection* reflection = spec.GetReflection();
  const google::protobuf::Descriptor* descriptor = spec.GetDescriptor();
  const google::protobuf::FieldDescriptor* largest = nullptr;
  size_t largest_bytes = 0;
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* field = descriptor->field(i);
    if (field->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE ||
        field->is_repeated() || !reflection->HasField(spec, field)) {
      continue;
    }
    const size_t bytes = reflection->GetMessage(spec, field).ByteSizeLong();
    if (bytes > largest_bytes) {
      largest = field;
      largest_bytes = bytes;
    }
  }
  if (largest == nullptr) return "";
  return absl::StrCat("; the largest field is ", largest->name(), " with ", largest_bytes,
                      " bytes");
}

// Weights and activations: every tensor a worker allocates is indexed by int32 in the kernels.
absl::Status CheckTensors(const pp::v1::JobSpec& spec) {
  const pp::v1::ModelSpec& m = spec.model();
  const int64_t B = spec.train().microbatch_size();
  constexpr const char* kWhy = "tensor indices are int32 in the kernels";
  const Factor vocab{"model.vocab_size", m.vocab_size()}, T{"model.seq_len", m.seq_len()},
      C{"model.d_model", m.d_model()}, heads{"model.n_heads", m.n_heads()},
      batch{"train.microbatch_size", B};
  for (absl::Status s : {
           CheckProduct({vocab, C}, "elements in the token embedding", kMaxTensorElements, kWhy),
           CheckProduct({batch, T, {nullptr, 4}, C}, "elements in a microbatch's MLP activation",
                        kMaxTensorElements, kWhy),
           CheckProduct({batch, T, vocab}, "elements in a microbatch's logits", kMaxTensorElements,
                        kWhy),
           CheckProduct({batch, heads, T, T}, "elements in a microbatch's attention scores",
                        kMaxTensorElements, kWhy),
       }) {
    if (!s.ok()) return s;
  }
  if (!PacksMicrobatches(spec)) return absl::OkStatus();
  // A packed row of K tokens: its pieces of at most min(T, K) keep at most K x min(T, K) scores.
  const Factor K{"train.tokens_per_microbatch", spec.train().tokens_per_microbatch()},
      piece{"model.seq_len", PieceLimit(spec)};
  for (absl::Status s : {
           CheckProduct({K, {nullptr, 4}, C}, "elements in a packed microbatch's MLP activation",
                        kMaxTensorElements, kWhy),
           CheckProduct({K, vocab}, "elements in a packed microbatch's logits", kMaxTensorElements,
                        kWhy),
           CheckProduct({heads, K, piece}, "elements in a packed microbatch's attention scores",
                        kMaxTensorElements, kWhy),
       }) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// wte + wpe + n_layers blocks of 12 C^2 + 13 C + ln_f + an untied lm_head. Taken once the field
// limits held: with n_layers <= 2^10, d_model <= 2^14, vocab_size <= 2^20 and seq_len <= 2^15 the
// sum stays below 2^44.
int64_t Parameters(const pp::v1::ModelSpec& m) {
  const int64_t C = m.d_model(), V = m.vocab_size(), T = m.seq_len(), L = m.n_layers();
  return V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C + (m.tie_embeddings() ? 0 : V * C);
}

}  // namespace

std::optional<int64_t> CheckedProduct(std::initializer_list<int64_t> factors) {
  int64_t product = 1;
  for (int64_t f : factors) {
    if (__builtin_mul_overflow(product, f, &product)) return std::nullopt;
  }
  return product;
}

std::vector<double> UnitParameters(const pp::v1::ModelSpec& model) {
  const double C = model.d_model(), vocab = model.vocab_size(), T = model.seq_len();
  std::vector<double> params(model.n_layers() + 2, 12 * C * C + 13 * C);
  params.front() = vocab * C + T * C;
  params.back() = 2 * C + (model.tie_embeddings() ? 0 : vocab * C);
  return params;
}

std::optional<int64_t> MaxActionsPerRank(const std::string& schedule, int64_t D, int64_t V,
                                         int64_t M) {
  // A schedule that splits the backward (the table's splits_backward: the zero-bubble ones, and
  // dualpipe-v for some) runs F, I, W. tests/common/spec_bounds_plan_test.cc checks the bound
  // against every schedule.
  const prog::ScheduleKind* kind = prog::FindSchedule(schedule);
  const bool split = kind != nullptr && kind->splits_backward;
  // Lowering adds a receive before and a send after a forward and a backward (or I) whose
  // neighbouring stage lives on another rank; W never communicates. Forward-only has only the F.
  const bool forward_only = kind != nullptr && !kind->trains;
  const int64_t per_stage_and_microbatch =
      forward_only ? 1 + (D > 1 ? 2 : 0) : (split ? 3 : 2) + (D > 1 ? 4 : 0);
  return CheckedProduct({V, M, per_stage_and_microbatch});
}

int64_t MaxCarriedActionsPerRank(absl::string_view csv) {
  int64_t longest = 0, row = 1;
  for (char c : csv) {
    if (c == '\n') {
      longest = std::max(longest, row);
      row = 1;
    } else if (c == ',' || c == ';') {
      ++row;
    }
  }
  return 3 * std::max(longest, row);
}

absl::Status CheckNoUnknownFields(const google::protobuf::Message& message,
                                  absl::string_view path) {
  const google::protobuf::Reflection* reflection = message.GetReflection();
  const google::protobuf::Descriptor* descriptor = message.GetDescriptor();
  if (const google::protobuf::UnknownFieldSet& unknown = reflection->GetUnknownFields(message);
      !unknown.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path.empty() ? "spec" : path, ": unknown field number ", unknown.field(0).number(), " (",
        descriptor->full_name(),
        " has no such field; ppcoord would store, list and send it on unread, so a spec may "
        "carry only the fields of proto/pp/v1/job.proto)"));
  }
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* field = descriptor->field(i);
    if (field->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE ||
        (!field->is_repeated() && !reflection->HasField(message, field))) {
      continue;
    }
    const std::string child = path.empty() ? field->name() : absl::StrCat(path, ".", field->name());
    if (!field->is_repeated()) {
      if (absl::Status s = CheckNoUnknownFields(reflection->GetMessage(message, field), child);
          !s.ok()) {
        return s;
      }
      continue;
    }
    for (int j = 0; j < reflection->FieldSize(message, field); ++j) {
      if (absl::Status s = CheckNoUnknownFields(reflection->GetRepeatedMessage(message, field, j),
                                                absl::StrCat(child, "[", j, "]"));
          !s.ok()) {
        return s;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckSpecBytes(const pp::v1::JobSpec& spec) {
  if (absl::Status s = CheckNoUnknownFields(spec, ""); !s.ok()) return s;
  // Compared as size_t: no conversion of a size that could not fit the limit's type.
  if (const size_t bytes = spec.ByteSizeLong(); bytes > static_cast<size_t>(kMaxSpecBytes)) {
    return OverLimit("spec", absl::StrCat(bytes, " bytes"), kMaxSpecBytes,
                     absl::StrCat("ppcoord stores and lists every job's spec and sends it in "
                                  "every task plan and checkpoint manifest, one 4 MiB gRPC "
                                  "message each",
                                  LargestField(spec)));
  }
  return absl::OkStatus();
}

absl::Status CheckSpecBounds(const pp::v1::JobSpec& spec) {
  if (absl::Status s = CheckSpecBytes(spec); !s.ok()) return s;
  if (absl::Status s = CheckFields(spec); !s.ok()) return s;
  const pp::v1::ParallelSpec& p = spec.parallel();
  const Factor pipeline{"parallel.pipeline", p.pipeline()}, tensor{"parallel.tensor", p.tensor()},
      data{"parallel.data", p.data()};
  if (absl::Status s = CheckProduct({pipeline, tensor, data}, "ranks", kMaxWorldSize,
                                    "one worker per rank; ppcoord builds a task plan per rank");
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          CheckProduct({data,
                        {"train.microbatches", spec.train().microbatches()},
                        {"train.microbatch_size", spec.train().microbatch_size()}},
                       "sequences per step", kMaxSequencesPerStep,
                       "data positions count sequences in int64 over up to 2^31 steps");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckScheduleSize(spec); !s.ok()) return s;
  if (absl::Status s = CheckTensors(spec); !s.ok()) return s;
  if (const int64_t params = Parameters(spec.model()); params > kMaxParameters) {
    return OverLimit("model", absl::StrCat(params, " parameters"), kMaxParameters,
                     "16 bytes of training state each (weights, gradients, two AdamW moments): "
                     "more than any cluster of this service holds");
  }
  return absl::OkStatus();
}

}  // namespace pp::common
