// The CPU backend of Ops: OpenBLAS sgemm for matmuls, plain loops in a fixed order elsewhere.
#ifndef PP_KERNELS_CPU_CPU_OPS_H_
#define PP_KERNELS_CPU_CPU_OPS_H_

#include <memory>

#include "kernels/ops.h"

namespace pp::kernels {

// threads: OpenBLAS threads (one worker process per core wants 1).
std::unique_ptr<Ops> MakeCpuOps(int threads);

}  // namespace pp::kernels

#endif  // PP_KERNELS_CPU_CPU_OPS_H_
