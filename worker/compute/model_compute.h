// The executor's StageCompute over the GPT stage models (worker/model),
// the data windows (worker/data) and AdamW with canonical clipping (worker/optim), doing exactly
// the reference trainer's arithmetic (worker/trainer) for the stages one rank holds.
// Data parallel (a data group of size > 1): the program's microbatch j is the step's global
// microbatch first + j of this replica's share (parallel::ReplicaMicrobatches); gradients are
// summed over the replicas in buckets (parallel::AssignBuckets) on a background thread, each
// started right after the weight-gradient backward that completes it. Replicas then hold the same
// gradients, so only replica 0 reports gradient norms and checkpoint tensors. Tensor parallel (a
// tensor group of size > 1): the stage models hold Megatron slices (model::StageOptions); the
// gradient norm's partial sums are combined over the group (parallel::AllReduceSumSquares) and
// TP rank 0 reports them.
#ifndef PP_WORKER_COMPUTE_MODEL_COMPUTE_H_
#define PP_WORKER_COMPUTE_MODEL_COMPUTE_H_

#include <map>
#include <set>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/safetensors.h"
#include "kernels/ops.h"
#include "pp/v1/worker.pb.h"
#include "worker/data/data.h"
#include "worker/executor/executor.h"
#include "worker/model/model.h"
#include "worker/optim/optim.h"
#include "worker/parallel/parallel.h"

namespace pp::compute {

class ModelCompute : public executor::StageCompute {
 public:
  // The stages of `plan` (plan.stages), on `device` ("cpu" | "cuda:N"). The spec must be valid.
  // `data_group` / `tensor_group`: this rank's data- / tensor-parallel group (null: none); they
  // must outlive the compute.
  static absl::StatusOr<std::unique_ptr<ModelCompute>> Create(
      const pp::v1::TaskPlan& plan, const std::string& device,
      parallel::Collectives* data_group = nullptr, parallel::Collectives* tensor_group = nullptr);
  ~ModelCompute() override;

  // What this rank writes of a checkpoint: the held tensors and their AdamW moments under their
  // model names (model::UnitTensors; slices under the whole tensor's name, marked in `metadata` by
  // common::SliceKey), each written once per mesh: none on replicas other than 0, and replicated
  // tensors only on TP rank 0.
  struct ShardContents {
    std::vector<common::Tensor> tensors;
    std::map<std::string, std::string> metadata;
  };
  ShardContents CheckpointShard();
  // The last step's data-parallel gradient all-reduces: their total time, and the part of it the
  // step waited for after its last backward (the rest ran hidden behind backwards).
  struct AllReduceTimes {
    double spent_seconds = 0;
    double exposed_seconds = 0;
  };
  AllReduceTimes last_all_reduce_times() const { return all_reduce_times_; }
  // sha256 of every held value and moment: equal on replicas that stayed identical.
  std::string StateDigest();
  // Loads values and moments of the held stages from a checkpoint's whole tensors (found by name;
  // a tensor-parallel rank cuts out its slice).
  absl::Status LoadCheckpointTensors(const std::map<std::string, common::Tensor>& tensors);
  // Starts the held stages from a model's whole tensors by name (model.init_from, read by
  // common::ReadHfGpt2), cut for a tensor-parallel rank: values only, the moments stay zero.
  absl::Status LoadInitialValues(const std::map<std::string, common::Tensor>& tensors);
  // The names LoadCheckpointTensors looks up: every held tensor and its two moments.
  std::set<std::string> CheckpointTensorNames() const;
  // Runs every held stage's forward and backward once, fused and split into input and weight
  // halves, on zero tokens and activations, then zeroes the gradients: weights, moments, the data
  // position and the step's gradients end as they were, and training after it is bit for bit what
  // it is without. Why: cuBLAS loads a kernel library at a GEMM shape's first use, and loading
  // waits until the process's kernels have finished; during a step a NCCL receive posted ahead
  // spins until its peer sends, which may wait for this very GEMM (seen on an H200). Rehearsed
  // before the pipeline connects, every shape a step uses is loaded while nothing spins.
  // Tensor-parallel ranks rehearse together (the stage's collectives run); data-parallel
  // gradients are not all-reduced. With documents "mask" the zero tokens' documents are passed
  // (every token its own document when the end of text is 0), so the masked attention rehearses.
  // Packed microbatches vary in length from step to step, and cuBLAS picks kernels (and loads
  // their libraries) by size: rows of K, K/2, ..., 1 tokens rehearse, in pieces of
  // min(seq_len, n), so every size class of a step's products loads here (not proven exhaustive
  // on a GPU: docs/jobs.md "Packed microbatches").
  absl::Status Rehearse();

  size_t InputSize(int stage) const override;
  size_t OutputSize(int stage) const override;
  // (B, T, C) of every microbatch: the boundary headers' shape; a packed microbatch's (1, n, C)
  // with n its tokens, known at BeginStep from the data index (common/packing.h).
  executor::BoundaryShape InputShape(int stage, int mb) const override;
  executor::BoundaryShape OutputShape(int stage, int mb) const override;
  // Packed microbatches: the token mean over the microbatches' tokens (common::TokenMeanLoss),
  // of this replica's microbatches or, given every replica's, of the step's. Else the plain mean.
  double StepLoss(const std::vector<double>& loss_by_mb) const override;
  void CopyToHost(float* host, const float* buffer, size_t n) override;
  void CopyFromHost(float* buffer, const float* host, size_t n) override;
  float* AllocBuffer(size_t n) override;
  void FreeBuffer(float* buffer) override;
  absl::Status BeginStep(int step) override;
  absl::StatusOr<double> Forward(int stage, int mb, const float* in, float* out) override;
  // Evaluation (spec.eval): batch b reads the eval windows at position b x M x B, as step b of a
  // fresh run reads the training windows. FailedPrecondition without spec.eval.
  absl::Status BeginEval(int batch) override;
  absl::StatusOr<double> Evaluate(int stage, int mb, const float* in, float* out) override;
  absl::Status Backward(int stage, int mb, const float* grad_out, float* grad_in) override;
  absl::Status BackwardInput(int stage, int mb, const float* grad_out, float* grad_in) override;
  absl::Status BackwardWeight(int stage, int mb) override;
  std::vector<executor::TensorSumSq> GradSumSquares() override;
  absl::StatusOr<executor::GradientClip> Clip(
      const std::vector<executor::TensorSumSq>& all) override;
  absl::Status OptimizerStep(int step, float clip_scale) override;
  int64_t LiveActivationBytes() const override;

 private:
  class BucketReducer;
  ModelCompute();
  absl::StatusOr<model::StageModel*> Stage(int stage) const;
  bool packed() const { return train_.tokens_per_microbatch() > 0; }
  // What Rehearse runs: zero tokens with their document starts or packed sequences.
  struct Rehearsal {
    std::vector<int32_t> tokens, doc_start, sequences;
  };
  std::vector<Rehearsal> Rehearsals() const;
  absl::Status RehearseStage(model::StageModel& stage, const Rehearsal& rehearsal);
  // step_lengths_ and step_tokens_ of the step (or eval batch) at `position` of `rows`.
  void LoadLengths(const data::PackedStream& rows, int64_t position);
  // The training tokens and windows, and the eval windows with spec.eval.
  absl::Status OpenData(const pp::v1::JobSpec& spec);
  // Forward or Evaluate of `stage` on microbatch `local_mb` of `source` at `position`.
  absl::StatusOr<double> RunForward(int stage, int local_mb, const float* in, float* out,
                                    bool evaluate);
  std::vector<common::Tensor> HeldTensors();
  // LoadCheckpointTensors (with_moments) and LoadInitialValues; `what` names the source in errors.
  absl::Status LoadHeld(const std::map<std::string, common::Tensor>& tensors, bool with_moments,
                        absl::string_view what);
  absl::Status SetUpBuckets(const pp::v1::RankProgram& program, int64_t bucket_bytes);
  // After the rank's k-th weight-gradient backward of the step: starts the buckets it completes.
  void WeightGradientDone();
  // Waits until every bucket of the step is summed over the replicas.
  absl::Status FinishGradients();

  std::unique_ptr<kernels::Ops> ops_;
  std::map<int, std::unique_ptr<model::StageModel>> stages_;
  std::optional<data::TrainData> train_data_;
  std::optional<data::EvalSource> eval_;  // with spec.eval
  int64_t eval_position_ = 0;             // data position of the current eval batch
  pp::v1::TrainSpec train_;
  int microbatches_ = 1;
  int batch_ = 1;
  int seq_len_ = 1;
  int d_model_ = 1;
  int64_t position_ = 0;  // data position of the current step
  // train.tokens_per_microbatch (common/packing.h): the step's (or eval batch's) microbatch
  // lengths, every replica's in global order, and their sum, from BeginStep (BeginEval).
  std::vector<int64_t> step_lengths_;
  int64_t step_tokens_ = 0;
  // With data.documents "mask": the end-of-text id; every held stage then reads its microbatch's
  // window to derive the documents (worker/data/data.h "Documents").
  std::optional<int32_t> end_of_text_;
  parallel::Collectives* data_group_ = nullptr;
  parallel::Collectives* tensor_group_ = nullptr;  // null unless TP > 1
  int first_microbatch_ = 0;  // this replica's first global microbatch
  std::map<std::string, model::ModelTensor*> by_name_;
  std::vector<parallel::Bucket> buckets_;
  int weight_gradients_done_ = 0;  // this step's weight-gradient backwards so far
  AllReduceTimes all_reduce_times_;
  absl::Status gradient_status_;  // of this step's data-parallel all-reduces
  std::unique_ptr<BucketReducer> reducer_;
};

}  // namespace pp::compute

#endif  // PP_WORKER_COMPUTE_MODEL_COMPUTE_H_
