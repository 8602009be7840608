// The C ABI of the CUDA plugin libpp_cuda.so. Everything that links cudart, cuBLAS or NCCL is
// built into that one shared library, and binaries dlopen it (kernels/cuda/plugin.h) only when a
// cuda:N device is asked for: the CPU path never maps a CUDA library, and neither do threads
// that must live on small stacks (cuBLASLt alone carries ~92 KiB of static TLS, which glibc takes
// from every thread's stack when the library is loaded at start-up).
//
// Contract:
// - Only C types cross, plus the one C++ object the project's interface already defines: the
//   pp::kernels::Ops made by pp_cuda_make_ops (a virtual class; the caller deletes it). The
//   plugin is never unloaded, so its code outlives every object it made.
// - Every function that can fail returns 0 on success, else an absl::StatusCode value with a
//   NUL-terminated message in *error. No function aborts on bad input or a missing device.
// - NCCL: a PpNccl is an opaque connected transport. The caller exchanges the ncclUniqueIds
//   (PP_NCCL_ID_BYTES each, made by pp_nccl_unique_id) through its rendezvous store; the plugin
//   never sees the store. Buffers of send/recv/all_reduce are device memory; all_gather takes
//   and returns host memory. A PpNccl is used by one thread at a time, except pp_nccl_abort.
// - Bump PP_CUDA_PLUGIN_ABI_VERSION whenever this header or kernels/ops.h changes.
#ifndef PP_KERNELS_CUDA_PLUGIN_ABI_H_
#define PP_KERNELS_CUDA_PLUGIN_ABI_H_

#include <stddef.h>
#include <stdint.h>

namespace pp::kernels {
class Ops;
}

#define PP_CUDA_PLUGIN_ABI_VERSION 4
#define PP_NCCL_ID_BYTES 128
#define PP_CUDA_PLUGIN_EXPORT __attribute__((visibility("default")))

extern "C" {

struct PpCudaError {
  char message[1024];
};

struct PpNcclConfig {
  int rank;
  int size;
  int device;              // CUDA device index
  double timeout_seconds;  // for connecting and for every wait
  const char* world_id;    // the world communicator's id (made by rank 0)
  // [size] each; entry `rank` is unused. send_ids[p]: the two-rank communicator this rank sends
  // to p on (made by this rank); recv_ids[p]: the one p sends to this rank on (made by p).
  // Both null: collectives only (no point-to-point communicators; sends and receives fail).
  const char* const* send_ids;
  const char* const* recv_ids;
};

struct PpNccl;

PP_CUDA_PLUGIN_EXPORT int pp_cuda_abi_version(void);

// *count = number of usable CUDA devices; fails when no driver is present.
PP_CUDA_PLUGIN_EXPORT int pp_cuda_device_count(int* count, PpCudaError* error);
// precision: 0 fp32, 1 bf16 (common/precision.h; bf16 runs the three Matmul ops on bf16 operands).
PP_CUDA_PLUGIN_EXPORT int pp_cuda_make_ops(int device, int precision, pp::kernels::Ops** ops,
                                           PpCudaError* error);

PP_CUDA_PLUGIN_EXPORT int pp_nccl_unique_id(char* id, PpCudaError* error);
PP_CUDA_PLUGIN_EXPORT int pp_nccl_connect(const PpNcclConfig* config, PpNccl** nccl,
                                          PpCudaError* error);
PP_CUDA_PLUGIN_EXPORT void pp_nccl_destroy(PpNccl* nccl);
// Start a transfer of n floats; *handle identifies it for pp_nccl_wait.
PP_CUDA_PLUGIN_EXPORT int pp_nccl_send(PpNccl* nccl, int peer, uint64_t tag, const float* data,
                                       size_t n, int64_t* handle, PpCudaError* error);
PP_CUDA_PLUGIN_EXPORT int pp_nccl_recv(PpNccl* nccl, int peer, uint64_t tag, float* data, size_t n,
                                       int64_t* handle, PpCudaError* error);
PP_CUDA_PLUGIN_EXPORT int pp_nccl_wait(PpNccl* nccl, int64_t handle, PpCudaError* error);
// mine (bytes) from every rank -> out (size * bytes), rank-major.
PP_CUDA_PLUGIN_EXPORT int pp_nccl_all_gather(PpNccl* nccl, const void* mine, size_t bytes,
                                             void* out, PpCudaError* error);
PP_CUDA_PLUGIN_EXPORT int pp_nccl_all_reduce_sum(PpNccl* nccl, float* data, size_t n,
                                                 PpCudaError* error);
// Any thread: fails every pending and future wait with Aborted.
PP_CUDA_PLUGIN_EXPORT void pp_nccl_abort(PpNccl* nccl);

}  // extern "C"

#endif  // PP_KERNELS_CUDA_PLUGIN_ABI_H_
