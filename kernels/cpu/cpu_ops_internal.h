// Between the CPU backend (cpu_ops.cc: the ops) and its constructors (cpu_ops_make.cc: which
// matmul path this CPU takes, and why); nothing else includes it.
#ifndef PP_KERNELS_CPU_CPU_OPS_INTERNAL_H_
#define PP_KERNELS_CPU_CPU_OPS_INTERNAL_H_

#include <memory>
#include <string>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/dnnl_gemm.h"
#include "kernels/cpu/vec_kernels.h"

namespace pp::kernels {

// The backend on `matmul`, its MatmulPath `path`, attention from the table `attention` (null:
// this CPU's VecKernelsForThisCpu), products that fit on AMX tiles when `amx`. REQUIRES:
// threads >= 1; dnnl set exactly for the kDnnl* paths, of their operand type (kBf16 for
// kDnnlBf16, else kF32); amx only for kDnnlBf16 where AmxAttentionKernels() is not null.
std::unique_ptr<Ops> NewCpuOps(int threads, CpuMatmul matmul, std::unique_ptr<DnnlGemm> dnnl,
                               bool amx, const VecKernels* attention, std::string path);

}  // namespace pp::kernels

#endif  // PP_KERNELS_CPU_CPU_OPS_INTERNAL_H_
