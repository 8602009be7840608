// The activation table: what a stage model saves per in-flight microbatch, per partition unit,
// with each tensor's name and size. The one source of this knowledge: the worker's StageModel
// (worker/model/) allocates its saved tensors at these sizes, and the planner's memory model
// (coordinator/plan/memory.cc) replays these lists through a rank's program. Plain data and pure
// functions; thread-safe, no state.
//
// Letters: N = B x T tokens, C = d_model, Cl = C / tp channels and NHl = n_heads / tp heads of a
// TP rank's share, V = vocab. Units (worker/model/model.h): the embedding, a transformer block,
// the head (ln_f, lm_head and the loss). Rules the lists follow:
// - A unit saves its input: the embedding its tokens, a block or the head its (N,C) input x,
//   which is the previous unit's output (or the stage's copy of the received activation); the
//   head also its targets. The stage's inputs (tokens, the input copy, targets) come first, then
//   each unit's output, allocated just before that unit runs; the stage's last output is the
//   executor's buffer, not saved.
// - A unit keeps the gradient of its output (kDout: a block's dy, the embedding's dout) from the
//   input-gradient to the weight-gradient. The next unit's input-gradient allocates it, or, for the
//   stage's last unit (not the head), the copy of the received gradient.
// - Recompute (common/recompute.h): selective frees each block's attention stats right after the
//   attention and allocates them again first in its input-gradient; full keeps the stage's inputs
//   only, and its input-gradient replays the forward first (into a throw-away (N,C) output on a
//   non-last stage). From the input-gradient on, every mode's state is none's.
// - The weight-gradient (W) frees everything the unit still holds.
// - Precision (common/precision.h): bf16 rounds only matmul operands; every saved tensor is fp32
//   (and tokens int32) in both, 4 bytes an element.
#ifndef PP_COMMON_ACTIVATIONS_H_
#define PP_COMMON_ACTIVATIONS_H_

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/precision.h"
#include "common/recompute.h"

namespace pp::common {

enum class UnitKind { kEmbedding, kBlock, kHead };

// Every tensor a unit's per-microbatch state can hold; shapes in the comments.
enum class Activation {
  kTokens,    // (N) int32, the embedding's input
  kTargets,   // (N) int32, the head's
  kInput,     // (N,C) a block's or the head's input x
  kLn1,       // (N,C) block: ln_1 out
  kMean1,     // (N)
  kRstd1,     // (N)
  kQkv,       // (N,3Cl)
  kAtty,      // (N,Cl) attention output
  kAttStats,  // (B,NHl,T,2) attention softmax row stats (kernels/ops.h); packed: N x NHl x 2
  kRes2,      // (N,C) x + attn
  kLn2,       // (N,C)
  kMean2,     // (N)
  kRstd2,     // (N)
  kFch,       // (N,4Cl) mlp.fc out
  kFchGelu,   // (N,4Cl) gelu(fc)
  kLnf,       // (N,C) head: ln_f out
  kMeanF,     // (N)
  kRstdF,     // (N)
  kProbs,     // (N,V) softmax
  kDout,      // (N,C) gradient of the unit's output (embedding, block)
  kDfch,      // (N,4Cl) block input-gradient
  kDln2,      // (N,C)
  kDres2,     // (N,C)
  kDqkv,      // (N,3Cl)
  kDln1,      // (N,C)
  kDlogits,   // (N,V) head input-gradient
  kDlnf,      // (N,C)
  kDiscard,   // (N,C) full recomputation: the replayed forward's output on a non-last stage
};
inline constexpr int kNumActivations = static_cast<int>(Activation::kDiscard) + 1;

struct ActivationDims {
  int64_t B = 0;  // microbatch size
  int64_t T = 0;  // seq_len
  int64_t C = 0;  // d_model
  int64_t n_heads = 0;
  int64_t vocab = 0;  // vocab_size, padding included
  int64_t tp = 1;     // tensor-parallel degree (every TP rank holds an equal share)
  Precision precision = Precision::kFp32;
};

struct SavedTensor {
  Activation id = Activation::kTokens;
  const char* name = "";  // the StageModel's field name (stage_impl.h)
  int64_t elements = 0;
  int64_t element_bytes = 0;
  int64_t bytes = 0;  // elements x element_bytes
};

// One allocation (+1) or free (-1) of `tensor`, held by the stage's local unit `unit` (0 = the
// stage's first unit).
struct ActivationEvent {
  int unit = 0;
  int sign = +1;
  SavedTensor tensor;
  int64_t delta() const { return sign * tensor.bytes; }
};

// The units of one stage: a contiguous run, so this says which.
struct StageUnits {
  bool embedding = false;
  int blocks = 0;
  bool head = false;
  int units() const { return (embedding ? 1 : 0) + blocks + (head ? 1 : 0); }
  UnitKind kind(int unit) const;  // of local unit `unit`
};

class ActivationTable {
 public:
  ActivationTable() = default;  // every size 0
  // InvalidArgument for a negative dimension, tp < 1, or when the bytes of all the table's
  // tensors together do not fit int64 (so any sum of one unit's entries fits).
  static absl::StatusOr<ActivationTable> Make(const ActivationDims& dims);

  const SavedTensor& operator[](Activation a) const { return tensors_[static_cast<int>(a)]; }

  // What a unit holds after its forward under `mode`; stage_first: it is the stage's first unit
  // (whose input full recomputation keeps).
  std::vector<SavedTensor> SavedByForward(UnitKind kind, Recompute mode, bool stage_first) const;
  // What a unit holds after its input-gradient (B's first half, or I), in any mode; W frees all.
  std::vector<SavedTensor> HeldAfterInputGradient(UnitKind kind) const;
  // What a unit's input-gradient allocates and frees itself, in order (the kDout it hands to the
  // previous unit is the stage's: StageInputGradient).
  std::vector<ActivationEvent> InputGradientEvents(UnitKind kind, Recompute mode, int unit) const;
  // What a unit's forward allocates and frees itself, in order (its input is the stage's).
  std::vector<ActivationEvent> ForwardEvents(UnitKind kind, Recompute mode, int unit) const;

  // A stage's forward of one microbatch, allocation by allocation, in the StageModel's order.
  std::vector<ActivationEvent> StageForward(const StageUnits& stage, Recompute mode) const;
  // Its input-gradient after that forward (full: the replay first).
  std::vector<ActivationEvent> StageInputGradient(const StageUnits& stage, Recompute mode) const;

 private:
  std::array<SavedTensor, kNumActivations> tensors_{};
};

// Sum of the bytes. REQUIRES: the tensors of one table (then it fits int64).
int64_t TotalBytes(const std::vector<SavedTensor>& tensors);

}  // namespace pp::common

#endif  // PP_COMMON_ACTIVATIONS_H_
