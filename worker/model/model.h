// A GPT-2 style decoder cut into partition units, and a stage chunk holding a contiguous range.
//
// Contract:
// - Units: 0 = embedding (wte, wpe), 1..n_layers = blocks h.{u-1}.*, n_layers+1 = ln_f, lm_head
//   and the cross-entropy loss. A StageModel over units [first, last] holds exactly the GPT-2
//   tensors of that range (names, torch Linear shapes), in unit order.
// - Initial values depend only on (seed, tensor name) (InitTensorValues), so any layout starts
//   from the same weights.
// - Forward(mb) keeps what backward needs until BackwardWeight(mb) (or Backward(mb)) releases it;
//   several microbatches may be in flight. Backward == BackwardInput then BackwardWeight, bitwise.
//   With StageOptions.recompute it keeps less and BackwardInput computes the rest again first
//   (same bits); from BackwardInput to BackwardWeight the state is kNone's.
// - The last stage returns the microbatch's mean token loss (summed in double); its gradient is
//   seeded with 1/(B*T*M), so gradients sum to those of the step loss = sum_j loss_j / M; a packed
//   microbatch's with 1/StageInput.step_tokens, for the step loss = the mean over its tokens.
// - Packed microbatches (StageInput.sequences): each microbatch has its own length n; the saved
//   state and every op are sized by it (the activation table of (1,n)), so a short microbatch
//   costs and keeps less.
// - Packed documents (StageInput.doc_start): every block attends within each document only,
//   and with ModelConfig.document_positions the embedding gives token t of a document starting
//   at s the position t - s. A first stage with document_positions needs doc_start. Every stage
//   of a microbatch gets the same doc_start. Null doc_start: the bits of plain causal attention.
// - Vocabulary padding (ModelConfig.real_vocab_size < vocab_size): tokens and targets must be
//   below the real size; the padding logits do not enter the loss, so the lm_head rows (and,
//   tied, the wte rows) of padding ids get exactly zero gradient. No padding: the same bits.
// - Gradients accumulate in the order backward calls arrive; run them in ascending microbatch
//   order for bits that do not depend on the schedule. Activations are passed by copy, so a chain
//   of stages gives exactly the bits of one stage holding every unit.
// - Tensor parallel (Megatron-LM, Shoeybi et al. 2019), when StageOptions.tensor_parallel has
//   more than one rank: attn.qkv and mlp.fc are column-parallel (rank r holds heads
//   [r*NH/TP, (r+1)*NH/TP), i.e. those rows of q, k and v, and 4C/TP rows of mlp.fc), attn.proj
//   and mlp.proj row-parallel (the matching input columns; their biases are added once, by rank
//   0, inside the all-reduce). Each block half does one all-reduce of (B,T,C) in forward (after
//   the row-parallel matmul) and one in backward (the input-gradient of the column-parallel one).
//   LayerNorms, the embedding and the head are replicated: with a byte-level vocabulary (256) they
//   are a small share of the parameters, replication needs no communication, and every rank
//   computes the same loss with the unchanged cross-entropy kernel (vocab-parallel would add two
//   all-reduces inside the softmax to save memory that matters only for ~50k vocabularies).
//   Replicated tensors get bitwise equal gradients on every TP rank (their inputs come out of the
//   all-reduces, which leave the same bits everywhere), so TP ranks need no gradient all-reduce;
//   the clipping norm combines the ranks' per-tensor sums with parallel::AllReduceSumSquares.
//   The ranks of a group make the same Forward/Backward calls in the same order.
// - A held tensor keeps its GPT-2 name; ModelTensor::shape is the held slice's and
//   ModelTensor::slice says which part of the named tensor it is. A TP rank's initial slice equals
//   the same slice of the unsplit tensor, bitwise. With no tensor parallelism nothing changes.
#ifndef PP_WORKER_MODEL_MODEL_H_
#define PP_WORKER_MODEL_MODEL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/precision.h"
#include "common/recompute.h"
#include "common/safetensors.h"
#include "common/tensor_slice.h"
#include "kernels/ops.h"
#include "pp/v1/job.pb.h"
#include "worker/parallel/parallel.h"  // the Collectives interface only (header-only)

namespace pp::model {

struct ModelConfig {
  int vocab_size = 256;  // rows of wte and lm_head, columns of the logits
  // The ids in use, <= vocab_size; 0: vocab_size. Logits [real, vocab_size) are padding: masked
  // out of the loss (Ops::CrossEntropyForward's Vr), so their rows get no gradient from it.
  int real_vocab_size = 0;
  int seq_len = 64;   // T
  int d_model = 128;  // C
  int n_heads = 4;
  int n_layers = 4;
  bool tie_embeddings = false;
  // model.positions "document": position ids restart at each packed document's first token
  // (positions[b,t] = t - doc_start[b,t]), so a document sees the positions it would see alone.
  // false ("absolute"): token t has position t.
  bool document_positions = false;
  int real_vocab() const { return real_vocab_size > 0 ? real_vocab_size : vocab_size; }
};

// Checks the numbers (positive sizes, n_heads divides d_model, real_vocab_size in
// [0, vocab_size]) and model.positions ("", "absolute" or "document").
absl::StatusOr<ModelConfig> ModelConfigFromSpec(const pp::v1::ModelSpec& spec);
int NumUnits(const ModelConfig& config);  // n_layers + 2

struct TensorShape {
  std::string name;
  std::vector<int> shape;
  size_t size() const;
};
// The tensors unit `unit` owns, in GPT-2 order (these names are the checkpoint contract).
std::vector<TensorShape> UnitTensors(const ModelConfig& config, int unit);
// Every tensor of the model, in unit order.
std::vector<TensorShape> ModelTensors(const ModelConfig& config);
// Parameter count of the whole model.
int64_t NumParameters(const ModelConfig& config);

// GPT-2 initialisation: biases 0, LayerNorm weights 1, other weights N(0, 0.02), residual
// projections (attn.proj.weight, mlp.proj.weight) N(0, 0.02 / sqrt(2 n_layers)). Values come
// from a counter-based generator keyed by (seed, name): the same for every layout.
std::vector<float> InitTensorValues(const TensorShape& tensor, int n_layers, uint64_t seed);

// The slice of `tensor` (full shape) that rank `tp_rank` of `tp_size` holds. InvalidArgument for
// a rank outside [0, tp_size) or a tp_size that does not divide n_heads.
// (common/tensor_slice.h: the slice type and its cut / assemble functions.)
absl::StatusOr<common::TensorSlice> TensorParallelSlice(const ModelConfig& config,
                                                        const TensorShape& tensor, int tp_rank,
                                                        int tp_size);

// One named parameter (or this rank's slice of it) in backend memory, with its gradient and
// AdamW moments.
struct ModelTensor {
  std::string name;
  std::vector<int> shape;       // held shape
  std::vector<int> full_shape;  // of the named tensor
  common::TensorSlice slice;    // which part of the named tensor this is
  size_t size = 0;
  float* value = nullptr;
  float* grad = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
};

// Host copies of the tensors' values and AdamW moments under their checkpoint names (the name,
// common::ExpAvgName, common::ExpAvgSqName), tensor after tensor, each in its held shape.
std::vector<common::Tensor> HostTensors(kernels::Ops& ops, const std::vector<ModelTensor>& tensors);

// Activation recomputation (common/recompute.h; stage_impl.h says how it is done): less memory
// between a microbatch's forward and its backward for another forward. Bitwise kNone's results.
using common::Recompute;

struct StageOptions {
  int first_unit = 0;
  int last_unit = 0;
  int microbatch_size = 1;  // B
  int microbatches = 1;     // M, for the loss scale of the last stage
  uint64_t seed = 0;
  // The tensor-parallel group this stage's rank belongs to; null or size 1: no tensor
  // parallelism. Must outlive the model. With data parallelism `microbatches` is the step's M over
  // all replicas.
  parallel::Collectives* tensor_parallel = nullptr;
  Recompute recompute = Recompute::kNone;
  // The ops' precision (kernels::MakeOps), for the activation table's element sizes.
  common::Precision precision = common::Precision::kFp32;
  // Packed microbatches: the most tokens one holds (train.tokens_per_microbatch), which sizes the
  // stage's scratch and activation_size(); microbatch_size must then be 1. 0: fixed (B,T).
  int64_t max_tokens = 0;
};

// Inputs of one microbatch's forward. Token arrays are host memory (B,T); activations are
// backend memory (B,T,C).
struct StageInput {
  const int32_t* tokens = nullptr;     // first stage only
  const int32_t* targets = nullptr;    // last stage only
  const float* activations = nullptr;  // every stage but the first
  // Packed documents (issue 33; kernels/ops.h AttentionForward has the rule it must follow):
  // attention is block-causal within each document of a row, and with
  // ModelConfig.document_positions the embedding restarts positions at each document start.
  const int32_t* doc_start = nullptr;  // (B,T) host memory; every stage; null: plain causal
  // A packed microbatch (train.tokens_per_microbatch; common/packing.h): one row (B = 1) of
  // n = sequences[num_sequences] <= StageOptions.max_tokens tokens holding num_sequences
  // sequences, sequence i its tokens [sequences[i], sequences[i+1]) (cu_seqlens): each attends
  // causally to itself alone (kernels/ops.h AttentionForwardVarlen), its positions start at 0
  // (so the first stage needs ModelConfig.document_positions), and the activations are (1,n,C).
  // Host memory, every stage, the same on each. Null: a (B,T) microbatch. Exclusive with doc_start.
  const int32_t* sequences = nullptr;
  int num_sequences = 0;
  // Last stage of a packed microbatch: the tokens of the whole step (every microbatch of every
  // replica): the loss gradient is seeded with 1/step_tokens per token, so gradients sum to
  // those of the step loss = the mean over the step's tokens. Unused otherwise.
  int64_t step_tokens = 0;
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
  // Floats in one activation or activation gradient (B*T*C), or its most with packed microbatches
  // (max_tokens*C).
  size_t activation_size() const;

  // Non-last stage: writes (B,T,C) into `out` and returns 0. Last stage: returns the
  // microbatch's mean token loss (`out` unused).
  absl::StatusOr<double> Forward(int mb, const StageInput& in, float* out);
  // Forward's computation, bit for bit, keeping nothing: no microbatch goes in flight and no
  // activation stays live after it returns (evaluation). Gradients are not touched.
  absl::StatusOr<double> Evaluate(const StageInput& in, float* out);
  // grad_out (B,T,C) is ignored on the last stage; grad_in (B,T,C) is overwritten, ignored on the
  // first stage.
  absl::Status Backward(int mb, const float* grad_out, float* grad_in);
  absl::Status BackwardInput(int mb, const float* grad_out, float* grad_in);
  absl::Status BackwardWeight(int mb);

  void ZeroGrads();
  std::vector<ModelTensor>& tensors();
  // Host copies of every tensor's values, by name.
  std::map<std::string, std::vector<float>> ValuesToHost();
  // Saved activations (and kept input-gradients) of in-flight microbatches, now.
  int64_t live_activation_bytes() const;
  // The same per unit of the stage (first_unit first): each unit's entries of the activation
  // table (common/activations.h; a block's or the head's input counts as theirs). Sums to
  // live_activation_bytes().
  std::vector<int64_t> live_activation_bytes_by_unit() const;

 private:
  class Impl;
  explicit StageModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace pp::model

#endif  // PP_WORKER_MODEL_MODEL_H_
