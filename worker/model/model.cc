// StageModel: forward, split backward and per-microbatch saved state of a contiguous unit range.
#include "worker/model/model.h"

#include <algorithm>
#include <map>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace pp::model {
namespace {

using kernels::Ops;

// Backend memory owned by one microbatch's saved state; keeps the stage's live-bytes count.
template <typename T>
class Buf {
 public:
  Buf() = default;
  Buf(Ops* ops, size_t n, int64_t* live) : ops_(ops), n_(n), live_(live) {
    if constexpr (std::is_same_v<T, float>) {
      p_ = ops->Alloc(n);
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
// part reads (kept between BackwardInput and BackwardWeight).
struct BlockSaved {
  FBuf ln1, mean1, rstd1, qkv, att, atty, res2, ln2, mean2, rstd2, fch, fch_gelu;
  FBuf dy, dfch, dln2, dres2, dqkv, dln1;
};
struct HeadSaved {
  IBuf targets;
  FBuf lnf, mean, rstd, probs;
  FBuf dlogits, dlnf;
};
struct EmbedSaved {
  IBuf tokens;
  FBuf dout;
};
struct MbState {
  EmbedSaved embed;
  std::vector<FBuf> resid;  // resid[i]: input of local block i; resid[n_blocks]: head input
  std::vector<BlockSaved> blocks;
  HeadSaved head;
  bool input_grads_done = false;
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

}  // namespace

class StageModel::Impl {
 public:
  Impl(Ops* ops, const ModelConfig& config, const StageOptions& options)
      : ops_(ops), cfg_(config), opt_(options) {
    B_ = options.microbatch_size, T_ = config.seq_len, C_ = config.d_model;
    N_ = static_cast<size_t>(B_) * T_;
    if (options.tensor_parallel != nullptr) {
      tp_ = options.tensor_parallel->size(), tp_rank_ = options.tensor_parallel->rank();
    }
    Cl_ = C_ / tp_, NHl_ = config.n_heads / tp_;
  }

  ~Impl() {
    in_flight_.clear();
    for (auto& t : tensors_) {
      for (float* p : {t.value, t.grad, t.exp_avg, t.exp_avg_sq}) ops_->Free(p);
    }
    for (float* p : {tmp_c_, tmp_4c_, logits_, losses_}) ops_->Free(p);
  }

  absl::Status Build() {
    for (int u = opt_.first_unit; u <= opt_.last_unit; ++u) {
      for (const TensorShape& shape : UnitTensors(cfg_, u)) {
        absl::StatusOr<common::TensorSlice> slice =
            TensorParallelSlice(cfg_, shape, tp_rank_, tp_);
        if (!slice.ok()) return slice.status();
        // The unsplit tensor's initial values, cut: a slice starts as the same bits.
        std::vector<float> init = InitTensorValues(shape, cfg_.n_layers, opt_.seed);
        ModelTensor t;
        t.name = shape.name;
        t.shape = shape.shape;
        t.full_shape = shape.shape;
        t.slice = *slice;
        if (!common::IsWhole(*slice, shape.shape)) {
          absl::StatusOr<std::vector<float>> part = common::CutSlice(shape.shape, *slice, init);
          if (!part.ok()) {
            return absl::InvalidArgumentError(
                absl::StrCat(shape.name, ": ", part.status().message()));
          }
          init = std::move(*part);
          t.shape = *common::SliceShape(shape.shape, *slice);
        }
        t.size = init.size();
        t.value = ops_->Alloc(t.size);
        t.grad = ops_->Alloc(t.size);
        t.exp_avg = ops_->Alloc(t.size);
        t.exp_avg_sq = ops_->Alloc(t.size);
        ops_->CopyToDevice(t.value, init.data(), t.size);
        tensors_.push_back(std::move(t));
      }
    }
    // tensors_ is complete: pointers into it stay valid from here on.
    size_t next = 0;
    if (has_embedding()) embed_ = &tensors_[0], next = 2;
    for (int u = std::max(opt_.first_unit, 1); u <= std::min(opt_.last_unit, cfg_.n_layers); ++u) {
      blocks_.push_back(&tensors_[next]);
      next += 12;
    }
    if (has_head()) {
      head_ = &tensors_[next];
      head_weight_ = cfg_.tie_embeddings ? embed_ : &tensors_[next + 2];
    }
    tmp_c_ = ops_->Alloc(N_ * C_);
    tmp_4c_ = ops_->Alloc(N_ * 4 * Cl_);
    if (has_head()) {
      logits_ = ops_->Alloc(N_ * cfg_.vocab_size);
      losses_ = ops_->Alloc(N_);
    }
    return absl::OkStatus();
  }

  bool has_embedding() const { return opt_.first_unit == 0; }
  bool has_head() const { return opt_.last_unit == cfg_.n_layers + 1; }
  size_t activation_size() const { return N_ * C_; }
  std::vector<ModelTensor>& tensors() { return tensors_; }
  int64_t live_bytes() const { return live_bytes_; }

  void ZeroGrads() {
    for (auto& t : tensors_) ops_->Zero(t.grad, t.size);
  }
  std::map<std::string, std::vector<float>> ValuesToHost() {
    std::map<std::string, std::vector<float>> out;
    for (auto& t : tensors_) {
      std::vector<float>& v = out[t.name];
      v.resize(t.size);
      ops_->CopyToHost(v.data(), t.value, t.size);
    }
    return out;
  }

  absl::StatusOr<double> Forward(int mb, const StageInput& in, float* out) {
    if (in_flight_.count(mb) != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("microbatch ", mb, " is already in flight"));
    }
    absl::StatusOr<double> loss = RunForward(in_flight_[mb], in, out);
    if (!loss.ok()) in_flight_.erase(mb);
    return loss;
  }

  // The same computation into state that dies here: evaluation keeps nothing for a backward.
  absl::StatusOr<double> Evaluate(const StageInput& in, float* out) {
    MbState st;
    return RunForward(st, in, out);
  }

  // Forward into `st`, which keeps what the backward of this microbatch needs.
  absl::StatusOr<double> RunForward(MbState& st, const StageInput& in, float* out) {
    if (has_embedding()) {
      if (auto s = CheckTokens(in.tokens, "tokens"); !s.ok()) return s;
    } else if (in.activations == nullptr) {
      return absl::InvalidArgumentError("forward of a middle stage needs input activations");
    }
    if (has_head()) {
      if (auto s = CheckTokens(in.targets, "targets"); !s.ok()) return s;
    } else if (out == nullptr) {
      return absl::InvalidArgumentError("forward of a non-last stage needs an output buffer");
    }
    const size_t nb = blocks_.size();
    st.resid.resize(nb + 1);
    st.blocks.resize(nb);
    const bool embed_only = nb == 0 && !has_head();
    if (has_embedding()) {
      st.embed.tokens = NewI(N_);
      ops_->CopyIntToDevice(st.embed.tokens.get(), in.tokens, N_);
      float* dst = embed_only ? out : (st.resid[0] = NewF(N_ * C_)).get();
      ops_->EncoderForward(dst, st.embed.tokens.get(), embed_[0].value, embed_[1].value, B_, T_,
                           C_);
    } else {
      st.resid[0] = NewF(N_ * C_);
      ops_->Copy(st.resid[0].get(), in.activations, N_ * C_);
    }
    for (size_t i = 0; i < nb; ++i) {
      float* y = (i + 1 == nb && !has_head()) ? out : (st.resid[i + 1] = NewF(N_ * C_)).get();
      if (absl::Status s = BlockForward(blocks_[i], st.blocks[i], st.resid[i].get(), y); !s.ok()) {
        return s;
      }
    }
    if (!has_head()) return 0.0;
    return HeadForward(st.head, st.resid[nb].get(), in.targets);
  }

  absl::Status BackwardInput(int mb, const float* grad_out, float* grad_in) {
    auto it = in_flight_.find(mb);
    if (it == in_flight_.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("backward of microbatch ", mb, " without its forward"));
    }
    MbState& st = it->second;
    if (st.input_grads_done) {
      return absl::FailedPreconditionError(
          absl::StrCat("input-gradient of microbatch ", mb, " ran twice"));
    }
    if (!has_head() && grad_out == nullptr) {
      return absl::InvalidArgumentError("backward of a non-last stage needs grad_out");
    }
    if (!has_embedding() && grad_in == nullptr) {
      return absl::InvalidArgumentError("backward of a non-first stage needs a grad_in buffer");
    }
    const size_t nb = blocks_.size();
    // g: gradient of the current residual, owned here unless it is the caller's grad_out.
    FBuf g;
    if (has_head()) {
      float* dst = (nb == 0 && !has_embedding()) ? grad_in : (g = NewF(N_ * C_)).get();
      HeadBackwardInput(st.head, st.resid[nb].get(), dst);
    } else {
      g = NewF(N_ * C_);
      ops_->Copy(g.get(), grad_out, N_ * C_);
    }
    for (size_t i = nb; i-- > 0;) {
      FBuf dx;
      float* dst = (i == 0 && !has_embedding()) ? grad_in : (dx = NewF(N_ * C_)).get();
      absl::Status s =
          BlockBackwardInput(blocks_[i], st.blocks[i], st.resid[i].get(), std::move(g), dst);
      if (!s.ok()) return s;
      g = std::move(dx);
    }
    if (has_embedding()) st.embed.dout = std::move(g);
    st.input_grads_done = true;
    return absl::OkStatus();
  }

  absl::Status BackwardWeight(int mb) {
    auto it = in_flight_.find(mb);
    if (it == in_flight_.end() || !it->second.input_grads_done) {
      return absl::FailedPreconditionError(
          absl::StrCat("weight-gradient of microbatch ", mb, " before its input-gradient"));
    }
    MbState& st = it->second;
    const size_t nb = blocks_.size();
    if (has_head()) HeadBackwardWeight(st.head, st.resid[nb].get());
    for (size_t i = nb; i-- > 0;) BlockBackwardWeight(blocks_[i], st.blocks[i], st.resid[i].get());
    if (has_embedding()) {
      ops_->EncoderBackward(embed_[0].grad, embed_[1].grad, st.embed.dout.get(),
                            st.embed.tokens.get(), B_, T_, C_);
    }
    in_flight_.erase(it);
    return absl::OkStatus();
  }

 private:
  FBuf NewF(size_t n) { return FBuf(ops_, n, &live_bytes_); }
  IBuf NewI(size_t n) { return IBuf(ops_, n, &live_bytes_); }

  absl::Status CheckTokens(const int32_t* tokens, const char* what) const {
    if (tokens == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("this stage needs ", what));
    }
    for (size_t i = 0; i < N_; ++i) {
      if (tokens[i] < 0 || tokens[i] >= cfg_.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat(what, "[", i, "] = ", tokens[i],
                                                       " is outside the vocabulary [0, ",
                                                       cfg_.vocab_size, ")"));
      }
    }
    return absl::OkStatus();
  }

  // Sums a partial (N,C) over the tensor-parallel group; nothing to do without one. The group's
  // transport may read x on a stream of its own: x must be complete first.
  absl::Status AllReduce(float* x) {
    if (tp_ == 1) return absl::OkStatus();
    ops_->Synchronize();
    return opt_.tensor_parallel->AllReduceSum(x, N_ * C_);
  }
  // A row-parallel layer's bias, added by TP rank 0 only: the all-reduce then adds it once.
  const float* RowBias(const ModelTensor& bias) const {
    return tp_rank_ == 0 ? bias.value : nullptr;
  }

  // x (N,C) -> y (N,C):
  // y = res2 + mlp(ln_2(res2)), res2 = x + attn(ln_1(x)).
  // With TP, this rank holds Cl = C/TP channels of q, k, v (NHl heads) and 4Cl of mlp.fc.
  absl::Status BlockForward(ModelTensor* w, BlockSaved& s, const float* x, float* y) {
    const int C = C_, Cl = Cl_, NH = NHl_, N = static_cast<int>(N_);
    s.ln1 = NewF(N_ * C), s.mean1 = NewF(N_), s.rstd1 = NewF(N_);
    ops_->LayerNormForward(s.ln1.get(), s.mean1.get(), s.rstd1.get(), x, w[kLn1W].value,
                           w[kLn1B].value, N, C);
    s.qkv = NewF(N_ * 3 * Cl);  // (N,3Cl)
    ops_->MatmulForward(s.qkv.get(), s.ln1.get(), w[kQkvW].value, w[kQkvB].value, N, C, 3 * Cl);
    s.atty = NewF(N_ * Cl), s.att = NewF(static_cast<size_t>(B_) * NH * T_ * T_);
    ops_->AttentionForward(s.atty.get(), s.att.get(), s.qkv.get(), B_, T_, Cl, NH);
    ops_->MatmulForward(tmp_c_, s.atty.get(), w[kProjW].value, RowBias(w[kProjB]), N, Cl, C);
    if (absl::Status st = AllReduce(tmp_c_); !st.ok()) return st;
    s.res2 = NewF(N_ * C);
    ops_->ResidualForward(s.res2.get(), x, tmp_c_, N_ * C);
    s.ln2 = NewF(N_ * C), s.mean2 = NewF(N_), s.rstd2 = NewF(N_);
    ops_->LayerNormForward(s.ln2.get(), s.mean2.get(), s.rstd2.get(), s.res2.get(), w[kLn2W].value,
                           w[kLn2B].value, N, C);
    s.fch = NewF(N_ * 4 * Cl), s.fch_gelu = NewF(N_ * 4 * Cl);  // (N,4Cl)
    ops_->MatmulForward(s.fch.get(), s.ln2.get(), w[kFcW].value, w[kFcB].value, N, C, 4 * Cl);
    ops_->GeluForward(s.fch_gelu.get(), s.fch.get(), N_ * 4 * Cl);
    ops_->MatmulForward(tmp_c_, s.fch_gelu.get(), w[kFc2W].value, RowBias(w[kFc2B]), N, 4 * Cl, C);
    if (absl::Status st = AllReduce(tmp_c_); !st.ok()) return st;
    ops_->ResidualForward(y, s.res2.get(), tmp_c_, N_ * C);
    return absl::OkStatus();
  }

  // dy (N,C) -> dx (N,C), overwritten. Keeps the input-gradients of every weighted op.
  absl::Status BlockBackwardInput(ModelTensor* w, BlockSaved& s, const float* x, FBuf dy,
                                  float* dx) {
    const int C = C_, Cl = Cl_, NH = NHl_, N = static_cast<int>(N_);
    s.dy = std::move(dy);
    ops_->Zero(tmp_4c_, N_ * 4 * Cl);  // d fch_gelu
    ops_->MatmulBackwardInput(tmp_4c_, s.dy.get(), w[kFc2W].value, N, 4 * Cl, C);
    s.dfch = NewF(N_ * 4 * Cl);
    ops_->GeluBackward(s.dfch.get(), s.fch.get(), tmp_4c_, N_ * 4 * Cl);
    s.dln2 = NewF(N_ * C);
    ops_->MatmulBackwardInput(s.dln2.get(), s.dfch.get(), w[kFcW].value, N, C, 4 * Cl);
    if (absl::Status st = AllReduce(s.dln2.get()); !st.ok()) return st;
    s.dres2 = NewF(N_ * C);
    ops_->Copy(s.dres2.get(), s.dy.get(), N_ * C);
    ops_->LayerNormBackwardInput(s.dres2.get(), s.dln2.get(), s.res2.get(), w[kLn2W].value,
                                 s.mean2.get(), s.rstd2.get(), N, C);
    ops_->Zero(tmp_c_, N_ * Cl);  // d atty (N,Cl)
    ops_->MatmulBackwardInput(tmp_c_, s.dres2.get(), w[kProjW].value, N, Cl, C);
    s.dqkv = NewF(N_ * 3 * Cl);
    ops_->AttentionBackward(s.dqkv.get(), tmp_c_, s.qkv.get(), s.att.get(), B_, T_, Cl, NH);
    s.dln1 = NewF(N_ * C);
    ops_->MatmulBackwardInput(s.dln1.get(), s.dqkv.get(), w[kQkvW].value, N, C, 3 * Cl);
    if (absl::Status st = AllReduce(s.dln1.get()); !st.ok()) return st;
    ops_->Copy(dx, s.dres2.get(), N_ * C);
    ops_->LayerNormBackwardInput(dx, s.dln1.get(), x, w[kLn1W].value, s.mean1.get(), s.rstd1.get(),
                                 N, C);
    s.qkv.Release(), s.att.Release(), s.fch.Release();  // the weight part does not read them
    return absl::OkStatus();
  }

  void BlockBackwardWeight(ModelTensor* w, BlockSaved& s, const float* x) {
    const int C = C_, Cl = Cl_, N = static_cast<int>(N_);
    ops_->MatmulBackwardWeight(w[kFc2W].grad, w[kFc2B].grad, s.dy.get(), s.fch_gelu.get(), N,
                               4 * Cl, C);
    ops_->MatmulBackwardWeight(w[kFcW].grad, w[kFcB].grad, s.dfch.get(), s.ln2.get(), N, C, 4 * Cl);
    ops_->LayerNormBackwardWeight(w[kLn2W].grad, w[kLn2B].grad, s.dln2.get(), s.res2.get(),
                                  s.mean2.get(), s.rstd2.get(), N, C);
    ops_->MatmulBackwardWeight(w[kProjW].grad, w[kProjB].grad, s.dres2.get(), s.atty.get(), N, Cl,
                               C);
    ops_->MatmulBackwardWeight(w[kQkvW].grad, w[kQkvB].grad, s.dqkv.get(), s.ln1.get(), N, C,
                               3 * Cl);
    ops_->LayerNormBackwardWeight(w[kLn1W].grad, w[kLn1B].grad, s.dln1.get(), x, s.mean1.get(),
                                  s.rstd1.get(), N, C);
  }

  // x (N,C) -> logits (N,V) -> mean token loss.
  double HeadForward(HeadSaved& s, const float* x, const int32_t* host_targets) {
    const int C = C_, V = cfg_.vocab_size, N = static_cast<int>(N_);
    s.targets = NewI(N_);
    ops_->CopyIntToDevice(s.targets.get(), host_targets, N_);
    s.lnf = NewF(N_ * C), s.mean = NewF(N_), s.rstd = NewF(N_);
    ops_->LayerNormForward(s.lnf.get(), s.mean.get(), s.rstd.get(), x, head_[0].value,
                           head_[1].value, N, C);
    ops_->MatmulForward(logits_, s.lnf.get(), head_weight_->value, nullptr, N, C, V);
    s.probs = NewF(N_ * V);
    ops_->CrossEntropyForward(losses_, s.probs.get(), logits_, s.targets.get(), N, V);
    return ops_->Sum(losses_, N_) / static_cast<double>(N_);
  }

  void HeadBackwardInput(HeadSaved& s, const float* x, float* dx) {
    const int C = C_, V = cfg_.vocab_size, N = static_cast<int>(N_);
    const float dloss = 1.0f / static_cast<float>(N_ * opt_.microbatches);
    s.dlogits = NewF(N_ * V);
    ops_->CrossEntropyBackward(s.dlogits.get(), s.probs.get(), s.targets.get(), dloss, N, V);
    s.dlnf = NewF(N_ * C);
    ops_->MatmulBackwardInput(s.dlnf.get(), s.dlogits.get(), head_weight_->value, N, C, V);
    ops_->Zero(dx, N_ * C);
    ops_->LayerNormBackwardInput(dx, s.dlnf.get(), x, head_[0].value, s.mean.get(), s.rstd.get(), N,
                                 C);
    s.probs.Release();
  }

  void HeadBackwardWeight(HeadSaved& s, const float* x) {
    const int C = C_, V = cfg_.vocab_size, N = static_cast<int>(N_);
    ops_->MatmulBackwardWeight(head_weight_->grad, nullptr, s.dlogits.get(), s.lnf.get(), N, C, V);
    ops_->LayerNormBackwardWeight(head_[0].grad, head_[1].grad, s.dlnf.get(), x, s.mean.get(),
                                  s.rstd.get(), N, C);
  }

  Ops* ops_;
  ModelConfig cfg_;
  StageOptions opt_;
  int B_ = 0, T_ = 0, C_ = 0;
  size_t N_ = 0;
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
  int64_t live_bytes_ = 0;
  std::map<int, MbState> in_flight_;
};

absl::StatusOr<std::unique_ptr<StageModel>> StageModel::Create(Ops* ops, const ModelConfig& config,
                                                               const StageOptions& options) {
  const int units = NumUnits(config);
  if (ops == nullptr) return absl::InvalidArgumentError("StageModel needs an Ops backend");
  if (options.first_unit < 0 || options.last_unit >= units ||
      options.first_unit > options.last_unit) {
    return absl::InvalidArgumentError(absl::StrCat("unit range [", options.first_unit, ", ",
                                                   options.last_unit, "] is not within [0, ",
                                                   units - 1, "]"));
  }
  if (options.microbatch_size <= 0 || options.microbatches <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("microbatch_size (", options.microbatch_size,
                                                   ") and microbatches (", options.microbatches,
                                                   ") must be > 0"));
  }
  if (config.d_model <= 0 || config.n_heads <= 0 || config.d_model % config.n_heads != 0 ||
      config.vocab_size <= 0 || config.seq_len <= 0 || config.n_layers <= 0) {
    return absl::InvalidArgumentError("bad model config (use ModelConfigFromSpec to check it)");
  }
  if (config.tie_embeddings && options.last_unit == units - 1 && options.first_unit != 0) {
    return absl::UnimplementedError("tie_embeddings needs the embedding and the head on one stage");
  }
  if (const parallel::Collectives* tp = options.tensor_parallel; tp != nullptr) {
    if (tp->size() < 1 || tp->rank() < 0 || tp->rank() >= tp->size() ||
        config.n_heads % tp->size() != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor-parallel rank ", tp->rank(), " of ", tp->size(),
                       ": the size must be >= 1 and divide model.n_heads (", config.n_heads, ")"));
    }
  }
  auto impl = std::make_unique<Impl>(ops, config, options);
  if (absl::Status s = impl->Build(); !s.ok()) return s;
  return std::unique_ptr<StageModel>(new StageModel(std::move(impl)));
}

StageModel::StageModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
StageModel::~StageModel() = default;

bool StageModel::has_embedding() const { return impl_->has_embedding(); }
bool StageModel::has_head() const { return impl_->has_head(); }
size_t StageModel::activation_size() const { return impl_->activation_size(); }

absl::StatusOr<double> StageModel::Forward(int mb, const StageInput& in, float* out) {
  return impl_->Forward(mb, in, out);
}
absl::StatusOr<double> StageModel::Evaluate(const StageInput& in, float* out) {
  return impl_->Evaluate(in, out);
}
absl::Status StageModel::Backward(int mb, const float* grad_out, float* grad_in) {
  if (auto s = impl_->BackwardInput(mb, grad_out, grad_in); !s.ok()) return s;
  return impl_->BackwardWeight(mb);
}
absl::Status StageModel::BackwardInput(int mb, const float* grad_out, float* grad_in) {
  return impl_->BackwardInput(mb, grad_out, grad_in);
}
absl::Status StageModel::BackwardWeight(int mb) { return impl_->BackwardWeight(mb); }

void StageModel::ZeroGrads() { impl_->ZeroGrads(); }
std::map<std::string, std::vector<float>> StageModel::ValuesToHost() {
  return impl_->ValuesToHost();
}
std::vector<ModelTensor>& StageModel::tensors() { return impl_->tensors(); }
int64_t StageModel::live_activation_bytes() const { return impl_->live_bytes(); }

}  // namespace pp::model
