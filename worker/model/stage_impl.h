// StageModel's private parts (model.h): the per-microbatch saved state and the Impl class, whose
// methods live in model.cc (the stage: build, forward, backward, recomputation) and layers.cc (one
// block, the head: forward beside backward, shapes in comments). Not for use outside worker/model.
// What a microbatch saves, and each tensor's size, is the activation table
// (common/activations.h): every saved Buf is allocated from it and charged to its unit.
//
// Recomputation (StageOptions.recompute; Korthikanti et al. 2022, "Reducing Activation
// Recomputation in Large Transformer Models"): kFull keeps a microbatch's inputs only (tokens,
// the input activation, targets, document starts and positions) between its forward and its
// input-gradient, which runs the forward again first; kSelective drops each block's attention
// stats (B,NH,T,2; the attention keeps no (T,T) probabilities, kernels/ops.h) right after the
// attention and recomputes them from qkv just before the attention backward. The kernels are
// deterministic, so recomputed tensors are the bits the forward made and the gradients equal
// kNone's bitwise.
#ifndef PP_WORKER_MODEL_STAGE_IMPL_H_
#define PP_WORKER_MODEL_STAGE_IMPL_H_

#include <cstdint>
#include <map>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/activations.h"
#include "worker/model/model.h"

namespace pp::model {
namespace internal {

using kernels::Ops;

// Backend memory owned by one microbatch's saved state; keeps the stage's live-bytes count.
template <typename T>
class Buf {
 public:
  Buf() = default;
  // zeroed false: the contents are undefined (Ops::AllocUninitialized), for an op's output that
  // the op overwrites whole.
  Buf(Ops* ops, size_t n, int64_t* live, bool zeroed = true) : ops_(ops), n_(n), live_(live) {
    if constexpr (std::is_same_v<T, float>) {
      p_ = zeroed ? ops->Alloc(n) : ops->AllocUninitialized(n);
    } else {
      p_ = ops->AllocInt(n);
    }
    *live_ += bytes();
  }
  Buf(Buf&& o) noexcept { *this = std::move(o); }
  Buf& operator=(Buf&& o) noexcept {
    if (this != &o) {
      Release();
      ops_ = o.ops_, p_ = std::exchange(o.p_, nullptr), n_ = o.n_, live_ = o.live_;
    }
    return *this;
  }
  ~Buf() { Release(); }
  void Release() {
    if (p_ == nullptr) return;
    ops_->Free(p_);
    *live_ -= bytes();
    p_ = nullptr;
  }
  T* get() const { return p_; }

 private:
  int64_t bytes() const { return static_cast<int64_t>(n_ * sizeof(T)); }
  Ops* ops_ = nullptr;
  T* p_ = nullptr;
  size_t n_ = 0;
  int64_t* live_ = nullptr;
};
using FBuf = Buf<float>;
using IBuf = Buf<int32_t>;

// Forward activations a block's backward reads, then the input-gradients its weight-gradient
// part reads (kept between BackwardInput and BackwardWeight). The fields are the activation
// table's entries (common/activations.h), allocated at its sizes; `unit` is the stage's local
// unit whose live-bytes count they charge.
struct BlockSaved {
  int unit = 0;
  FBuf ln1, mean1, rstd1, qkv, att_stats, atty, res2, ln2, mean2, rstd2, fch, fch_gelu;
  FBuf dy, dfch, dln2, dres2, dqkv, dln1;  // dy: the table's kDout
};
struct HeadSaved {
  int unit = 0;
  IBuf targets;
  FBuf lnf, mean, rstd, probs;
  FBuf dlogits, dlnf;
};
struct EmbedSaved {
  IBuf tokens;
  IBuf positions;  // (N) with ModelConfig.document_positions, else empty (position t)
  FBuf dout;
};
struct MbState {
  // The microbatch's shape: (B,T) = (microbatch_size, seq_len), or a packed row's (1,n) with its
  // sequences (cu_seqlens, StageInput.sequences) and its own activation table (packed_acts).
  int B = 0, T = 0;
  std::vector<int32_t> sequences;
  std::optional<common::ActivationTable> packed_acts;
  int64_t step_tokens = 0;  // packed, last stage: StageInput.step_tokens
  EmbedSaved embed;  // local unit 0
  // (N) StageInput.doc_start in backend memory, or empty (plain causal): every block's
  // attention reads it, in the forward, its recomputations and the input-gradient.
  IBuf doc_start;
  // resid[i]: input of local block i; resid[n_blocks]: head input. Each is the table's kInput of
  // the unit that reads it (Impl::BlockUnit(i)).
  std::vector<FBuf> resid;
  std::vector<BlockSaved> blocks;
  HeadSaved head;
  bool input_grads_done = false;
  // Full recomputation: everything but the inputs was dropped after the forward; the
  // input-gradient runs the forward again first.
  bool dropped = false;
};

// Indices into a block's 12 tensors, in UnitTensors order.
enum BlockTensor {
  kLn1W,
  kLn1B,
  kQkvW,
  kQkvB,
  kProjW,
  kProjB,
  kLn2W,
  kLn2B,
  kFcW,
  kFcB,
  kFc2W,
  kFc2B
};

}  // namespace internal

class StageModel::Impl {
 public:
  Impl(kernels::Ops* ops, const ModelConfig& config, const StageOptions& options);
  ~Impl();

  absl::Status Build();
  bool has_embedding() const { return opt_.first_unit == 0; }
  bool has_head() const { return opt_.last_unit == cfg_.n_layers + 1; }
  size_t activation_size() const { return Nmax_ * C_; }
  std::vector<ModelTensor>& tensors() { return tensors_; }
  int64_t live_bytes() const;
  std::vector<int64_t> unit_live_bytes() const { return unit_live_; }
  void ZeroGrads();
  std::map<std::string, std::vector<float>> ValuesToHost();

  absl::StatusOr<double> Forward(int mb, const StageInput& in, float* out);
  absl::StatusOr<double> Evaluate(const StageInput& in, float* out);
  absl::Status BackwardInput(int mb, const float* grad_out, float* grad_in);
  absl::Status BackwardWeight(int mb);

 private:
  using FBuf = internal::FBuf;
  using IBuf = internal::IBuf;
  using A = common::Activation;
  // Saved tensor `a` of the current microbatch's activation table, charged to local unit `unit`.
  size_t Elements(A a) const { return static_cast<size_t>((*cur_acts_)[a].elements); }
  FBuf NewF(int unit, A a) {  // zeroed: backward ops add into it
    return FBuf(ops_, Elements(a), &unit_live_[unit]);
  }
  FBuf NewOut(int unit, A a) {  // an op overwrites it whole
    return FBuf(ops_, Elements(a), &unit_live_[unit], false);
  }
  IBuf NewI(int unit, A a) { return IBuf(ops_, Elements(a), &unit_live_[unit]); }
  // (N) document starts or positions: inputs outside the activation table (N int32 each, beside
  // its (N,C) and larger entries), so they count in doc_live_, not in live_bytes().
  IBuf NewDocI() { return IBuf(ops_, N_, &doc_live_); }
  // Local units: 0 is the stage's first; block i's, and the head's as block n_blocks.
  int BlockUnit(size_t i) const { return (has_embedding() ? 1 : 0) + static_cast<int>(i); }
  int LastUnit() const { return opt_.last_unit - opt_.first_unit; }

  // The microbatch's shape from its input into `st` (a packed row's sequences checked), then Use.
  absl::Status LoadShape(internal::MbState& st, const StageInput& in);
  // Makes `st` the current microbatch: B_, T_, N_, the table and the sequences are its.
  void Use(const internal::MbState& st);
  bool packed() const { return !cur_sequences_->empty(); }
  int NumSequences() const { return static_cast<int>(cur_sequences_->size()) - 1; }
  absl::Status CheckTokens(const int32_t* tokens, const char* what) const;
  // doc_start (N) host memory: null, or following kernels/ops.h's rule row by row.
  absl::Status CheckDocStarts(const int32_t* doc_start) const;
  // StageInput.doc_start into st.doc_start, and the embedding's positions into st.embed.
  absl::Status LoadDocuments(internal::MbState& st, const int32_t* doc_start);
  // The microbatch's inputs into `st`: tokens and targets to the device, the input activation
  // copied (the caller's buffer may be reused once Forward returns).
  absl::Status LoadInputs(internal::MbState& st, const StageInput& in);
  // The forward from the inputs in `st`, keeping what the backward reads; `out` receives a
  // non-last stage's output. Returns the mean token loss on the last stage, else 0.
  absl::StatusOr<double> ComputeForward(internal::MbState& st, float* out);
  // kFull: frees all but the inputs after the forward, and brings the rest back before the
  // input-gradient.
  void DropToInputs(internal::MbState& st);
  absl::Status Rematerialize(internal::MbState& st);

  // layers.cc
  absl::Status AllReduce(float* x);
  const float* RowBias(const ModelTensor& bias) const;
  // The current microbatch's attention: per packed sequence, or over (B,T) with doc_start
  // (backend memory or null; kernels/ops.h).
  void Attention(float* out, float* stats, const float* qkv, const int32_t* doc_start);
  // doc_start (B,T) backend memory or null: the attention's (kernels/ops.h).
  absl::Status BlockForward(ModelTensor* w, internal::BlockSaved& s, const int32_t* doc_start,
                            const float* x, float* y);
  absl::Status BlockBackwardInput(ModelTensor* w, internal::BlockSaved& s, const int32_t* doc_start,
                                  const float* x, FBuf dy, float* dx);
  void BlockBackwardWeight(ModelTensor* w, internal::BlockSaved& s, const float* x);
  double HeadForward(internal::HeadSaved& s, const float* x);
  void HeadBackwardInput(internal::HeadSaved& s, const float* x, float* dx);
  void HeadBackwardWeight(internal::HeadSaved& s, const float* x);

  kernels::Ops* ops_;
  ModelConfig cfg_;
  StageOptions opt_;
  // B_, T_ and N_ = B_*T_ are the shape of the microbatch being computed (Use sets them at each
  // entry point); Nmax_ the most tokens of any microbatch, which sizes the scratch below.
  int B_ = 0, T_ = 0, C_ = 0;
  size_t N_ = 0, Nmax_ = 0;
  const common::ActivationTable* cur_acts_ = nullptr;    // acts_ or a packed row's
  const std::vector<int32_t>* cur_sequences_ = nullptr;  // empty unless packed
  int64_t cur_step_tokens_ = 0;                          // packed, last stage
  int tp_ = 1, tp_rank_ = 0;  // tensor-parallel group size and this rank in it
  int Cl_ = 0, NHl_ = 0;      // channels (C/TP) and heads (NH/TP) of this rank's attention share
  std::vector<ModelTensor> tensors_;
  ModelTensor* embed_ = nullptr;        // wte, wpe
  std::vector<ModelTensor*> blocks_;    // 12 tensors each
  ModelTensor* head_ = nullptr;         // ln_f.weight, ln_f.bias
  ModelTensor* head_weight_ = nullptr;  // lm_head.weight, or wte when tied
  float* tmp_c_ = nullptr;              // (N,C) scratch, dead between calls
  float* tmp_4c_ = nullptr;             // (N,4C) scratch
  float* logits_ = nullptr;             // (N,V) scratch
  float* losses_ = nullptr;             // (N) scratch
  common::ActivationTable acts_;        // the sizes of what a (B,T) microbatch saves
  common::ActivationDims dims_;         // acts_'s, for a packed row's table
  const std::vector<int32_t> no_sequences_;
  // Live saved bytes per local unit; sized by Build, never resized (Bufs point into it).
  std::vector<int64_t> unit_live_;
  int64_t doc_live_ = 0;  // bytes of NewDocI buffers now (not part of live_bytes())
  std::map<int, internal::MbState> in_flight_;
};

}  // namespace pp::model

#endif  // PP_WORKER_MODEL_STAGE_IMPL_H_
