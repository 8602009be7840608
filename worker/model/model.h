// A GPT-2 style decoder cut into partition units, and a stage chunk holding a contiguous range.
//
// Contract:
// - Units: 0 = embedding (wte, wpe), 1..n_layers = blocks h.{u-1}.*, n_layers+1 = ln_f, lm_head
//   and the cross-entropy loss. A StageModel over units [first, last] holds exactly the DESIGN.md
//   tensors of that range (names, torch Linear shapes), in unit order.
// - Initial values depend only on (seed, tensor name) (InitTensorValues), so any layout starts
//   from the same weights.
// - Forward(mb) keeps what backward needs until BackwardWeight(mb) (or Backward(mb)) releases it;
//   several microbatches may be in flight. Backward == BackwardInput then BackwardWeight, bitwise.
// - The last stage returns the microbatch's mean token loss (summed in double); its gradient is
//   seeded with 1/(B*T*M), so gradients sum to those of the step loss = sum_j loss_j / M.
// - Gradients accumulate in the order backward calls arrive; run them in ascending microbatch
//   order for bits that do not depend on the schedule. Activations are passed by copy, so a chain
//   of stages gives exactly the bits of one stage holding every unit.
#ifndef PP_WORKER_MODEL_MODEL_H_
#define PP_WORKER_MODEL_MODEL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/ops.h"
#include "pp/v1/job.pb.h"

namespace pp::model {

struct ModelConfig {
  int vocab_size = 256;
  int seq_len = 64;   // T
  int d_model = 128;  // C
  int n_heads = 4;
  int n_layers = 4;
  bool tie_embeddings = false;
};

// Checks the numbers (positive sizes, n_heads divides d_model).
absl::StatusOr<ModelConfig> ModelConfigFromSpec(const pp::v1::ModelSpec& spec);
int NumUnits(const ModelConfig& config);  // n_layers + 2

struct TensorShape {
  std::string name;
  std::vector<int> shape;
  size_t size() const;
};
// The tensors unit `unit` owns, in DESIGN.md order.
std::vector<TensorShape> UnitTensors(const ModelConfig& config, int unit);
// Every tensor of the model, in unit order.
std::vector<TensorShape> ModelTensors(const ModelConfig& config);
// Parameter count of the whole model.
int64_t NumParameters(const ModelConfig& config);

// GPT-2 initialisation: biases 0, LayerNorm weights 1, other weights N(0, 0.02), residual
// projections (attn.proj.weight, mlp.proj.weight) N(0, 0.02 / sqrt(2 n_layers)). Values come
// from a counter-based generator keyed by (seed, name): the same for every layout.
std::vector<float> InitTensorValues(const TensorShape& tensor, int n_layers, uint64_t seed);

// One named parameter in backend memory, with its gradient and AdamW moments.
struct ModelTensor {
  std::string name;
  std::vector<int> shape;
  size_t size = 0;
  float* value = nullptr;
  float* grad = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
};

struct StageOptions {
  int first_unit = 0;
  int last_unit = 0;
  int microbatch_size = 1;  // B
  int microbatches = 1;     // M, for the loss scale of the last stage
  uint64_t seed = 0;
};

// Inputs of one microbatch's forward. Token arrays are host memory (B,T); activations are
// backend memory (B,T,C).
struct StageInput {
  const int32_t* tokens = nullptr;     // first stage only
  const int32_t* targets = nullptr;    // last stage only
  const float* activations = nullptr;  // every stage but the first
};

class StageModel {
 public:
  // ops must outlive the model.
  static absl::StatusOr<std::unique_ptr<StageModel>> Create(kernels::Ops* ops,
                                                            const ModelConfig& config,
                                                            const StageOptions& options);
  ~StageModel();
  StageModel(const StageModel&) = delete;
  StageModel& operator=(const StageModel&) = delete;

  bool has_embedding() const;
  bool has_head() const;
  // Floats in one activation or activation gradient (B*T*C).
  size_t activation_size() const;

  // Non-last stage: writes (B,T,C) into `out` and returns 0. Last stage: returns the
  // microbatch's mean token loss (`out` unused).
  absl::StatusOr<double> Forward(int mb, const StageInput& in, float* out);
  // grad_out (B,T,C) is ignored on the last stage; grad_in (B,T,C) is overwritten, ignored on the
  // first stage.
  absl::Status Backward(int mb, const float* grad_out, float* grad_in);
  absl::Status BackwardInput(int mb, const float* grad_out, float* grad_in);
  absl::Status BackwardWeight(int mb);

  void ZeroGrads();
  std::vector<ModelTensor>& tensors();
  ModelTensor* FindTensor(const std::string& name);
  // Host copies of every tensor's values, by name.
  std::map<std::string, std::vector<float>> ValuesToHost();
  // Saved activations (and kept input-gradients) of in-flight microbatches.
  int64_t live_activation_bytes() const;

 private:
  class Impl;
  explicit StageModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace pp::model

#endif  // PP_WORKER_MODEL_MODEL_H_
