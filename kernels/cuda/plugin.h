// Finds and loads the CUDA plugin libpp_cuda.so (its C ABI: kernels/cuda/plugin_abi.h) on first
// use. Used by MakeOps("cuda:N") and comm::ConnectNccl; links no CUDA library itself.
//
// Contract:
// - Where: $PP_CUDA_PLUGIN when set (a path to the .so), else <dir of /proc/self/exe>/../lib/
//   and then that dir itself (build/bin + build/lib, /opt/pipeline/bin + lib in the images).
// - A missing, unloadable or ABI-mismatched plugin gives Unavailable / FailedPrecondition naming
//   the files tried. Success is cached for the process; failures are retried on the next call.
// - The plugin is never unloaded.
// - Before loading it, sets CUDA_MODULE_LOADING=EAGER (overwriting) and CUDA_DEVICE_MAX_CONNECTIONS
//   =32 (unless set) in the environment, for the CUDA driver it initialises (why: plugin.cc).
#ifndef PP_KERNELS_CUDA_PLUGIN_H_
#define PP_KERNELS_CUDA_PLUGIN_H_

#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/plugin_abi.h"

namespace pp::kernels {

// The plugin's entry points. The NCCL ones are null in a plugin built without NCCL.
struct CudaPlugin {
  std::string path;
  decltype(&pp_cuda_device_count) device_count = nullptr;
  decltype(&pp_cuda_make_ops) make_ops = nullptr;
  decltype(&pp_nccl_unique_id) nccl_unique_id = nullptr;
  decltype(&pp_nccl_connect) nccl_connect = nullptr;
  decltype(&pp_nccl_destroy) nccl_destroy = nullptr;
  decltype(&pp_nccl_send) nccl_send = nullptr;
  decltype(&pp_nccl_recv) nccl_recv = nullptr;
  decltype(&pp_nccl_wait) nccl_wait = nullptr;
  decltype(&pp_nccl_all_gather) nccl_all_gather = nullptr;
  decltype(&pp_nccl_all_reduce_sum) nccl_all_reduce_sum = nullptr;
  decltype(&pp_nccl_abort) nccl_abort = nullptr;
};

absl::StatusOr<const CudaPlugin*> LoadCudaPlugin();

// The two directions of the error convention, for the caller and for the plugin's exports.
inline absl::Status PluginStatus(int code, const PpCudaError& error) {
  if (code == 0) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(code), error.message);
}

inline int ToPluginError(const absl::Status& status, PpCudaError* error) {
  if (status.ok()) return 0;
  std::snprintf(error->message, sizeof(error->message), "%s",
                std::string(status.message()).c_str());
  return static_cast<int>(status.code());
}

}  // namespace pp::kernels

#endif  // PP_KERNELS_CUDA_PLUGIN_H_
