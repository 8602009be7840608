// Making a CudaOps (cuda_ops.h): the device check, its memory pool, the pooled cuBLAS handles,
// and the plugin's kernel entry points (kernels/cuda/plugin_abi.h).
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/plugin.h"
#include "kernels/cuda/sync.h"

namespace pp::kernels::cuda {
namespace {

struct BlasPool {
  std::mutex mu;
  std::vector<std::pair<int, cublasHandle_t>> free;  // (device, handle)
};

BlasPool& Blas() {
  static auto* pool = new BlasPool;  // never destroyed: its handles live as long as the process
  return *pool;
}

absl::Status CudaFailure(const std::string& name, const char* what, cudaError_t error) {
  return absl::UnavailableError(absl::StrCat(name, ": ", what, ": ", cudaGetErrorString(error)));
}

// Everything but the cuBLAS handle; `parts` holds what was made, even on failure.
absl::Status MakeStreamParts(const std::string& name, CudaOpsParts& parts) {
  cudaError_t error = cudaStreamCreateWithFlags(&parts.stream, cudaStreamNonBlocking);
  if (error != cudaSuccess) return CudaFailure(name, "cudaStreamCreate", error);
  error = cudaEventCreateWithFlags(&parts.done, cudaEventDisableTiming);
  if (error != cudaSuccess) return CudaFailure(name, "cudaEventCreate", error);
  error = TakePinned(kStagingBytes, &parts.staging);
  if (error != cudaSuccess) return CudaFailure(name, "page-locked staging buffer", error);
  return absl::OkStatus();
}

// Releases what MakeStreamParts and TakeBlas made, none of it synchronising.
void Release(const CudaOpsParts& parts) {
  if (parts.blas != nullptr) ReturnBlas(parts.device, parts.blas);
  ReturnPinned(parts.staging);
  if (parts.done != nullptr) cudaEventDestroy(parts.done);
  if (parts.stream != nullptr) cudaStreamDestroy(parts.stream);
}

absl::StatusOr<std::unique_ptr<Ops>> MakeCudaOps(int device, bool bf16) {
  const std::string name = absl::StrCat("cuda:", device);
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    return absl::UnavailableError(
        absl::StrCat(name, ": no usable CUDA device (",
                     err != cudaSuccess ? cudaGetErrorString(err) : "no device visible", ")"));
  }
  if (device < 0 || device >= count) {
    return absl::NotFoundError(absl::StrCat(
        name, ": only ", count, " CUDA device(s) visible (cuda:0..cuda:", count - 1, ")"));
  }
  err = cudaSetDevice(device);
  if (err != cudaSuccess) return CudaFailure(name, "cudaSetDevice", err);
  if (absl::Status s = PrepareDevicePool(device); !s.ok()) return s;
  CudaOpsParts parts;
  parts.device = device;
  parts.bf16 = bf16;
  absl::Status status = MakeStreamParts(name, parts);
  if (status.ok()) {
    cublasStatus_t blas = TakeBlas(device, &parts.blas);
    if (blas == CUBLAS_STATUS_SUCCESS) blas = cublasSetStream(parts.blas, parts.stream);
    if (blas != CUBLAS_STATUS_SUCCESS) {
      status = absl::UnavailableError(
          absl::StrCat(name, ": cuBLAS setup failed: ", cublasGetStatusString(blas)));
    }
  }
  if (status.ok()) {
    err = RegisterCompute(device, parts.stream);
    if (err != cudaSuccess) status = CudaFailure(name, "registering the compute stream", err);
  }
  if (!status.ok()) {
    Release(parts);
    return status;
  }
  return NewCudaOps(parts);
}

}  // namespace

cublasStatus_t TakeBlas(int device, cublasHandle_t* blas) {
  BlasPool& pool = Blas();
  {
    std::lock_guard<std::mutex> lock(pool.mu);
    for (auto it = pool.free.begin(); it != pool.free.end(); ++it) {
      if (it->first != device) continue;
      *blas = it->second;
      pool.free.erase(it);
      return CUBLAS_STATUS_SUCCESS;
    }
  }
  // cublasCreate allocates device memory (a device-wide synchronisation): at set-up only, and
  // once per device and concurrent Ops for the life of the process.
  return cublasCreate(blas);
}

void ReturnBlas(int device, cublasHandle_t blas) {
  BlasPool& pool = Blas();
  std::lock_guard<std::mutex> lock(pool.mu);
  pool.free.emplace_back(device, blas);
}

}  // namespace pp::kernels::cuda

// The plugin's entry points for the kernels (kernels/cuda/plugin_abi.h).
extern "C" {

int pp_cuda_abi_version(void) { return PP_CUDA_PLUGIN_ABI_VERSION; }

int pp_cuda_device_count(int* count, PpCudaError* error) {
  *count = 0;  // left untouched when there is no driver
  const cudaError_t err = cudaGetDeviceCount(count);
  if (err == cudaSuccess) return 0;
  return pp::kernels::ToPluginError(
      absl::UnavailableError(absl::StrCat("no usable CUDA driver: ", cudaGetErrorString(err))),
      error);
}

int pp_cuda_make_ops(int device, int precision, pp::kernels::Ops** ops, PpCudaError* error) {
  if (precision != 0 && precision != 1) {
    return pp::kernels::ToPluginError(
        absl::InvalidArgumentError(absl::StrCat("unknown precision code ", precision)), error);
  }
  absl::StatusOr<std::unique_ptr<pp::kernels::Ops>> made =
      pp::kernels::cuda::MakeCudaOps(device, precision == 1);
  if (!made.ok()) return pp::kernels::ToPluginError(made.status(), error);
  *ops = made->release();
  return 0;
}

}  // extern "C"
