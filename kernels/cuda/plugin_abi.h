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
// - NCCL communicators: a world one for the collectives, and per listed peer p and channel c two
//   non-blocking two-rank ones, "this rank sends to p on c" and "p sends to this rank on c", each
//   with its own stream, so the messages of one (direction, channel) match in posting order and
//   never wait behind another's. pp_nccl_connect initialises all of them and, unless
//   config.eager is 0, connects every pair one with a one-float warm-up transfer (all posted
//   before any is waited for) before it returns: NCCL connects a pair at its first transfer,
//   which needs both ranks inside NCCL at once, so a receive posted ahead of its send must not
//   be the first. Sends and receives to a peer or channel without a communicator fail with
//   FailedPrecondition.
// - Ordering with compute, on the GPU: every NCCL operation (send, recv, all_reduce) is ordered
//   after all work queued, at the moment of the call, on the streams of every Ops that
//   pp_cuda_make_ops made for the same device in this process (buffers zeroed or produced there
//   are complete before NCCL reads or overwrites them). The other direction needs no GPU
//   ordering: pp_nccl_wait returns after the host saw the operation complete, so compute queued
//   after it sees a received buffer, and may overwrite or free a sent one.
// - Deadlines: every wait (connecting, pp_nccl_wait, all_gather, all_reduce_sum) polls with
//   config.timeout_seconds and fails with DeadlineExceeded; pp_nccl_abort makes the pending and
//   every later call fail with Aborted. After the first failure of NCCL, CUDA or a deadline, the
//   plugin aborts every communicator of the PpNccl (once each) and every later call fails.
// - Bump PP_CUDA_PLUGIN_ABI_VERSION whenever this header or kernels/ops.h changes.
#ifndef PP_KERNELS_CUDA_PLUGIN_ABI_H_
#define PP_KERNELS_CUDA_PLUGIN_ABI_H_

#include <stddef.h>
#include <stdint.h>

namespace pp::kernels {
class Ops;
}

#define PP_CUDA_PLUGIN_ABI_VERSION 7
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
  // Point to point: `channels` channels with each of the `num_peers` distinct ranks in `peers`;
  // num_peers 0: collectives only (sends and receives fail). Entry i * channels + c of
  // send_ids: the communicator this rank sends to peers[i] on, on channel c (made by this rank);
  // of recv_ids: the one peers[i] sends to this rank on, on channel c (made by peers[i]).
  int channels;
  int num_peers;
  const int* peers;
  const char* const* send_ids;
  const char* const* recv_ids;
  // 0: no warm-up transfer, each pair connects at its first transfer as NCCL does (which
  // deadlocks when a receive is posted before the peer's first operation on it): tests only.
  int eager;
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
// Start a transfer of n floats on `channel` with `peer`; *handle identifies it for pp_nccl_wait.
// NCCL matches by posting order and ignores `tag`; the caller names its messages in errors.
PP_CUDA_PLUGIN_EXPORT int pp_nccl_send(PpNccl* nccl, int peer, int channel, uint64_t tag,
                                       const float* data, size_t n, int64_t* handle,
                                       PpCudaError* error);
PP_CUDA_PLUGIN_EXPORT int pp_nccl_recv(PpNccl* nccl, int peer, int channel, uint64_t tag,
                                       float* data, size_t n, int64_t* handle,
                                       PpCudaError* error);
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
