// The embedding's kernels (Ops::EncoderForward / EncoderBackward, kernels/ops.h): the lookup,
// and the gradients gathered per row so that no atomics are needed. Every dwte / dwpe element is
// owned by one thread that adds its terms in ascending b*T + t, the order ops.h promises.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/device_kernels.h"
#include "kernels/cuda/device_util.cuh"

namespace pp::kernels::cuda {
namespace {

// tokens (B,T), wte (V,C), wpe (T,C), positions (B,T) or null (position t) -> out (B,T,C)
__global__ void EncoderForwardKernel(float* out, const int32_t* tokens, const float* wte,
                                     const float* wpe, const int32_t* positions, int T, int C,
                                     size_t n) {
  for (size_t i = GlobalThread(); i < n; i += GridStride()) {
    const size_t row = i / C;
    const int c = static_cast<int>(i % C);
    const int t = positions != nullptr ? positions[row] : static_cast<int>(row % T);
    out[i] = wte[static_cast<size_t>(tokens[row]) * C + c] + wpe[static_cast<size_t>(t) * C + c];
  }
}

// dout (B,T,C) -> dwpe (T,C) +=, summing over b in increasing order
__global__ void EncoderPositionBackwardKernel(float* dwpe, const float* dout, int B, int T, int C) {
  const size_t tc = static_cast<size_t>(T) * C;
  for (size_t i = GlobalThread(); i < tc; i += GridStride()) {
    float acc = dwpe[i];
    for (int b = 0; b < B; ++b) acc += dout[b * tc + i];
    dwpe[i] = acc;
  }
}

// ids (N) -> next (N): the next index holding the same id, or -1; head (N): 1 where an index
// is the first of its id. Chains let one thread own each element of a gradient row (dwte by
// token, dwpe by position).
__global__ void ChainKernel(int32_t* next, int32_t* head, const int32_t* ids, int N) {
  const int n = static_cast<int>(GlobalThread());
  if (n >= N) return;
  const int32_t id = ids[n];
  int32_t first = 1;
  for (int m = n - 1; m >= 0; --m) {
    if (ids[m] == id) {
      first = 0;
      break;
    }
  }
  int32_t after = -1;
  for (int m = n + 1; m < N; ++m) {
    if (ids[m] == id) {
      after = m;
      break;
    }
  }
  head[n] = first;
  next[n] = after;
}

// grid (N, ceil(C/kBlock)): block (n, y) adds the dout rows of n's id chain into row ids[n] of
// dgrad (dwte by token, dwpe by position), in ascending index, for kBlock channels; only blocks
// at the head of a chain work
__global__ void ChainBackwardKernel(float* dgrad, const float* dout, const int32_t* ids,
                                    const int32_t* next, const int32_t* head, int C) {
  const int n = blockIdx.x;
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (!head[n] || c >= C) return;
  float* row = dgrad + static_cast<size_t>(ids[n]) * C;
  float acc = row[c];
  for (int m = n; m >= 0; m = next[m]) acc += dout[static_cast<size_t>(m) * C + c];
  row[c] = acc;
}

// dout (N,C), ids (N) -> dgrad rows ids[n] += dout row n, each row's terms in ascending n.
// chain (2N) is scratch: next (N), then head (N).
void ChainBackward(cudaStream_t stream, float* dgrad, const float* dout, const int32_t* ids,
                   int32_t* chain, int N, int C) {
  ChainKernel<<<(N + kBlock - 1) / kBlock, kBlock, 0, stream>>>(chain, chain + N, ids, N);
  const dim3 grid(N, (C + kBlock - 1) / kBlock);
  ChainBackwardKernel<<<grid, kBlock, 0, stream>>>(dgrad, dout, ids, chain, chain + N, C);
}

}  // namespace

void EncoderForward(cudaStream_t stream, float* out, const int32_t* tokens, const float* wte,
                    const float* wpe, const int32_t* positions, int B, int T, int C) {
  const size_t n = static_cast<size_t>(B) * T * C;
  if (n == 0) return;
  EncoderForwardKernel<<<GridFor(n), kBlock, 0, stream>>>(out, tokens, wte, wpe, positions, T, C,
                                                          n);
}

// Without positions dwpe row t sums over b in ascending order (one thread per element, no
// chains): the same terms in the same order as the chains of positions == t would add.
cudaError_t EncoderBackward(cudaStream_t stream, float* dwte, float* dwpe, const float* dout,
                            const int32_t* tokens, const int32_t* positions, int B, int T, int C) {
  const int N = B * T;
  if (N == 0 || C == 0) return cudaSuccess;
  if (positions == nullptr) {
    EncoderPositionBackwardKernel<<<GridFor(static_cast<size_t>(T) * C), kBlock, 0, stream>>>(
        dwpe, dout, B, T, C);
  }
  int32_t* chain = nullptr;  // next (N) then head (N)
  cudaError_t err = cudaMallocAsync(&chain, 2 * static_cast<size_t>(N) * sizeof(int32_t), stream);
  if (err != cudaSuccess) return err;
  ChainBackward(stream, dwte, dout, tokens, chain, N, C);
  // Stream order: the token kernels are done with `chain` before these overwrite it.
  if (positions != nullptr) ChainBackward(stream, dwpe, dout, positions, chain, N, C);
  return cudaFreeAsync(chain, stream);
}

}  // namespace pp::kernels::cuda
