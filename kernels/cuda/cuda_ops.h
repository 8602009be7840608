// Private to the CUDA plugin: the Ops backend on one CUDA device (cuda_ops.cc) and what it is
// made of. cuda_setup.cc checks the device, prepares its memory pool and makes the parts.
//
// Contract:
// - All work of one CudaOps is queued on its own non-blocking stream, in call order. Device
//   memory is stream-ordered (cudaMallocAsync/cudaFreeAsync on that stream, from the device's
//   default pool, which keeps freed memory), so Alloc and Free never synchronise the device.
// - The host waits for the stream only where data goes to the host (CopyToHost, Sum,
//   SumSquares), where the host buffer must be reusable at once (CopyToDevice) and in
//   Synchronize, each time by polling an event with a deadline (kernels/cuda/sync.h); host data
//   passes through a page-locked staging buffer. A wait that outlives the deadline, like any
//   failing CUDA call inside an op, prints what failed and aborts: the interface has no status,
//   and it means a lost or hung device, not bad input.
// - The stream is registered as a compute stream of its device (sync.h) for as long as the
//   CudaOps lives, so NCCL operations are ordered after the compute queued before them.
// - The cuBLAS handle and the staging buffer are taken from process-wide pools and given back,
//   never destroyed (cublasDestroy and cudaFreeHost synchronise the device).
#ifndef PP_KERNELS_CUDA_CUDA_OPS_H_
#define PP_KERNELS_CUDA_CUDA_OPS_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>

#include "absl/time/time.h"
#include "kernels/ops.h"

namespace pp::kernels::cuda {

// Bytes of the page-locked buffer each CudaOps stages host copies through.
inline constexpr size_t kStagingBytes = size_t{8} << 20;
// How long the host waits for the compute stream before it gives up (and aborts): far beyond any
// step this service runs, so only a hung device reaches it.
inline constexpr absl::Duration kComputeWaitTimeout = absl::Minutes(10);

// The parts of a CudaOps, made on `device` by cuda_setup.cc; the CudaOps owns them.
struct CudaOpsParts {
  int device = 0;
  cudaStream_t stream = nullptr;  // non-blocking, registered as a compute stream
  cublasHandle_t blas = nullptr;  // bound to `stream`, from the pool (ReturnBlas)
  cudaEvent_t done = nullptr;     // re-recorded by every host wait
  void* staging = nullptr;        // kStagingBytes page-locked (ReturnPinned)
  bool bf16 = false;              // train.precision bf16: the three Matmul ops on bf16 operands
};

std::unique_ptr<Ops> NewCudaOps(const CudaOpsParts& parts);

// A cuBLAS handle of the current device `device`, reused when one was given back.
cublasStatus_t TakeBlas(int device, cublasHandle_t* blas);
void ReturnBlas(int device, cublasHandle_t blas);

}  // namespace pp::kernels::cuda

#endif  // PP_KERNELS_CUDA_CUDA_OPS_H_
