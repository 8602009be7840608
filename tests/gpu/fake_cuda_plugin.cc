// A stand-in for libpp_cuda.so with no CUDA in it, for cuda_plugin_test: it reports no device,
// refuses every Ops with a status of its own, and has no NCCL entry points. Built twice, with
// the real ABI version and with a wrong one (FAKE_ABI_VERSION).
#include <cstdio>

#include "absl/status/status.h"
#include "kernels/cuda/plugin_abi.h"

extern "C" {

int pp_cuda_abi_version(void) { return FAKE_ABI_VERSION; }

int pp_cuda_device_count(int* count, PpCudaError* error) {
  *count = 0;
  return 0;
}

int pp_cuda_make_ops(int device, int precision, pp::kernels::Ops** ops, PpCudaError* error) {
  std::snprintf(error->message, sizeof(error->message), "fake plugin has no cuda:%d", device);
  return static_cast<int>(absl::StatusCode::kNotFound);
}

}  // extern "C"
