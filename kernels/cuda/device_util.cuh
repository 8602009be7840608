// Launch shapes and thread indexing the own kernels' files share (device_kernels.cu,
// embed_kernels.cu). Each file gets its own copy (anonymous namespace): no separable compilation.
#ifndef PP_KERNELS_CUDA_DEVICE_UTIL_CUH_
#define PP_KERNELS_CUDA_DEVICE_UTIL_CUH_

#include <cuda_runtime.h>

#include <cstddef>

namespace pp::kernels::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kBlock = 256;
constexpr int kMaxGrid = 8192;

// Blocks of kBlock threads for a grid-stride loop over n elements, capped at kMaxGrid.
int GridFor(size_t n) {
  size_t blocks = (n + kBlock - 1) / kBlock;
  return static_cast<int>(blocks < kMaxGrid ? blocks : kMaxGrid);
}

__device__ size_t GlobalThread() {
  return static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ size_t GridStride() { return static_cast<size_t>(gridDim.x) * blockDim.x; }

}  // namespace
}  // namespace pp::kernels::cuda

#endif  // PP_KERNELS_CUDA_DEVICE_UTIL_CUH_
