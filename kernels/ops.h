// One interface for the numeric kernels a GPT stage needs, implemented for the CPU (OpenBLAS)
// and for CUDA (cuBLAS + own kernels). Model code is written once against it.
//
// Contract:
// - Every float*/int32_t* argument is memory of the backend (host memory for the CPU, device
//   memory for CUDA), obtained from Alloc/AllocInt. Shapes are row-major and given in comments.
// - Forward ops overwrite their outputs. Backward ops ADD into their gradient outputs (+=), so
//   residual branches and gradient accumulation over microbatches need no extra pass; callers
//   zero gradient buffers when a new accumulation starts. MatmulBackwardInput, AttentionBackward
//   and GeluBackward overwrite instead: their gradients are never summed with another (the
//   model's callers zeroed them first, a pass as long as the output for nothing).
// - A weight (the weight of MatmulForward and MatmulBackwardInput) changes only through
//   CopyToDevice, Copy, Zero, Add, Scale or AdamW between the products that read it, never as
//   another op's output: a backend may keep it in its product's operand type until then (the
//   CPU's bf16 does: kernels/cpu/weight_copies.h).
// - Backward is split the zero-bubble way: *BackwardInput ops produce the gradient flowing to the
//   op's input, *BackwardWeight ops produce parameter gradients. A full backward is exactly the
//   input part followed by the weight part, so both orders give bitwise identical results.
// - The CPU implementation is deterministic: the same call on the same inputs gives the same
//   bits, whatever the thread count of other processes. Reductions run in a fixed order.
#ifndef PP_KERNELS_OPS_H_
#define PP_KERNELS_OPS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/precision.h"

namespace pp::kernels {

struct AdamWParams {
  float lr = 3e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // decoupled; the caller passes 0 for tensors without decay
  int step = 1;               // 1-based, for bias correction
  float grad_scale = 1.0f;    // gradients are multiplied by this first (clipping)
};

class Ops {
 public:
  virtual ~Ops() = default;
  virtual std::string Name() const = 0;  // "cpu" or "cuda:N"
  // How the three Matmul ops run, in one line for the log: "fp32: OpenBLAS sgemm", "bf16:
  // fallback, ... because ...", "bf16: cublasGemmEx ...".
  virtual std::string MatmulPath() const = 0;

  // ---- memory -------------------------------------------------------------------------------
  virtual float* Alloc(size_t n) = 0;  // n floats, zero-filled
  // n floats, contents undefined: for the output of an op that overwrites it whole (a forward
  // op), so no pass writes zeros the op then writes over.
  virtual float* AllocUninitialized(size_t n) = 0;
  virtual int32_t* AllocInt(size_t n) = 0;
  virtual void Free(void* p) = 0;
  virtual void CopyToDevice(float* dst, const float* host_src, size_t n) = 0;
  virtual void CopyToHost(float* host_dst, const float* src, size_t n) = 0;
  virtual void CopyIntToDevice(int32_t* dst, const int32_t* host_src, size_t n) = 0;
  virtual void Copy(float* dst, const float* src, size_t n) = 0;  // device to device
  virtual void Zero(float* x, size_t n) = 0;
  virtual void Synchronize() = 0;

  // ---- elementwise and reductions ------------------------------------------------------------
  virtual void Add(float* acc, const float* x, size_t n) = 0;         // acc += x
  virtual void Scale(float* x, float s, size_t n) = 0;                 // x *= s
  virtual double SumSquares(const float* x, size_t n) = 0;             // sum x^2 in double
  virtual double Sum(const float* x, size_t n) = 0;                    // sum x in double
  // out = a + b, all (n)
  virtual void ResidualForward(float* out, const float* a, const float* b, size_t n) = 0;

  // ---- embedding ------------------------------------------------------------------------------
  // tokens (B,T), wte (V,C), wpe (T,C), positions (B,T) or null -> out (B,T,C):
  // out[b,t] = wte[tokens[b,t]] + wpe[positions[b,t]], with position t for token t when
  // positions is null. positions (issue 33, model.positions "document") restart at each packed
  // document; every entry must be in [0, T) (the CPU aborts naming the entry otherwise).
  virtual void EncoderForward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                              const int32_t* positions, int B, int T, int C) = 0;
  // dout (B,T,C), tokens (B,T), positions (B,T) or null as given to the forward
  // -> dwte (V,C) +=, dwpe (T,C) +=.
  // Order, the same on every backend: row p of dwpe (and row v of dwte) adds the dout rows of
  // every (b,t) with positions[b,t] == p (tokens[b,t] == v) one after the other, in ascending
  // b*T + t, onto the value it had. So positions == t gives exactly the bits of null.
  virtual void EncoderBackward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                               const int32_t* positions, int B, int T, int C) = 0;

  // ---- LayerNorm (eps 1e-5) -------------------------------------------------------------------
  // inp (N,C), weight (C), bias (C) -> out (N,C), mean (N), rstd (N)
  virtual void LayerNormForward(float* out, float* mean, float* rstd, const float* inp,
                                const float* weight, const float* bias, int N, int C) = 0;
  // a, b (N,C) -> res (N,C) = a + b, then LayerNormForward(out, mean, rstd, res, ...): the
  // residual add and the norm that reads it in one pass (the bits of the two ops in turn).
  virtual void ResidualLayerNormForward(float* res, float* out, float* mean, float* rstd,
                                        const float* a, const float* b, const float* weight,
                                        const float* bias, int N, int C) = 0;
  // dout (N,C), dres (N,C) or null -> dinp (N,C) = dres + the input gradient (null: the gradient
  // alone), overwritten: the residual stream's gradient joins in the same pass. dres may be dinp.
  virtual void LayerNormBackwardInput(float* dinp, const float* dres, const float* dout,
                                      const float* inp, const float* weight, const float* mean,
                                      const float* rstd, int N, int C) = 0;
  // dout (N,C) -> dweight (C) +=, dbias (C) +=
  virtual void LayerNormBackwardWeight(float* dweight, float* dbias, const float* dout,
                                       const float* inp, const float* mean, const float* rstd,
                                       int N, int C) = 0;

  // ---- linear (torch.nn.Linear layout) --------------------------------------------------------
  // inp (N,IC), weight (OC,IC), bias (OC) or null -> out (N,OC) = inp weight^T + bias
  virtual void MatmulForward(float* out, const float* inp, const float* weight, const float* bias,
                             int N, int IC, int OC) = 0;
  // dout (N,OC), weight (OC,IC) -> dinp (N,IC) = dout weight, overwritten (not read: no zero-fill
  // before it)
  virtual void MatmulBackwardInput(float* dinp, const float* dout, const float* weight, int N,
                                   int IC, int OC) = 0;
  // dout (N,OC), inp (N,IC) -> dweight (OC,IC) +=, dbias (OC) += (dbias may be null)
  virtual void MatmulBackwardWeight(float* dweight, float* dbias, const float* dout,
                                    const float* inp, int N, int IC, int OC) = 0;

  // ---- causal self-attention ------------------------------------------------------------------
  // qkv (B,T,3C) with q, k, v in that order and heads as contiguous slices of C
  // -> out (B,T,C), stats (B,NH,T,2): each softmax row's maximum score and the reciprocal of its
  // sum of exponentials, all the backward keeps (it recomputes the probabilities from qkv and
  // these, the same bits as the forward's), so no (T,T) matrix outlives a call.
  // doc_start (B,T) or null: packed documents (issue 33), several documents in one row of T
  // tokens that must not see each other. doc_start[b,t] is the position in row b where the
  // document of token (b,t) starts: doc_start[b,0] == 0, and doc_start[b,t] is doc_start[b,t-1]
  // (same document) or t (a new one). Query t attends keys doc_start[b,t]..t (block-causal).
  // null means plain causal attention (every start 0), and all zeros gives the same bits as
  // null. The CPU computes no masked work (up to the vector tile around the diagonal and the
  // document's start), holds one query tile's scores at a time in the forward and one head's
  // (T,T) in the backward, and aborts on a doc_start that breaks the rule; CUDA multiplies the
  // whole T x T blocks into a scratch of the call and masks in the softmax.
  virtual void AttentionForward(float* out, float* stats, const float* qkv,
                                const int32_t* doc_start, int B, int T, int C, int NH) = 0;
  // dout (B,T,C), qkv (B,T,3C), stats (B,NH,T,2) and doc_start (B,T) or null as given to the
  // forward -> dqkv (B,T,3C), overwritten
  virtual void AttentionBackward(float* dqkv, const float* dout, const float* qkv,
                                 const float* stats, const int32_t* doc_start, int B, int T, int C,
                                 int NH) = 0;

  // ---- GELU (tanh approximation) --------------------------------------------------------------
  virtual void GeluForward(float* out, const float* inp, size_t n) = 0;
  // dout (n) -> dinp (n) = dout * gelu'(inp), overwritten
  virtual void GeluBackward(float* dinp, const float* inp, const float* dout, size_t n) = 0;

  // ---- softmax cross-entropy ------------------------------------------------------------------
  // Only the first Vr <= V columns of a row are the vocabulary; columns [Vr, V) are padding
  // (job.proto model.real_vocab_size: tables rounded up for faster products). The softmax runs
  // over the Vr real columns alone, so padding never enters the normalisation, its probs are 0
  // and its dlogits get exactly nothing; with Vr == V this is the plain softmax, same bits.
  // logits (N,V), targets (N) in [0, Vr) -> losses (N) (per-token -log p), probs (N,V)
  virtual void CrossEntropyForward(float* losses, float* probs, const float* logits,
                                   const int32_t* targets, int N, int V, int Vr) = 0;
  // dlogits (N,:Vr) += dloss * (probs - onehot(targets)), dlogits (N,Vr:) untouched; dloss is
  // d(total loss)/d(each token loss)
  virtual void CrossEntropyBackward(float* dlogits, const float* probs, const int32_t* targets,
                                    float dloss, int N, int V, int Vr) = 0;

  // ---- optimizer ------------------------------------------------------------------------------
  // Bias-corrected AdamW on n parameters; m, v are the moments (updated in place).
  virtual void AdamW(float* params, const float* grads, float* m, float* v, size_t n,
                     const AdamWParams& p) = 0;
};

// "cpu" or "cuda:N". threads: BLAS threads for the CPU backend (default 1 per worker process).
// "cuda:N" loads the CUDA plugin libpp_cuda.so (kernels/cuda/plugin.h) on first use; "cpu" never
// does. A missing plugin, driver or device gives an error status naming it, never an abort.
// precision (common/precision.h): bf16 changes only the three Matmul ops (bf16 operands, fp32
// accumulation and results); MakeOps then writes one line to stderr naming the path it took
// (MatmulPath; the CPU's fast path or fallback: kernels/cpu/cpu_ops.h).
absl::StatusOr<std::unique_ptr<Ops>> MakeOps(
    const std::string& device, int threads = 1,
    common::Precision precision = common::Precision::kFp32);

// True when the CUDA plugin loads and a device is visible (loads the plugin).
bool CudaDeviceAvailable();

// ---- variable-length attention (cu_seqlens; packed microbatches, common/packing.h) ------------
// One row of n = cu[S] tokens holding S sequences, sequence i its tokens [cu[i], cu[i+1]), each
// attending causally to itself alone; the backend's causal kernel runs once per sequence at its
// own length, so no masked or padded pair is computed on either backend.
// qkv (n,3C) -> out (n,C), stats (NH * n, 2): sequence i's (NH,L_i,2) at offset 2 NH cu[i].
// cu: host memory, S + 1 entries, cu[0] = 0, increasing.
void AttentionForwardVarlen(Ops& ops, float* out, float* stats, const float* qkv, const int32_t* cu,
                            int S, int C, int NH);
// dout (n,C), qkv (n,3C), stats as the forward left them -> dqkv (n,3C), overwritten
void AttentionBackwardVarlen(Ops& ops, float* dqkv, const float* dout, const float* qkv,
                             const float* stats, const int32_t* cu, int S, int C, int NH);

}  // namespace pp::kernels

#endif  // PP_KERNELS_OPS_H_
