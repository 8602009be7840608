// StageModel: build, forward, split backward, recomputation and the per-microbatch saved state
// of a contiguous unit range (the layers themselves: layers.cc).
#include "worker/model/model.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/packing.h"
#include "worker/model/stage_impl.h"

namespace pp::model {

using internal::MbState;
using kernels::Ops;

StageModel::Impl::Impl(kernels::Ops* ops, const ModelConfig& config, const StageOptions& options)
    : ops_(ops), cfg_(config), opt_(options) {
  B_ = options.microbatch_size, T_ = config.seq_len, C_ = config.d_model;
  N_ = static_cast<size_t>(B_) * T_;
  Nmax_ = options.max_tokens > 0 ? static_cast<size_t>(options.max_tokens) : N_;
  cur_sequences_ = &no_sequences_;
  if (options.tensor_parallel != nullptr) {
    tp_ = options.tensor_parallel->size(), tp_rank_ = options.tensor_parallel->rank();
  }
  Cl_ = C_ / tp_, NHl_ = config.n_heads / tp_;
}

StageModel::Impl::~Impl() {
  in_flight_.clear();
  for (auto& t : tensors_) {
    for (float* p : {t.value, t.grad, t.exp_avg, t.exp_avg_sq}) ops_->Free(p);
  }
  for (float* p : {tmp_c_, tmp_4c_, logits_, losses_}) ops_->Free(p);
}

absl::Status StageModel::Impl::Build() {
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
  dims_.B = B_, dims_.T = T_, dims_.C = C_, dims_.n_heads = cfg_.n_heads;
  dims_.vocab = cfg_.vocab_size, dims_.tp = tp_, dims_.precision = opt_.precision;
  absl::StatusOr<common::ActivationTable> acts = common::ActivationTable::Make(dims_);
  if (!acts.ok()) return acts.status();
  acts_ = *acts;
  cur_acts_ = &acts_;
  unit_live_.assign(opt_.last_unit - opt_.first_unit + 1, 0);
  tmp_c_ = ops_->Alloc(Nmax_ * C_);
  tmp_4c_ = ops_->Alloc(Nmax_ * 4 * Cl_);
  if (has_head()) {
    logits_ = ops_->Alloc(Nmax_ * cfg_.vocab_size);
    losses_ = ops_->Alloc(Nmax_);
  }
  return absl::OkStatus();
}

int64_t StageModel::Impl::live_bytes() const {
  int64_t sum = 0;
  for (int64_t bytes : unit_live_) sum += bytes;
  return sum;
}

void StageModel::Impl::ZeroGrads() {
  for (auto& t : tensors_) ops_->Zero(t.grad, t.size);
}

std::map<std::string, std::vector<float>> StageModel::Impl::ValuesToHost() {
  std::map<std::string, std::vector<float>> out;
  for (auto& t : tensors_) {
    std::vector<float>& v = out[t.name];
    v.resize(t.size);
    ops_->CopyToHost(v.data(), t.value, t.size);
  }
  return out;
}

absl::StatusOr<double> StageModel::Impl::Forward(int mb, const StageInput& in, float* out) {
  if (in_flight_.count(mb) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("microbatch ", mb, " is already in flight"));
  }
  MbState& st = in_flight_[mb];
  absl::Status loaded = LoadShape(st, in);
  if (loaded.ok()) loaded = LoadInputs(st, in);
  absl::StatusOr<double> loss = loaded.ok() ? ComputeForward(st, out) : loaded;
  if (!loss.ok()) {
    in_flight_.erase(mb);
  } else if (opt_.recompute == Recompute::kFull) {
    DropToInputs(st);
  }
  return loss;
}

// The same computation into state that dies here: evaluation keeps nothing for a backward.
absl::StatusOr<double> StageModel::Impl::Evaluate(const StageInput& in, float* out) {
  MbState st;
  if (absl::Status s = LoadShape(st, in); !s.ok()) return s;
  if (absl::Status s = LoadInputs(st, in); !s.ok()) return s;
  return ComputeForward(st, out);
}

absl::Status StageModel::Impl::LoadInputs(MbState& st, const StageInput& in) {
  if (has_embedding()) {
    if (auto s = CheckTokens(in.tokens, "tokens"); !s.ok()) return s;
  } else if (in.activations == nullptr) {
    return absl::InvalidArgumentError("forward of a middle stage needs input activations");
  }
  if (has_head()) {
    if (auto s = CheckTokens(in.targets, "targets"); !s.ok()) return s;
  }
  if (auto s = LoadDocuments(st, in.doc_start); !s.ok()) return s;
  st.resid.resize(blocks_.size() + 1);
  st.blocks.resize(blocks_.size());
  for (size_t i = 0; i < st.blocks.size(); ++i) st.blocks[i].unit = BlockUnit(i);
  st.head.unit = BlockUnit(blocks_.size());
  if (has_embedding()) {
    st.embed.tokens = NewI(0, A::kTokens);
    ops_->CopyIntToDevice(st.embed.tokens.get(), in.tokens, N_);
  } else {
    st.resid[0] = NewOut(0, A::kInput);
    ops_->Copy(st.resid[0].get(), in.activations, N_ * C_);
  }
  if (has_head()) {
    st.head.targets = NewI(st.head.unit, A::kTargets);
    ops_->CopyIntToDevice(st.head.targets.get(), in.targets, N_);
  }
  return absl::OkStatus();
}

absl::StatusOr<double> StageModel::Impl::ComputeForward(MbState& st, float* out) {
  if (!has_head() && out == nullptr) {
    return absl::InvalidArgumentError("forward of a non-last stage needs an output buffer");
  }
  const size_t nb = blocks_.size();
  const bool embed_only = nb == 0 && !has_head();
  if (has_embedding()) {
    float* dst = embed_only ? out : (st.resid[0] = NewOut(BlockUnit(0), A::kInput)).get();
    ops_->EncoderForward(dst, st.embed.tokens.get(), embed_[0].value, embed_[1].value,
                         st.embed.positions.get(), B_, T_, C_);
  }
  for (size_t i = 0; i < nb; ++i) {
    // The block's output is the next unit's saved input, or the caller's `out`.
    float* y = (i + 1 == nb && !has_head())
                   ? out
                   : (st.resid[i + 1] = NewOut(BlockUnit(i + 1), A::kInput)).get();
    absl::Status s =
        BlockForward(blocks_[i], st.blocks[i], st.doc_start.get(), st.resid[i].get(), y);
    if (!s.ok()) return s;
  }
  if (!has_head()) return 0.0;
  return HeadForward(st.head, st.resid[nb].get());
}

void StageModel::Impl::DropToInputs(MbState& st) {
  for (size_t i = has_embedding() ? 0 : 1; i < st.resid.size(); ++i) st.resid[i].Release();
  for (internal::BlockSaved& b : st.blocks) {
    const int unit = b.unit;
    b = internal::BlockSaved();
    b.unit = unit;
  }
  internal::HeadSaved& h = st.head;
  h.lnf.Release(), h.mean.Release(), h.rstd.Release(), h.probs.Release();
  st.dropped = true;
}

// The forward again, from the inputs kept; a non-last stage's output goes to a buffer freed
// here (the boundary tensor was sent with the first forward's bits, which these equal).
absl::Status StageModel::Impl::Rematerialize(MbState& st) {
  st.dropped = false;
  if (blocks_.empty() && !has_head()) return absl::OkStatus();  // the embedding keeps its tokens
  FBuf discard;
  float* out = has_head() ? nullptr : (discard = NewOut(LastUnit(), A::kDiscard)).get();
  absl::StatusOr<double> loss = ComputeForward(st, out);
  return loss.status();
}

absl::Status StageModel::Impl::BackwardInput(int mb, const float* grad_out, float* grad_in) {
  auto it = in_flight_.find(mb);
  if (it == in_flight_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("backward of microbatch ", mb, " without its forward"));
  }
  MbState& st = it->second;
  Use(st);
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
  if (st.dropped) {
    if (absl::Status s = Rematerialize(st); !s.ok()) return s;
  }
  const size_t nb = blocks_.size();
  // g: gradient of the current residual, owned here unless it is the caller's grad_out.
  FBuf g;
  if (has_head()) {
    // The gradient of the head's input: the previous unit's kDout, or the caller's grad_in.
    float* dst = (nb == 0 && !has_embedding())
                     ? grad_in
                     : (g = NewOut(BlockUnit(nb) - 1, A::kDout)).get();
    HeadBackwardInput(st.head, st.resid[nb].get(), dst);
  } else {
    g = NewOut(LastUnit(), A::kDout);
    ops_->Copy(g.get(), grad_out, N_ * C_);
  }
  for (size_t i = nb; i-- > 0;) {
    FBuf dx;
    float* dst = (i == 0 && !has_embedding())
                     ? grad_in
                     : (dx = NewOut(BlockUnit(i) - 1, A::kDout)).get();
    absl::Status s = BlockBackwardInput(blocks_[i], st.blocks[i], st.doc_start.get(),
                                        st.resid[i].get(), std::move(g), dst);
    if (!s.ok()) return s;
    g = std::move(dx);
  }
  if (has_embedding()) st.embed.dout = std::move(g);
  st.doc_start.Release();  // the weight-gradient runs no attention
  st.input_grads_done = true;
  return absl::OkStatus();
}

absl::Status StageModel::Impl::BackwardWeight(int mb) {
  auto it = in_flight_.find(mb);
  if (it == in_flight_.end() || !it->second.input_grads_done) {
    return absl::FailedPreconditionError(
        absl::StrCat("weight-gradient of microbatch ", mb, " before its input-gradient"));
  }
  MbState& st = it->second;
  Use(st);
  const size_t nb = blocks_.size();
  if (has_head()) HeadBackwardWeight(st.head, st.resid[nb].get());
  for (size_t i = nb; i-- > 0;) BlockBackwardWeight(blocks_[i], st.blocks[i], st.resid[i].get());
  if (has_embedding()) {
    ops_->EncoderBackward(embed_[0].grad, embed_[1].grad, st.embed.dout.get(),
                          st.embed.tokens.get(), st.embed.positions.get(), B_, T_, C_);
  }
  in_flight_.erase(it);
  return absl::OkStatus();
}

void StageModel::Impl::Use(const MbState& st) {
  B_ = st.B, T_ = st.T;
  N_ = static_cast<size_t>(B_) * T_;
  cur_acts_ = st.packed_acts ? &*st.packed_acts : &acts_;
  cur_sequences_ = &st.sequences;
  cur_step_tokens_ = st.step_tokens;
}

absl::Status StageModel::Impl::LoadShape(MbState& st, const StageInput& in) {
  st.B = opt_.microbatch_size, st.T = cfg_.seq_len;
  if (in.sequences == nullptr) {
    Use(st);
    return absl::OkStatus();
  }
  const int S = in.num_sequences;
  if (opt_.max_tokens <= 0 || in.doc_start != nullptr || S < 1 || in.sequences[0] != 0) {
    return absl::InvalidArgumentError(
        "a packed microbatch needs StageOptions.max_tokens, no doc_start, and sequences from 0");
  }
  for (int i = 0; i < S; ++i) {
    const int64_t length = int64_t{in.sequences[i + 1]} - in.sequences[i];
    if (length < 1 || length > cfg_.seq_len) {
      return absl::InvalidArgumentError(absl::StrCat("packed sequence ", i, " has ", length,
                                                     " tokens; it must have 1..seq_len (",
                                                     cfg_.seq_len, ")"));
    }
  }
  if (in.sequences[S] > opt_.max_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("a packed microbatch of ", in.sequences[S],
                                                   " tokens exceeds max_tokens ", opt_.max_tokens));
  }
  if (has_head() && in.step_tokens < in.sequences[S]) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step_tokens ", in.step_tokens, " is fewer than the microbatch's ", in.sequences[S]));
  }
  if (has_embedding() && !cfg_.document_positions) {
    return absl::InvalidArgumentError(
        "packed microbatches need model.positions \"document\" (positions restart per sequence)");
  }
  st.B = 1, st.T = in.sequences[S];
  st.sequences.assign(in.sequences, in.sequences + S + 1);
  st.step_tokens = in.step_tokens;
  common::ActivationDims dims = dims_;
  dims.B = 1, dims.T = st.T;
  absl::StatusOr<common::ActivationTable> acts = common::ActivationTable::Make(dims);
  if (!acts.ok()) return acts.status();
  st.packed_acts = *std::move(acts);
  Use(st);
  return absl::OkStatus();
}

absl::Status StageModel::Impl::CheckTokens(const int32_t* tokens, const char* what) const {
  if (tokens == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("this stage needs ", what));
  }
  // Padding ids (real_vocab_size and up) are not in the vocabulary: the loss masks them.
  for (size_t i = 0; i < N_; ++i) {
    if (tokens[i] < 0 || tokens[i] >= cfg_.real_vocab()) {
      return absl::InvalidArgumentError(absl::StrCat(what, "[", i, "] = ", tokens[i],
                                                     " is outside the vocabulary [0, ",
                                                     cfg_.real_vocab(), ")"));
    }
  }
  return absl::OkStatus();
}

// The kernels abort on starts that break ops.h's rule; a stage refuses them with a status.
absl::Status StageModel::Impl::CheckDocStarts(const int32_t* doc_start) const {
  if (doc_start == nullptr) return absl::OkStatus();
  for (size_t i = 0; i < N_; ++i) {
    const size_t t = i % T_;
    const int32_t s = doc_start[i];
    if (static_cast<size_t>(s) == t || (t > 0 && s == doc_start[i - 1])) continue;
    return absl::InvalidArgumentError(
        absl::StrCat("doc_start[", i / T_, ",", t, "] = ", s,
                     ": a document starts at 0, and each entry is the "
                     "previous one (same document) or its own index (a new one)"));
  }
  return absl::OkStatus();
}

absl::Status StageModel::Impl::LoadDocuments(MbState& st, const int32_t* doc_start) {
  if (packed()) {  // each sequence's positions from 0 (LoadShape checked they fit the table)
    if (!has_embedding()) return absl::OkStatus();
    std::vector<int32_t> pos(N_);
    for (size_t i = 0; i + 1 < st.sequences.size(); ++i) {
      for (int32_t t = st.sequences[i]; t < st.sequences[i + 1]; ++t) {
        pos[t] = t - st.sequences[i];
      }
    }
    st.embed.positions = NewDocI();
    ops_->CopyIntToDevice(st.embed.positions.get(), pos.data(), N_);
    return absl::OkStatus();
  }
  if (absl::Status s = CheckDocStarts(doc_start); !s.ok()) return s;
  const bool positions = has_embedding() && cfg_.document_positions;
  if (positions && doc_start == nullptr) {
    return absl::InvalidArgumentError(
        "model.positions \"document\" needs the microbatch's document starts (doc_start) on the "
        "first stage");
  }
  if (doc_start == nullptr) return absl::OkStatus();
  st.doc_start = NewDocI();
  ops_->CopyIntToDevice(st.doc_start.get(), doc_start, N_);
  if (positions) {
    // positions (B,T): token t of a document starting at doc_start[b,t] sits at its offset
    std::vector<int32_t> pos(N_);
    for (size_t i = 0; i < N_; ++i) pos[i] = static_cast<int32_t>(i % T_) - doc_start[i];
    st.embed.positions = NewDocI();
    ops_->CopyIntToDevice(st.embed.positions.get(), pos.data(), N_);
  }
  return absl::OkStatus();
}

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
  if (options.max_tokens > 0 && options.microbatch_size != 1) {
    return absl::InvalidArgumentError("packed microbatches (max_tokens) need microbatch_size 1");
  }
  if (options.microbatch_size <= 0 || options.microbatches <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("microbatch_size (", options.microbatch_size,
                                                   ") and microbatches (", options.microbatches,
                                                   ") must be > 0"));
  }
  if (config.d_model <= 0 || config.n_heads <= 0 || config.d_model % config.n_heads != 0 ||
      config.vocab_size <= 0 || config.seq_len <= 0 || config.n_layers <= 0 ||
      config.real_vocab_size < 0 || config.real_vocab_size > config.vocab_size) {
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
std::vector<int64_t> StageModel::live_activation_bytes_by_unit() const {
  return impl_->unit_live_bytes();
}

}  // namespace pp::model
