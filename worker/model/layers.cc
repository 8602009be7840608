// One transformer block and the head of a stage (stage_impl.h): each forward beside its
// backward halves, shapes in comments. N = B*T tokens; with TP, Cl = C/TP channels and NHl heads.
#include "absl/strings/str_cat.h"
#include "worker/model/stage_impl.h"

namespace pp::model {

using internal::BlockSaved;
using internal::FBuf;
using internal::HeadSaved;

using internal::kLn1W, internal::kLn1B, internal::kQkvW, internal::kQkvB, internal::kProjW,
    internal::kProjB, internal::kLn2W, internal::kLn2B, internal::kFcW, internal::kFcB,
    internal::kFc2W, internal::kFc2B;

// Sums a partial (N,C) over the tensor-parallel group; nothing to do without one. The group's
// transport may read x on a stream of its own: x must be complete first.
absl::Status StageModel::Impl::AllReduce(float* x) {
  if (tp_ == 1) return absl::OkStatus();
  ops_->Synchronize();
  return opt_.tensor_parallel->AllReduceSum(x, N_ * C_);
}
// A row-parallel layer's bias, added by TP rank 0 only: the all-reduce then adds it once.
const float* StageModel::Impl::RowBias(const ModelTensor& bias) const {
  return tp_rank_ == 0 ? bias.value : nullptr;
}

// qkv (N,3Cl) -> out (N,Cl), stats (B,NHl,T,2): per sequence of a packed row, each sequence's
// (NHl,L,2) after the last (kernels/ops.h AttentionForwardVarlen), else block-causal per document
// (doc_start or null).
void StageModel::Impl::Attention(float* out, float* stats, const float* qkv,
                                 const int32_t* doc_start) {
  if (packed()) {
    kernels::AttentionForwardVarlen(*ops_, out, stats, qkv, cur_sequences_->data(), NumSequences(),
                                    Cl_, NHl_);
  } else {
    ops_->AttentionForward(out, stats, qkv, doc_start, B_, T_, Cl_, NHl_);
  }
}

// x (N,C), doc_start (B,T) or null -> y (N,C):
// y = res2 + mlp(ln_2(res2)), res2 = x + attn(ln_1(x)), attention block-causal per document.
// With TP, this rank holds Cl = C/TP channels of q, k, v (NHl heads) and 4Cl of mlp.fc.
absl::Status StageModel::Impl::BlockForward(ModelTensor* w, BlockSaved& s, const int32_t* doc_start,
                                            const float* x, float* y) {
  const int C = C_, Cl = Cl_, N = static_cast<int>(N_);
  const int u = s.unit;
  s.ln1 = NewOut(u, A::kLn1), s.mean1 = NewOut(u, A::kMean1), s.rstd1 = NewOut(u, A::kRstd1);
  ops_->LayerNormForward(s.ln1.get(), s.mean1.get(), s.rstd1.get(), x, w[kLn1W].value,
                         w[kLn1B].value, N, C);
  s.qkv = NewOut(u, A::kQkv);  // (N,3Cl)
  ops_->MatmulForward(s.qkv.get(), s.ln1.get(), w[kQkvW].value, w[kQkvB].value, N, C, 3 * Cl);
  s.atty = NewOut(u, A::kAtty), s.att_stats = NewOut(u, A::kAttStats);  // (N,Cl), (B,NH,T,2)
  Attention(s.atty.get(), s.att_stats.get(), s.qkv.get(), doc_start);
  if (opt_.recompute == Recompute::kSelective) s.att_stats.Release();  // back before the backward
  ops_->MatmulForward(tmp_c_, s.atty.get(), w[kProjW].value, RowBias(w[kProjB]), N, Cl, C);
  if (absl::Status st = AllReduce(tmp_c_); !st.ok()) return st;
  s.res2 = NewOut(u, A::kRes2);
  s.ln2 = NewOut(u, A::kLn2), s.mean2 = NewOut(u, A::kMean2), s.rstd2 = NewOut(u, A::kRstd2);
  ops_->ResidualLayerNormForward(s.res2.get(), s.ln2.get(), s.mean2.get(), s.rstd2.get(), x, tmp_c_,
                                 w[kLn2W].value, w[kLn2B].value, N, C);
  s.fch = NewOut(u, A::kFch), s.fch_gelu = NewOut(u, A::kFchGelu);  // (N,4Cl)
  ops_->MatmulForward(s.fch.get(), s.ln2.get(), w[kFcW].value, w[kFcB].value, N, C, 4 * Cl);
  ops_->GeluForward(s.fch_gelu.get(), s.fch.get(), N_ * 4 * Cl);
  ops_->MatmulForward(tmp_c_, s.fch_gelu.get(), w[kFc2W].value, RowBias(w[kFc2B]), N, 4 * Cl, C);
  if (absl::Status st = AllReduce(tmp_c_); !st.ok()) return st;
  ops_->ResidualForward(y, s.res2.get(), tmp_c_, N_ * C);
  return absl::OkStatus();
}

// dy (N,C) -> dx (N,C), overwritten. Keeps the input-gradients of every weighted op.
absl::Status StageModel::Impl::BlockBackwardInput(ModelTensor* w, BlockSaved& s,
                                                  const int32_t* doc_start, const float* x, FBuf dy,
                                                  float* dx) {
  const int C = C_, Cl = Cl_, NH = NHl_, N = static_cast<int>(N_);
  if (s.att_stats.get() == nullptr) {  // selective recomputation: the stats, from qkv again
    s.att_stats = NewOut(s.unit, A::kAttStats);                    // (B,NH,T,2)
    Attention(tmp_c_, s.att_stats.get(), s.qkv.get(), doc_start);  // the output is unused
  }
  s.dy = std::move(dy);
  ops_->MatmulBackwardInput(tmp_4c_, s.dy.get(), w[kFc2W].value, N, 4 * Cl, C);  // d fch_gelu
  s.dfch = NewOut(s.unit, A::kDfch);
  ops_->GeluBackward(s.dfch.get(), s.fch.get(), tmp_4c_, N_ * 4 * Cl);
  s.dln2 = NewOut(s.unit, A::kDln2);
  ops_->MatmulBackwardInput(s.dln2.get(), s.dfch.get(), w[kFcW].value, N, C, 4 * Cl);
  if (absl::Status st = AllReduce(s.dln2.get()); !st.ok()) return st;
  s.dres2 = NewOut(s.unit, A::kDres2);  // dy through the residual, plus ln_2's gradient
  ops_->LayerNormBackwardInput(s.dres2.get(), s.dy.get(), s.dln2.get(), s.res2.get(),
                               w[kLn2W].value, s.mean2.get(), s.rstd2.get(), N, C);
  ops_->MatmulBackwardInput(tmp_c_, s.dres2.get(), w[kProjW].value, N, Cl, C);  // d atty (N,Cl)
  s.dqkv = NewOut(s.unit, A::kDqkv);
  if (packed()) {
    kernels::AttentionBackwardVarlen(*ops_, s.dqkv.get(), tmp_c_, s.qkv.get(), s.att_stats.get(),
                                     cur_sequences_->data(), NumSequences(), Cl, NH);
  } else {
    ops_->AttentionBackward(s.dqkv.get(), tmp_c_, s.qkv.get(), s.att_stats.get(), doc_start, B_, T_,
                            Cl, NH);
  }
  s.dln1 = NewOut(s.unit, A::kDln1);
  ops_->MatmulBackwardInput(s.dln1.get(), s.dqkv.get(), w[kQkvW].value, N, C, 3 * Cl);
  if (absl::Status st = AllReduce(s.dln1.get()); !st.ok()) return st;
  ops_->LayerNormBackwardInput(dx, s.dres2.get(), s.dln1.get(), x, w[kLn1W].value, s.mean1.get(),
                               s.rstd1.get(), N, C);
  s.qkv.Release(), s.att_stats.Release(), s.fch.Release();  // the weight part does not read them
  return absl::OkStatus();
}

void StageModel::Impl::BlockBackwardWeight(ModelTensor* w, BlockSaved& s, const float* x) {
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

// x (N,C) -> logits (N,V) -> mean token loss, against s.targets (N) (LoadInputs put them there).
// Only the first Vr = real_vocab columns are the vocabulary: the cross-entropy leaves the padding
// logits out of the softmax and gives them zero gradient (model.h).
double StageModel::Impl::HeadForward(HeadSaved& s, const float* x) {
  const int C = C_, V = cfg_.vocab_size, Vr = cfg_.real_vocab(), N = static_cast<int>(N_);
  s.lnf = NewOut(s.unit, A::kLnf), s.mean = NewOut(s.unit, A::kMeanF);
  s.rstd = NewOut(s.unit, A::kRstdF);
  ops_->LayerNormForward(s.lnf.get(), s.mean.get(), s.rstd.get(), x, head_[0].value,
                         head_[1].value, N, C);
  ops_->MatmulForward(logits_, s.lnf.get(), head_weight_->value, nullptr, N, C, V);
  s.probs = NewOut(s.unit, A::kProbs);
  ops_->CrossEntropyForward(losses_, s.probs.get(), logits_, s.targets.get(), N, V, Vr);
  return ops_->Sum(losses_, N_) / static_cast<double>(N_);
}

void StageModel::Impl::HeadBackwardInput(HeadSaved& s, const float* x, float* dx) {
  const int C = C_, V = cfg_.vocab_size, Vr = cfg_.real_vocab(), N = static_cast<int>(N_);
  // The step loss's gradient per token: 1/(N*M) for a mean of M equal microbatches, 1/step_tokens
  // for a packed step's token mean.
  const float dloss = packed() ? 1.0f / static_cast<float>(cur_step_tokens_)
                               : 1.0f / static_cast<float>(N_ * opt_.microbatches);
  s.dlogits = NewF(s.unit, A::kDlogits);
  ops_->CrossEntropyBackward(s.dlogits.get(), s.probs.get(), s.targets.get(), dloss, N, V, Vr);
  s.dlnf = NewOut(s.unit, A::kDlnf);
  ops_->MatmulBackwardInput(s.dlnf.get(), s.dlogits.get(), head_weight_->value, N, C, V);
  ops_->LayerNormBackwardInput(dx, nullptr, s.dlnf.get(), x, head_[0].value, s.mean.get(),
                               s.rstd.get(), N, C);
  s.probs.Release();
}

void StageModel::Impl::HeadBackwardWeight(HeadSaved& s, const float* x) {
  const int C = C_, V = cfg_.vocab_size, N = static_cast<int>(N_);
  ops_->MatmulBackwardWeight(head_weight_->grad, nullptr, s.dlogits.get(), s.lnf.get(), N, C, V);
  ops_->LayerNormBackwardWeight(head_[0].grad, head_[1].grad, s.dlnf.get(), x, s.mean.get(),
                                s.rstd.get(), N, C);
}

}  // namespace pp::model
