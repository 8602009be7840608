// The own kernels of the CUDA backend (the embedding's: embed_kernels.cu). Conventions:
// - Elementwise kernels use grid-stride loops over size_t indices (coalesced).
// - Row reductions (LayerNorm, attention softmax) give one warp per row; cross-entropy gives one
//   block per row, since vocabularies can be large.
// - No atomics: every output element is written by one thread that sums its terms in a fixed
//   order, so a launch is deterministic run to run.
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/device_kernels.h"
#include "kernels/cuda/device_util.cuh"

namespace pp::kernels::cuda {
namespace {

constexpr int kRowsPerBlock = kBlock / kWarp;  // warp-per-row kernels
constexpr int kReduceBlocks = 256;  // fixed, so SumDouble's order depends on n alone
constexpr float kLayerNormEps = 1e-5f;

int WarpRowGrid(size_t rows) {
  return static_cast<int>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

template <typename T>
__device__ T WarpSum(T v) {
  for (int offset = kWarp / 2; offset > 0; offset >>= 1) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

__device__ float WarpMax(float v) {
  for (int offset = kWarp / 2; offset > 0; offset >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

// Whole-block reductions; every thread gets the result. blockDim.x is a multiple of 32.
template <typename T>
__device__ T BlockSum(T v) {
  __shared__ T partial[kWarp];
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  v = WarpSum(v);
  __syncthreads();  // a previous call may still be reading partial
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = threadIdx.x < blockDim.x / kWarp ? partial[threadIdx.x] : T(0);
  if (warp == 0) v = WarpSum(v);
  if (threadIdx.x == 0) partial[0] = v;
  __syncthreads();
  return partial[0];
}

__device__ float BlockMax(float v) {
  __shared__ float partial[kWarp];
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = threadIdx.x < blockDim.x / kWarp ? partial[threadIdx.x] : -INFINITY;
  if (warp == 0) v = WarpMax(v);
  if (threadIdx.x == 0) partial[0] = v;
  __syncthreads();
  return partial[0];
}

// ---- elementwise ------------------------------------------------------------------------------

__global__ void AddKernel(float* acc, const float* x, size_t n) {
  for (size_t i = GlobalThread(); i < n; i += GridStride()) acc[i] += x[i];
}

__global__ void ScaleKernel(float* x, float s, size_t n) {
  for (size_t i = GlobalThread(); i < n; i += GridStride()) x[i] *= s;
}

__global__ void ResidualKernel(float* out, const float* a, const float* b, size_t n) {
  for (size_t i = GlobalThread(); i < n; i += GridStride()) out[i] = a[i] + b[i];
}

// ---- reductions -------------------------------------------------------------------------------

// x (n) -> partial (gridDim.x): each block's share of sum x (or x^2), in double
template <bool kSquare>
__global__ void PartialSumKernel(double* partial, const float* x, size_t n) {
  double acc = 0.0;
  for (size_t i = GlobalThread(); i < n; i += GridStride()) {
    const double v = x[i];
    acc += kSquare ? v * v : v;
  }
  acc = BlockSum(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// partial (n <= blockDim.x) -> out (1)
__global__ void FinalSumKernel(double* out, const double* partial, int n) {
  double v = static_cast<int>(threadIdx.x) < n ? partial[threadIdx.x] : 0.0;
  v = BlockSum(v);
  if (threadIdx.x == 0) out[0] = v;
}

// ---- LayerNorm --------------------------------------------------------------------------------

// inp (N,C) -> out (N,C), mean (N), rstd (N); one warp per row
__global__ void LayerNormForwardKernel(float* out, float* mean, float* rstd, const float* inp,
                                       const float* weight, const float* bias, int N, int C) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const float* x = inp + static_cast<size_t>(row) * C;
  float sum = 0.0f;
  for (int c = lane; c < C; c += kWarp) sum += x[c];
  const float m = WarpSum(sum) / C;
  float var = 0.0f;
  for (int c = lane; c < C; c += kWarp) {
    const float d = x[c] - m;
    var += d * d;
  }
  const float r = 1.0f / sqrtf(WarpSum(var) / C + kLayerNormEps);
  float* y = out + static_cast<size_t>(row) * C;
  for (int c = lane; c < C; c += kWarp) y[c] = (x[c] - m) * r * weight[c] + bias[c];
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

// dout (N,C), dres (N,C) or null -> dinp (N,C) = dres + the input gradient; one warp per row
__global__ void LayerNormBackwardInputKernel(float* dinp, const float* dres, const float* dout,
                                             const float* inp, const float* weight,
                                             const float* mean, const float* rstd, int N, int C) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const size_t offset = static_cast<size_t>(row) * C;
  const float* x = inp + offset;
  const float* dy = dout + offset;
  const float m = mean[row];
  const float r = rstd[row];
  float sum_dnorm = 0.0f;
  float sum_dnorm_norm = 0.0f;
  for (int c = lane; c < C; c += kWarp) {
    const float dnorm = dy[c] * weight[c];
    sum_dnorm += dnorm;
    sum_dnorm_norm += dnorm * (x[c] - m) * r;
  }
  const float mean_dnorm = WarpSum(sum_dnorm) / C;
  const float mean_dnorm_norm = WarpSum(sum_dnorm_norm) / C;
  float* dx = dinp + offset;
  for (int c = lane; c < C; c += kWarp) {
    const float norm = (x[c] - m) * r;
    const float g = r * (dy[c] * weight[c] - mean_dnorm - norm * mean_dnorm_norm);
    dx[c] = dres == nullptr ? g : dres[offset + c] + g;
  }
}

// Column sums over N rows: block (kWarp, kWarp) covers 32 columns; thread (x, y) sums rows
// y, y+32, ... of column x, then row 0 of the block adds the 32 partial sums in order.
// dout (N,C) -> dweight (C) += sum dout * norm, dbias (C) += sum dout (dweight may be null)
__global__ void ColumnSumsKernel(float* dweight, float* dbias, const float* dout, const float* inp,
                                 const float* mean, const float* rstd, int N, int C) {
  __shared__ float part_w[kWarp][kWarp + 1];
  __shared__ float part_b[kWarp][kWarp + 1];
  const int c = blockIdx.x * kWarp + threadIdx.x;
  float acc_w = 0.0f;
  float acc_b = 0.0f;
  if (c < C) {
    for (int n = threadIdx.y; n < N; n += kWarp) {
      const size_t i = static_cast<size_t>(n) * C + c;
      acc_b += dout[i];
      if (dweight) acc_w += dout[i] * (inp[i] - mean[n]) * rstd[n];
    }
  }
  part_w[threadIdx.y][threadIdx.x] = acc_w;
  part_b[threadIdx.y][threadIdx.x] = acc_b;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  float sum_w = 0.0f;
  float sum_b = 0.0f;
  for (int k = 0; k < kWarp; ++k) {
    sum_w += part_w[k][threadIdx.x];
    sum_b += part_b[k][threadIdx.x];
  }
  if (dweight) dweight[c] += sum_w;
  dbias[c] += sum_b;
}

// ---- linear -----------------------------------------------------------------------------------

__global__ void AddBiasKernel(float* out, const float* bias, int OC, size_t n) {
  for (size_t i = GlobalThread(); i < n; i += GridStride()) out[i] += bias[i % OC];
}

// ---- attention softmax ------------------------------------------------------------------------
// The attention products run through cuBLAS (cuda_ops.cc); these kernels do the row-wise part.
// Row r of (rows, T) is query position t = r % T of batch row b = r / (NH T): its columns are
// s..t, s = doc_start[b,t] (ops.h: packed documents), or 0 without doc_start. One warp per row.
// Lane l takes columns s + l, s + l + 32, ...: with s = 0 the plain causal order, same bits.

// The first column of row r, clamped to [0, t] so a malformed doc_start never indexes outside.
__device__ int RowStart(const int32_t* doc_start, size_t r, int t, int T, int NH) {
  if (doc_start == nullptr) return 0;
  const int s = doc_start[r / (static_cast<size_t>(NH) * T) * T + t];
  return s < 0 ? 0 : (s > t ? t : s);
}

// att (rows,T) scores -> softmax over columns s..t, zeros outside; stats (rows,2) the row's
// maximum and 1 / sum (ops.h), from which CausalSoftmaxAgainKernel gives the same bits
__global__ void CausalSoftmaxKernel(float* att, float* stats, const int32_t* doc_start, size_t rows,
                                    int T, int NH) {
  const size_t r = static_cast<size_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (r >= rows) return;
  const int t = static_cast<int>(r % T), s = RowStart(doc_start, r, t, T, NH);
  float* p = att + r * T;
  // each lane reads and writes only its own columns
  float max_score = -INFINITY;
  for (int j = s + lane; j <= t; j += kWarp) max_score = fmaxf(max_score, p[j]);
  max_score = WarpMax(max_score);
  float sum = 0.0f;
  for (int j = s + lane; j <= t; j += kWarp) {
    p[j] = expf(p[j] - max_score);
    sum += p[j];
  }
  const float inv_sum = 1.0f / WarpSum(sum);
  for (int j = lane; j < T; j += kWarp) p[j] = j >= s && j <= t ? p[j] * inv_sum : 0.0f;
  if (lane == 0) stats[2 * r] = max_score, stats[2 * r + 1] = inv_sum;
}

// att (rows,T) scores -> the probabilities CausalSoftmaxKernel gave, from its stats
__global__ void CausalSoftmaxAgainKernel(float* att, const float* stats, const int32_t* doc_start,
                                         size_t rows, int T, int NH) {
  const size_t r = static_cast<size_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (r >= rows) return;
  const int t = static_cast<int>(r % T), s = RowStart(doc_start, r, t, T, NH);
  const float max_score = stats[2 * r], inv_sum = stats[2 * r + 1];
  float* p = att + r * T;
  for (int j = lane; j < T; j += kWarp) {
    p[j] = j >= s && j <= t ? expf(p[j] - max_score) * inv_sum : 0.0f;
  }
}

// dp (rows,T) holds dP = dout V^T on entry; on exit dS = P (dP - sum_j P dP) on columns s..t,
// zeros outside
__global__ void CausalSoftmaxBackwardKernel(float* dp, const float* att, const int32_t* doc_start,
                                            size_t rows, int T, int NH) {
  const size_t r = static_cast<size_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (r >= rows) return;
  const int t = static_cast<int>(r % T), s = RowStart(doc_start, r, t, T, NH);
  const float* p = att + r * T;
  float* d = dp + r * T;
  float dot = 0.0f;
  for (int j = s + lane; j <= t; j += kWarp) dot += p[j] * d[j];
  dot = WarpSum(dot);
  for (int j = lane; j < T; j += kWarp) d[j] = j >= s && j <= t ? p[j] * (d[j] - dot) : 0.0f;
}

// ---- GELU (tanh approximation) ----------------------------------------------------------------

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

__global__ void GeluForwardKernel(float* out, const float* inp, size_t n) {
  for (size_t i = GlobalThread(); i < n; i += GridStride()) {
    const float x = inp[i];
    out[i] = 0.5f * x * (1.0f + tanhf(kGeluScale * (x + kGeluCubic * x * x * x)));
  }
}

// d/dx of 0.5 x (1 + tanh u), u = s (x + a x^3):
// 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) s (1 + 3 a x^2)
__global__ void GeluBackwardKernel(float* dinp, const float* inp, const float* dout, size_t n) {
  for (size_t i = GlobalThread(); i < n; i += GridStride()) {
    const float x = inp[i];
    const float th = tanhf(kGeluScale * (x + kGeluCubic * x * x * x));
    const float local = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * kGeluScale *
                                                 (1.0f + 3.0f * kGeluCubic * x * x);
    dinp[i] = local * dout[i];
  }
}

// ---- cross-entropy ----------------------------------------------------------------------------

// logits (N,V), targets (N) -> probs (N,V), losses (N); one block per row, the softmax over the
// first Vr columns (the rest is vocabulary padding: probs 0). A target outside [0, Vr) gives a
// NaN loss instead of a read out of bounds.
__global__ void CrossEntropyForwardKernel(float* losses, float* probs, const float* logits,
                                          const int32_t* targets, int V, int Vr) {
  const size_t offset = static_cast<size_t>(blockIdx.x) * V;
  const float* l = logits + offset;
  float* p = probs + offset;
  float max_logit = -INFINITY;
  for (int v = threadIdx.x; v < Vr; v += blockDim.x) max_logit = fmaxf(max_logit, l[v]);
  max_logit = BlockMax(max_logit);
  float sum = 0.0f;
  for (int v = threadIdx.x; v < Vr; v += blockDim.x) {
    p[v] = expf(l[v] - max_logit);
    sum += p[v];
  }
  sum = BlockSum(sum);
  const float inv_sum = 1.0f / sum;
  for (int v = threadIdx.x; v < Vr; v += blockDim.x) p[v] *= inv_sum;
  for (int v = Vr + threadIdx.x; v < V; v += blockDim.x) p[v] = 0.0f;
  if (threadIdx.x == 0) {
    const int32_t target = targets[blockIdx.x];
    // log-sum-exp form: accurate also when p[target] rounds to 1 or underflows
    losses[blockIdx.x] = (target >= 0 && target < Vr) ? logf(sum) + max_logit - l[target] : NAN;
  }
}

// dlogits (N,:Vr) += dloss * (probs - onehot(targets)); the padding columns (N,Vr:) untouched
__global__ void CrossEntropyBackwardKernel(float* dlogits, const float* probs,
                                           const int32_t* targets, float dloss, int V, int Vr,
                                           size_t n) {
  for (size_t i = GlobalThread(); i < n; i += GridStride()) {
    const int v = static_cast<int>(i % V);
    if (v >= Vr) continue;
    const float onehot = v == targets[i / V] ? 1.0f : 0.0f;
    dlogits[i] += dloss * (probs[i] - onehot);
  }
}

// ---- optimizer --------------------------------------------------------------------------------

__global__ void AdamWKernel(float* params, const float* grads, float* m, float* v, size_t n,
                            AdamWStep s) {
  for (size_t i = GlobalThread(); i < n; i += GridStride()) {
    const float g = grads[i] * s.grad_scale;
    const float mi = s.beta1 * m[i] + (1.0f - s.beta1) * g;
    const float vi = s.beta2 * v[i] + (1.0f - s.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float m_hat = mi / s.bias_correction1;
    const float v_hat = vi / s.bias_correction2;
    params[i] -= s.lr * (m_hat / (sqrtf(v_hat) + s.eps) + s.weight_decay * params[i]);
  }
}

}  // namespace

// ---- launchers --------------------------------------------------------------------------------

// See Bf16Bits in kernels/cpu/vec_kernels.inc: adding 0x7fff plus the lowest kept bit rounds to
// nearest even; a NaN only gets its quiet bit.
__global__ void ToBf16Kernel(uint16_t* out, const float* x, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const uint32_t u = __float_as_uint(x[i]);
    const uint32_t bits = (u & 0x7fffffffu) > 0x7f800000u ? (u | 0x00400000u)
                                                           : u + 0x7fffu + ((u >> 16) & 1u);
    out[i] = static_cast<uint16_t>(bits >> 16);
  }
}

void ToBf16(cudaStream_t stream, uint16_t* out, const float* x, size_t n) {
  if (n == 0) return;
  ToBf16Kernel<<<GridFor(n), kBlock, 0, stream>>>(out, x, n);
}

void Add(cudaStream_t stream, float* acc, const float* x, size_t n) {
  if (n == 0) return;
  AddKernel<<<GridFor(n), kBlock, 0, stream>>>(acc, x, n);
}

void Scale(cudaStream_t stream, float* x, float s, size_t n) {
  if (n == 0) return;
  ScaleKernel<<<GridFor(n), kBlock, 0, stream>>>(x, s, n);
}

void Residual(cudaStream_t stream, float* out, const float* a, const float* b, size_t n) {
  if (n == 0) return;
  ResidualKernel<<<GridFor(n), kBlock, 0, stream>>>(out, a, b, n);
}

cudaError_t SumDouble(cudaStream_t stream, const float* x, size_t n, bool square, double* result) {
  double* partial = nullptr;
  cudaError_t err = cudaMallocAsync(&partial, (kReduceBlocks + 1) * sizeof(double), stream);
  if (err != cudaSuccess) return err;
  if (square) {
    PartialSumKernel<true><<<kReduceBlocks, kBlock, 0, stream>>>(partial, x, n);
  } else {
    PartialSumKernel<false><<<kReduceBlocks, kBlock, 0, stream>>>(partial, x, n);
  }
  FinalSumKernel<<<1, kReduceBlocks, 0, stream>>>(partial + kReduceBlocks, partial, kReduceBlocks);
  err = cudaGetLastError();
  if (err == cudaSuccess) {
    err = cudaMemcpyAsync(result, partial + kReduceBlocks, sizeof(double), cudaMemcpyDeviceToHost,
                          stream);
  }
  const cudaError_t freed = cudaFreeAsync(partial, stream);
  return err != cudaSuccess ? err : freed;
}

void LayerNormForward(cudaStream_t stream, float* out, float* mean, float* rstd, const float* inp,
                      const float* weight, const float* bias, int N, int C) {
  if (N == 0) return;
  LayerNormForwardKernel<<<WarpRowGrid(N), kBlock, 0, stream>>>(out, mean, rstd, inp, weight, bias,
                                                                N, C);
}

void LayerNormBackwardInput(cudaStream_t stream, float* dinp, const float* dres, const float* dout,
                            const float* inp, const float* weight, const float* mean,
                            const float* rstd, int N, int C) {
  if (N == 0) return;
  LayerNormBackwardInputKernel<<<WarpRowGrid(N), kBlock, 0, stream>>>(dinp, dres, dout, inp, weight,
                                                                      mean, rstd, N, C);
}

void LayerNormBackwardWeight(cudaStream_t stream, float* dweight, float* dbias, const float* dout,
                             const float* inp, const float* mean, const float* rstd, int N, int C) {
  if (C == 0) return;
  ColumnSumsKernel<<<(C + kWarp - 1) / kWarp, dim3(kWarp, kWarp), 0, stream>>>(
      dweight, dbias, dout, inp, mean, rstd, N, C);
}

void AddBias(cudaStream_t stream, float* out, const float* bias, int N, int OC) {
  const size_t n = static_cast<size_t>(N) * OC;
  if (n == 0) return;
  AddBiasKernel<<<GridFor(n), kBlock, 0, stream>>>(out, bias, OC, n);
}

void BiasBackward(cudaStream_t stream, float* dbias, const float* dout, int N, int OC) {
  if (OC == 0) return;
  ColumnSumsKernel<<<(OC + kWarp - 1) / kWarp, dim3(kWarp, kWarp), 0, stream>>>(
      nullptr, dbias, dout, nullptr, nullptr, nullptr, N, OC);
}

void CausalSoftmax(cudaStream_t stream, float* att, float* stats, const int32_t* doc_start,
                   size_t rows, int T, int NH) {
  if (rows == 0) return;
  CausalSoftmaxKernel<<<WarpRowGrid(rows), kBlock, 0, stream>>>(att, stats, doc_start, rows, T, NH);
}

void CausalSoftmaxAgain(cudaStream_t stream, float* att, const float* stats,
                        const int32_t* doc_start, size_t rows, int T, int NH) {
  if (rows == 0) return;
  CausalSoftmaxAgainKernel<<<WarpRowGrid(rows), kBlock, 0, stream>>>(att, stats, doc_start, rows, T,
                                                                     NH);
}

void CausalSoftmaxBackward(cudaStream_t stream, float* dp, const float* att,
                           const int32_t* doc_start, size_t rows, int T, int NH) {
  if (rows == 0) return;
  CausalSoftmaxBackwardKernel<<<WarpRowGrid(rows), kBlock, 0, stream>>>(dp, att, doc_start, rows, T,
                                                                        NH);
}

void GeluForward(cudaStream_t stream, float* out, const float* inp, size_t n) {
  if (n == 0) return;
  GeluForwardKernel<<<GridFor(n), kBlock, 0, stream>>>(out, inp, n);
}

void GeluBackward(cudaStream_t stream, float* dinp, const float* inp, const float* dout, size_t n) {
  if (n == 0) return;
  GeluBackwardKernel<<<GridFor(n), kBlock, 0, stream>>>(dinp, inp, dout, n);
}

void CrossEntropyForward(cudaStream_t stream, float* losses, float* probs, const float* logits,
                         const int32_t* targets, int N, int V, int Vr) {
  if (N == 0) return;
  CrossEntropyForwardKernel<<<N, kBlock, 0, stream>>>(losses, probs, logits, targets, V, Vr);
}

void CrossEntropyBackward(cudaStream_t stream, float* dlogits, const float* probs,
                          const int32_t* targets, float dloss, int N, int V, int Vr) {
  const size_t n = static_cast<size_t>(N) * V;
  if (n == 0) return;
  CrossEntropyBackwardKernel<<<GridFor(n), kBlock, 0, stream>>>(dlogits, probs, targets, dloss, V,
                                                                Vr, n);
}

void AdamW(cudaStream_t stream, float* params, const float* grads, float* m, float* v, size_t n,
           const AdamWStep& p) {
  if (n == 0) return;
  AdamWKernel<<<GridFor(n), kBlock, 0, stream>>>(params, grads, m, v, n, p);
}

}  // namespace pp::kernels::cuda
