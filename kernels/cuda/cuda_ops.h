// The CUDA backend of Ops: cuBLAS for matmuls, own kernels elsewhere. Plain C++ header, so
// code compiled without nvcc can call it. Links against cudart and cuBLAS, never libcuda.
#ifndef PP_KERNELS_CUDA_CUDA_OPS_H_
#define PP_KERNELS_CUDA_CUDA_OPS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/ops.h"

namespace pp::kernels {

// Fails with a clear status when no device (or no driver) is present.
absl::StatusOr<std::unique_ptr<Ops>> MakeCudaOps(int device);

// True when at least one CUDA device is usable.
bool CudaDevicePresent();

}  // namespace pp::kernels

#endif  // PP_KERNELS_CUDA_CUDA_OPS_H_
