// Private to the CUDA plugin: how the host and the plugin's streams wait for each other. Shared
// by the Ops backend (cuda_ops.cc) and the NCCL transport (worker/comm/nccl_plugin.cc).
//
// Contract (CUDA's rules, applied so that nothing waits without a deadline):
// - The host never blocks inside the CUDA runtime waiting for the device. cudaStreamSynchronize,
//   cudaDeviceSynchronize, cudaMalloc, cudaFree, cudaFreeHost and copies to or from pageable host
//   memory may wait for every stream of the device, including a NCCL kernel that spins until its
//   peer arrives, which may be never. Instead the host records an event and polls it (AwaitEvent)
//   with a deadline; allocations are stream-ordered (cudaMallocAsync/cudaFreeAsync).
// - Compute streams (one per Ops) register here, per device, so that a NCCL stream can be
//   ordered after all compute queued so far (OrderAfterCompute) although the Ops and the NCCL
//   transport know nothing of each other. Ordering goes one way only: compute never waits for a
//   NCCL stream on the device, the host waits for NCCL (with a deadline) and then queues more
//   compute.
// - Device memory is stream-ordered, from the device's default pool (PrepareDevicePool).
// - Page-locked host buffers come from a process-wide pool and are never freed (cudaFreeHost
//   synchronises the device): TakePinned at set-up, ReturnPinned at tear-down.
#ifndef PP_KERNELS_CUDA_SYNC_H_
#define PP_KERNELS_CUDA_SYNC_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace pp::kernels::cuda {

// Polls `event` until it completed (Ok), failed (Internal), `check` failed (its status; it runs
// between polls and may be empty: NCCL's asynchronous errors, an abort), or `deadline` passed
// (DeadlineExceeded). Messages are bare: callers say what was waited for.
absl::Status AwaitEvent(cudaEvent_t event, absl::Time deadline,
                        const std::function<absl::Status()>& check);
// Records `event` on `stream` (the work queued so far) and awaits it.
absl::Status AwaitStream(cudaStream_t stream, cudaEvent_t event, absl::Time deadline,
                         const std::function<absl::Status()>& check);

// `stream` (of `device`, the current device) is a compute stream until UnregisterCompute.
cudaError_t RegisterCompute(int device, cudaStream_t stream);
void UnregisterCompute(cudaStream_t stream);
// Makes `stream` (of `device`) wait on the GPU for all work queued so far on every compute
// stream of `device`. The host does not wait.
cudaError_t OrderAfterCompute(int device, cudaStream_t stream);

// Prepares the default memory pool of `device` (the one cudaMallocAsync uses) for the plugin:
// it keeps freed memory (the next step reuses it), and every device with peer access to
// `device` may access it. NCCL ranks in one process (threads, in tests) read and write each
// other's buffers directly, and the peer access NCCL enables does not cover pool memory.
// Idempotent; Unavailable naming the device on failure.
absl::Status PrepareDevicePool(int device);

// Page-locked, portable host memory of at least `bytes`, reused from the pool when possible.
cudaError_t TakePinned(size_t bytes, void** buffer);
// Gives a buffer from TakePinned back to the pool (no CUDA call).
void ReturnPinned(void* buffer);

}  // namespace pp::kernels::cuda

#endif  // PP_KERNELS_CUDA_SYNC_H_
