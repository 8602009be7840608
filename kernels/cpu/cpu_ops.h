// The CPU backend of Ops: OpenBLAS sgemm (single-threaded) for matmuls, own vector loops in a
// fixed order elsewhere (vec_kernels.h), parallelised over its own pool (thread_pool.h).
#ifndef PP_KERNELS_CPU_CPU_OPS_H_
#define PP_KERNELS_CPU_CPU_OPS_H_

#include <memory>

#include "kernels/ops.h"

namespace pp::kernels {

// threads: threads of the pool, the caller's included (one worker process per core wants 1, which
// starts no thread). Results are bitwise the same for every thread count.
std::unique_ptr<Ops> MakeCpuOps(int threads);

}  // namespace pp::kernels

#endif  // PP_KERNELS_CPU_CPU_OPS_H_
