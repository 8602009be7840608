// Private to the CUDA backend: host-side launchers of the own kernels (device_kernels.cu).
// Every launcher enqueues work on `stream` and returns at once; pointers are device memory;
// shapes follow kernels/ops.h. Scratch memory is taken from the stream-ordered pool.
#ifndef PP_KERNELS_CUDA_DEVICE_KERNELS_H_
#define PP_KERNELS_CUDA_DEVICE_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace pp::kernels::cuda {

// Adam hyper-parameters with the bias corrections already folded in on the host.
struct AdamWStep {
  float lr, beta1, beta2, eps, weight_decay, grad_scale;
  float bias_correction1, bias_correction2;  // 1 - beta^step
};

void Add(cudaStream_t stream, float* acc, const float* x, size_t n);
void Scale(cudaStream_t stream, float* x, float s, size_t n);
void Residual(cudaStream_t stream, float* out, const float* a, const float* b, size_t n);

// x (n) -> *result = sum x (or x^2) in double; the block partition depends on n only, so the
// same input always gives the same bits. `result` is page-locked host memory (a copy to pageable
// memory would block the host without a deadline), written once the stream reaches it: the
// caller awaits the stream (sync.h) before reading it.
cudaError_t SumDouble(cudaStream_t stream, const float* x, size_t n, bool square, double* result);

// positions (B,T) or null: Ops::EncoderForward / EncoderBackward (kernels/ops.h), same order.
void EncoderForward(cudaStream_t stream, float* out, const int32_t* tokens, const float* wte,
                    const float* wpe, const int32_t* positions, int B, int T, int C);
cudaError_t EncoderBackward(cudaStream_t stream, float* dwte, float* dwpe, const float* dout,
                            const int32_t* tokens, const int32_t* positions, int B, int T, int C);

void LayerNormForward(cudaStream_t stream, float* out, float* mean, float* rstd, const float* inp,
                      const float* weight, const float* bias, int N, int C);
void LayerNormBackwardInput(cudaStream_t stream, float* dinp, const float* dres, const float* dout,
                            const float* inp, const float* weight, const float* mean,
                            const float* rstd, int N, int C);
void LayerNormBackwardWeight(cudaStream_t stream, float* dweight, float* dbias, const float* dout,
                             const float* inp, const float* mean, const float* rstd, int N, int C);

// out (N,OC) += bias (OC) broadcast over rows
void AddBias(cudaStream_t stream, float* out, const float* bias, int N, int OC);
// dout (N,OC) -> dbias (OC) += column sums
void BiasBackward(cudaStream_t stream, float* dbias, const float* dout, int N, int OC);

// Row r of att (rows,T) is query position t = r % T of batch row b = r / (NH T) (rows = B*NH*T);
// its columns are doc_start[b,t]..t, doc_start (B,T) as in ops.h, or 0..t when it is null.
// att: scores -> softmax probabilities over those columns, zeros outside them; stats (rows,2):
// each row's maximum score and 1 / sum of exponentials (ops.h)
void CausalSoftmax(cudaStream_t stream, float* att, float* stats, const int32_t* doc_start,
                   size_t rows, int T, int NH);
// att: the same scores -> CausalSoftmax's probabilities again, bit for bit, from its stats
void CausalSoftmaxAgain(cudaStream_t stream, float* att, const float* stats,
                        const int32_t* doc_start, size_t rows, int T, int NH);
// dp: dP -> dS = P (dP - rowsum(P dP)) over those columns, zeros outside them
void CausalSoftmaxBackward(cudaStream_t stream, float* dp, const float* att,
                           const int32_t* doc_start, size_t rows, int T, int NH);

void GeluForward(cudaStream_t stream, float* out, const float* inp, size_t n);
void GeluBackward(cudaStream_t stream, float* dinp, const float* inp, const float* dout, size_t n);

// Softmax over the first Vr of V columns (ops.h: the rest is vocabulary padding).
void CrossEntropyForward(cudaStream_t stream, float* losses, float* probs, const float* logits,
                         const int32_t* targets, int N, int V, int Vr);
void CrossEntropyBackward(cudaStream_t stream, float* dlogits, const float* probs,
                          const int32_t* targets, float dloss, int N, int V, int Vr);

// x (n) -> out (n) the bfloat16 bits of each value, round to nearest even (NaN stays a quiet
// NaN), the same bits as the CPU backend's conversion (kernels/cpu/vec_kernels.inc).
void ToBf16(cudaStream_t stream, uint16_t* out, const float* x, size_t n);

void AdamW(cudaStream_t stream, float* params, const float* grads, float* m, float* v, size_t n,
           const AdamWStep& p);

}  // namespace pp::kernels::cuda

#endif  // PP_KERNELS_CUDA_DEVICE_KERNELS_H_
