#include "kernels/ops.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_ops.h"
#ifdef PP_HAVE_CUDA
#include "kernels/cuda/cuda_ops.h"
#endif

namespace pp::kernels {

absl::StatusOr<std::unique_ptr<Ops>> MakeOps(const std::string& device, int threads) {
  if (device == "cpu") return MakeCpuOps(threads < 1 ? 1 : threads);
  if (absl::StartsWith(device, "cuda:")) {
    int index = 0;
    if (!absl::SimpleAtoi(device.substr(5), &index) || index < 0) {
      return absl::InvalidArgumentError(absl::StrCat("bad device '", device, "': want cuda:N"));
    }
#ifdef PP_HAVE_CUDA
    return MakeCudaOps(index);
#else
    return absl::UnavailableError("this build has no CUDA backend (nvcc was not found)");
#endif
  }
  return absl::InvalidArgumentError(absl::StrCat("bad device '", device, "': want cpu or cuda:N"));
}

bool CudaDeviceAvailable() {
#ifdef PP_HAVE_CUDA
  return CudaDevicePresent();
#else
  return false;
#endif
}

}  // namespace pp::kernels
