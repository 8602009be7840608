#include "worker/compute/model_compute.h"

#include <chrono>
#include <deque>
#include <optional>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/checkpoint.h"
#include "common/packing.h"
#include "common/precision.h"
#include "common/step_math.h"
#include "program/proto.h"

namespace pp::compute {
namespace {

// Gradient bytes per data-parallel all-reduce when parallel.bucket_bytes is 0: large enough to
// amortise a collective's latency, small enough that the first buckets start well before the
// last backward.
constexpr int64_t kDefaultBucketBytes = int64_t{4} << 20;

// The backend of `device` in the spec's threads and train.precision.
absl::StatusOr<std::unique_ptr<kernels::Ops>> OpsFor(const std::string& device,
                                                     const pp::v1::TrainSpec& train) {
  absl::StatusOr<common::Precision> precision = common::PrecisionFromName(train.precision());
  if (!precision.ok()) return precision.status();
  return kernels::MakeOps(device, std::max(1, train.threads()), *precision);
}

}  // namespace

// Sums buckets of gradients over the data-parallel group, one at a time and in launch order (the
// order every replica launches them in), on its own thread.
class ModelCompute::BucketReducer {
 public:
  BucketReducer(parallel::Collectives* group, kernels::Ops* ops,
                const std::map<std::string, model::ModelTensor*>* by_name)
      : group_(group), ops_(ops), by_name_(by_name), thread_([this] { Loop(); }) {}

  ~BucketReducer() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    thread_.join();
    if (flat_ != nullptr) ops_->Free(flat_);
  }

  void Start(const parallel::Bucket* bucket) {
    absl::MutexLock lock(&mu_);
    queue_.push_back(bucket);
  }

  // Waits for every started bucket; the first error since the last Finish. `spent_seconds`: the
  // buckets' all-reduce time since the last Finish.
  absl::Status Finish(double& spent_seconds) {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](BucketReducer* r) { return r->queue_.empty() && !r->busy_; }, this));
    spent_seconds = std::exchange(spent_seconds_, 0.0);
    return std::exchange(status_, absl::OkStatus());
  }

 private:
  void Loop() {
    while (true) {
      const parallel::Bucket* bucket = nullptr;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](BucketReducer* r) { return r->stop_ || !r->queue_.empty(); }, this));
        if (queue_.empty()) return;
        bucket = queue_.front();
        queue_.pop_front();
        busy_ = true;
      }
      const auto start = std::chrono::steady_clock::now();
      absl::Status status = Reduce(*bucket);
      const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
      absl::MutexLock lock(&mu_);
      spent_seconds_ += took.count();
      busy_ = false;
      if (status_.ok()) status_ = status;
    }
  }

  // Gathers the bucket's gradients into one backend buffer (in bucket order), sums it over the
  // group, scatters it back. The copies queue behind the backwards that produced the gradients;
  // Synchronize makes the buffer complete before the group's transport (own stream) reads it.
  absl::Status Reduce(const parallel::Bucket& bucket) {
    const size_t n = bucket.bytes / sizeof(float);
    if (n > flat_size_) {
      if (flat_ != nullptr) ops_->Free(flat_);
      flat_ = ops_->Alloc(n);
      flat_size_ = n;
    }
    size_t at = 0;
    for (const std::string& name : bucket.names) {
      const model::ModelTensor& t = *by_name_->at(name);
      ops_->Copy(flat_ + at, t.grad, t.size);
      at += t.size;
    }
    ops_->Synchronize();
    if (absl::Status s = group_->AllReduceSum(flat_, at); !s.ok()) return s;
    at = 0;
    for (const std::string& name : bucket.names) {
      const model::ModelTensor& t = *by_name_->at(name);
      ops_->Copy(t.grad, flat_ + at, t.size);
      at += t.size;
    }
    ops_->Synchronize();
    return absl::OkStatus();
  }

  parallel::Collectives* group_;
  kernels::Ops* ops_;
  const std::map<std::string, model::ModelTensor*>* by_name_;
  float* flat_ = nullptr;  // backend memory of flat_size_ floats
  size_t flat_size_ = 0;
  absl::Mutex mu_;
  std::deque<const parallel::Bucket*> queue_ ABSL_GUARDED_BY(mu_);
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  double spent_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // last: starts once everything above exists
};

ModelCompute::ModelCompute() = default;

absl::StatusOr<std::unique_ptr<ModelCompute>> ModelCompute::Create(
    const pp::v1::TaskPlan& plan, const std::string& device, parallel::Collectives* data_group,
    parallel::Collectives* tensor_group) {
  const pp::v1::JobSpec& spec = plan.spec();
  absl::StatusOr<model::ModelConfig> config = model::ModelConfigFromSpec(spec.model());
  if (!config.ok()) return config.status();
  if (plan.stages_size() == 0) return absl::InvalidArgumentError("task plan holds no stages");
  std::unique_ptr<ModelCompute> compute(new ModelCompute());
  const int replicas = data_group == nullptr ? 1 : data_group->size();
  // The step's microbatches over every replica; this replica runs its share.
  compute->microbatches_ = common::GlobalMicrobatches(spec);
  if (data_group != nullptr) {
    absl::StatusOr<parallel::MicrobatchRange> share =
        parallel::ReplicaMicrobatches(data_group->rank(), replicas, compute->microbatches_);
    if (!share.ok()) return share.status();
    compute->first_microbatch_ = share->first;
    compute->data_group_ = data_group;
  }
  if (tensor_group != nullptr && tensor_group->size() > 1) compute->tensor_group_ = tensor_group;
  compute->batch_ = spec.train().microbatch_size();
  compute->seq_len_ = config->seq_len;
  compute->d_model_ = config->d_model;
  compute->train_ = spec.train();
  compute->end_of_text_ = data::DocumentEndOfText(spec);
  absl::StatusOr<std::unique_ptr<kernels::Ops>> ops = OpsFor(device, spec.train());
  if (!ops.ok()) return ops.status();
  compute->ops_ = std::move(*ops);
  absl::StatusOr<common::Recompute> recompute =
      common::RecomputeFromName(spec.parallel().recompute());
  if (!recompute.ok()) return recompute.status();  // "auto" is resolved by ppcoord
  for (const pp::v1::StageLayers& layers : plan.stages()) {
    if (compute->stages_.count(layers.stage()) > 0) {
      return absl::InvalidArgumentError(absl::StrCat("stage ", layers.stage(), " listed twice"));
    }
    model::StageOptions options;
    options.first_unit = layers.first_unit();
    options.last_unit = layers.last_unit();
    options.microbatch_size = compute->batch_;
    options.microbatches = compute->microbatches_;
    options.max_tokens = spec.train().tokens_per_microbatch();  // 0 unless packed
    options.seed = spec.train().seed();
    options.tensor_parallel = tensor_group;
    options.recompute = *recompute;
    options.precision = *common::PrecisionFromName(spec.train().precision());  // OpsFor checked it
    absl::StatusOr<std::unique_ptr<model::StageModel>> stage =
        model::StageModel::Create(compute->ops_.get(), *config, options);
    if (!stage.ok()) {
      return absl::Status(stage.status().code(), absl::StrCat("stage ", layers.stage(), ": ",
                                                              stage.status().message()));
    }
    compute->stages_[layers.stage()] = std::move(*stage);
  }
  if (absl::Status s = compute->OpenData(spec); !s.ok()) return s;
  if (compute->data_group_ != nullptr) {
    const int64_t bucket_bytes =
        spec.parallel().bucket_bytes() == 0 ? kDefaultBucketBytes : spec.parallel().bucket_bytes();
    if (absl::Status s = compute->SetUpBuckets(plan.program(), bucket_bytes); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("parallel.bucket_bytes: ", s.message()));
    }
  }
  return compute;
}

ModelCompute::~ModelCompute() {
  reducer_.reset();  // no all-reduce may touch the gradients from here on
  stages_.clear();   // before the ops they allocated from
}

absl::Status ModelCompute::SetUpBuckets(const pp::v1::RankProgram& program, int64_t bucket_bytes) {
  std::vector<parallel::GradTensor> grads;
  for (auto& [s, stage] : stages_) {
    for (model::ModelTensor& t : stage->tensors()) {
      grads.push_back({t.name, static_cast<int64_t>(t.size * sizeof(float)), s});
      by_name_[t.name] = &t;
    }
  }
  std::vector<int> weight_grad_stages;
  for (const pp::v1::Action& proto : program.actions()) {
    const std::optional<prog::Action> action = prog::ActionFromProto(proto);
    if (action &&
        (action->kind == prog::Kind::kBackward || action->kind == prog::Kind::kBackwardWeight)) {
      weight_grad_stages.push_back(action->stage);
    }
  }
  absl::StatusOr<std::vector<parallel::Bucket>> buckets =
      parallel::AssignBuckets(grads, weight_grad_stages, bucket_bytes);
  if (!buckets.ok()) return buckets.status();
  buckets_ = std::move(*buckets);
  reducer_ = std::make_unique<BucketReducer>(data_group_, ops_.get(), &by_name_);
  return absl::OkStatus();
}

void ModelCompute::WeightGradientDone() {
  if (reducer_ == nullptr) return;
  for (const parallel::Bucket& bucket : buckets_) {
    if (bucket.ready_after == weight_gradients_done_) reducer_->Start(&bucket);
  }
  ++weight_gradients_done_;
}

absl::Status ModelCompute::FinishGradients() {
  if (reducer_ == nullptr) return absl::OkStatus();
  const auto start = std::chrono::steady_clock::now();
  absl::Status status = reducer_->Finish(all_reduce_times_.spent_seconds);
  all_reduce_times_.exposed_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return status;
}

absl::StatusOr<model::StageModel*> ModelCompute::Stage(int stage) const {
  auto it = stages_.find(stage);
  if (it == stages_.end()) {
    return absl::InvalidArgumentError(absl::StrCat("stage ", stage, " is not held here"));
  }
  return it->second.get();
}

size_t ModelCompute::InputSize(int stage) const {
  auto it = stages_.find(stage);
  return it == stages_.end() ? 0 : it->second->activation_size();
}

size_t ModelCompute::OutputSize(int stage) const { return InputSize(stage); }

executor::BoundaryShape ModelCompute::InputShape(int stage, int mb) const {
  if (packed()) return {1, step_lengths_.at(static_cast<size_t>(first_microbatch_ + mb)), d_model_};
  return {batch_, seq_len_, d_model_};
}

double ModelCompute::StepLoss(const std::vector<double>& loss_by_mb) const {
  if (!packed()) return executor::StageCompute::StepLoss(loss_by_mb);
  // This replica's microbatches, or every replica's (the gathered step): their lengths.
  const size_t first = loss_by_mb.size() == step_lengths_.size() ? 0 : first_microbatch_;
  return common::TokenMeanLoss(
      loss_by_mb, std::vector<int64_t>(step_lengths_.begin() + first,
                                       step_lengths_.begin() + first + loss_by_mb.size()));
}

executor::BoundaryShape ModelCompute::OutputShape(int stage, int mb) const {
  return InputShape(stage + 1, mb);
}

void ModelCompute::CopyToHost(float* host, const float* buffer, size_t n) {
  ops_->CopyToHost(host, buffer, n);
}

void ModelCompute::CopyFromHost(float* buffer, const float* host, size_t n) {
  ops_->CopyToDevice(buffer, host, n);
  ops_->Synchronize();  // the transport may read `buffer` on a stream of its own (NCCL)
}

absl::Status ModelCompute::OpenData(const pp::v1::JobSpec& spec) {
  absl::StatusOr<data::TrainData> train_data = data::TrainData::Open(spec);
  if (!train_data.ok()) return train_data.status();
  train_data_.emplace(*std::move(train_data));
  if (!common::EvalEnabled(spec)) return absl::OkStatus();
  absl::StatusOr<data::EvalSource> eval = data::OpenEvalSource(spec);
  if (!eval.ok()) return eval.status();
  eval_.emplace(*std::move(eval));
  return absl::OkStatus();
}

float* ModelCompute::AllocBuffer(size_t n) { return ops_->Alloc(n); }

void ModelCompute::FreeBuffer(float* buffer) { ops_->Free(buffer); }

absl::Status ModelCompute::BeginStep(int step) {
  for (auto& [s, stage] : stages_) stage->ZeroGrads();
  weight_gradients_done_ = 0;
  position_ = common::DataPositionAtStep(step, microbatches_, batch_);
  if (packed()) LoadLengths(*train_data_->packed(), position_);
  return absl::OkStatus();
}

void ModelCompute::LoadLengths(const data::PackedStream& rows, int64_t position) {
  step_lengths_.resize(static_cast<size_t>(microbatches_));
  step_tokens_ = 0;
  for (int j = 0; j < microbatches_; ++j) {
    step_lengths_[j] = rows.RowTokens(position + j);
    step_tokens_ += step_lengths_[j];
  }
}

absl::StatusOr<double> ModelCompute::Forward(int stage, int local_mb, const float* in, float* out) {
  return RunForward(stage, local_mb, in, out, /*evaluate=*/false);
}

absl::Status ModelCompute::BeginEval(int batch) {
  if (!eval_.has_value()) return absl::FailedPreconditionError("the spec has no eval");
  eval_position_ = common::DataPositionAtStep(batch, microbatches_, batch_);
  if (packed()) LoadLengths(*eval_->packed, eval_position_);  // until the next BeginStep
  return absl::OkStatus();
}

absl::StatusOr<double> ModelCompute::Evaluate(int stage, int local_mb, const float* in,
                                              float* out) {
  if (!eval_.has_value()) return absl::FailedPreconditionError("the spec has no eval");
  return RunForward(stage, local_mb, in, out, /*evaluate=*/true);
}

absl::StatusOr<double> ModelCompute::RunForward(int stage, int local_mb, const float* in,
                                                float* out, bool evaluate) {
  const int mb = first_microbatch_ + local_mb;
  absl::StatusOr<model::StageModel*> model = Stage(stage);
  if (!model.ok()) return model.status();
  model::StageInput input;
  absl::StatusOr<data::Microbatch> batch;
  std::vector<int32_t> doc_start;  // alive across the forward
  if ((*model)->has_embedding() || (*model)->has_head() || end_of_text_.has_value()) {
    batch = evaluate ? data::ReadEvalMicrobatch(*eval_, eval_position_, mb, batch_, seq_len_)
                     : data::ReadMicrobatch(*train_data_, position_, mb, batch_, seq_len_);
    if (!batch.ok()) return batch.status();
    if ((*model)->has_embedding()) input.tokens = batch->inputs.data();
    if ((*model)->has_head()) input.targets = batch->targets.data();
    if (packed()) {
      input.sequences = batch->sequences.data();
      input.num_sequences = static_cast<int>(batch->sequences.size()) - 1;
      input.step_tokens = step_tokens_;
    } else {
      doc_start = data::DocumentStarts(*batch, end_of_text_);
      if (!doc_start.empty()) input.doc_start = doc_start.data();
    }
  }
  if (!(*model)->has_embedding()) input.activations = in;
  absl::StatusOr<double> loss =
      evaluate ? (*model)->Evaluate(input, out) : (*model)->Forward(mb, input, out);
  ops_->Synchronize();  // `out` goes to the transport next
  return loss;
}

absl::Status ModelCompute::Backward(int stage, int mb, const float* grad_out, float* grad_in) {
  absl::StatusOr<model::StageModel*> model = Stage(stage);
  if (!model.ok()) return model.status();
  absl::Status status = (*model)->Backward(first_microbatch_ + mb, grad_out, grad_in);
  ops_->Synchronize();  // `grad_in` goes to the transport next
  if (status.ok()) WeightGradientDone();
  return status;
}

absl::Status ModelCompute::BackwardInput(int stage, int mb, const float* grad_out,
                                         float* grad_in) {
  absl::StatusOr<model::StageModel*> model = Stage(stage);
  if (!model.ok()) return model.status();
  absl::Status status = (*model)->BackwardInput(first_microbatch_ + mb, grad_out, grad_in);
  ops_->Synchronize();  // `grad_in` goes to the transport next
  return status;
}

absl::Status ModelCompute::BackwardWeight(int stage, int mb) {
  absl::StatusOr<model::StageModel*> model = Stage(stage);
  if (!model.ok()) return model.status();
  absl::Status status = (*model)->BackwardWeight(first_microbatch_ + mb);
  if (status.ok()) WeightGradientDone();
  return status;
}

std::vector<executor::TensorSumSq> ModelCompute::GradSumSquares() {
  // A failed collective surfaces in Clip, the step's next fallible call.
  gradient_status_ = FinishGradients();
  optim::SumSquares held;
  std::set<std::string> sharded;
  for (auto& [s, stage] : stages_) {
    for (const auto& [name, sum] : optim::GradSumSquares(*ops_, stage->tensors())) {
      held[name] = sum;
    }
    for (const model::ModelTensor& t : stage->tensors()) {
      if (!common::IsWhole(t.slice, t.full_shape)) sharded.insert(t.name);
    }
  }
  if (gradient_status_.ok() && tensor_group_ != nullptr) {
    gradient_status_ = parallel::AllReduceSumSquares(*tensor_group_, sharded, held);
  }
  std::vector<executor::TensorSumSq> sums;
  // Replicas hold the same summed gradients and TP ranks now the same whole-tensor sums: one rank
  // of each speaks for all of them, so every tensor counts once in the norm.
  if (data_group_ != nullptr && data_group_->rank() > 0) return sums;
  if (tensor_group_ != nullptr && tensor_group_->rank() > 0) return sums;
  for (const auto& [name, sum] : held) sums.push_back({name, sum});
  return sums;
}

absl::StatusOr<executor::GradientClip> ModelCompute::Clip(
    const std::vector<executor::TensorSumSq>& all) {
  if (!gradient_status_.ok()) return std::exchange(gradient_status_, absl::OkStatus());
  optim::SumSquares merged;
  for (const executor::TensorSumSq& t : all) {
    if (absl::Status s = optim::MergeSumSquares({{t.name, t.sum_sq}}, merged); !s.ok()) return s;
  }
  const double norm = optim::GlobalNorm(merged);
  return executor::GradientClip{optim::ClipScale(norm, train_.grad_clip()), norm};
}

absl::Status ModelCompute::OptimizerStep(int step, float clip_scale) {
  // AdamW steps are 1-based, as in the reference trainer.
  const optim::AdamWConfig adamw = optim::AdamWConfigAtStep(train_, step + 1);
  for (auto& [s, stage] : stages_) {
    optim::ApplyAdamW(*ops_, stage->tensors(), adamw, step + 1, clip_scale);
  }
  return absl::OkStatus();
}

int64_t ModelCompute::LiveActivationBytes() const {
  int64_t bytes = 0;
  for (auto& [s, stage] : stages_) bytes += stage->live_activation_bytes();
  return bytes;
}

}  // namespace pp::compute
