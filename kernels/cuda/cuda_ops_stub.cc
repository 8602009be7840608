// Temporary: replaced by the real CUDA backend.
#include "kernels/cuda/cuda_ops.h"
namespace pp::kernels {
absl::StatusOr<std::unique_ptr<Ops>> MakeCudaOps(int) { return absl::UnimplementedError("CUDA backend not written yet"); }
bool CudaDevicePresent() { return false; }
}  // namespace pp::kernels
