// vec_kernels.inc for x86-64 with AVX2 and FMA (x86-64-v3 class: Haswell, Zen), compiled with
// -mavx2 -mfma (kernels/CMakeLists.txt). Only called when the CPU has both
// (VecKernelsForThisCpu).
#include "kernels/cpu/vec_kernels.h"

#define PP_VEC_NS vec_avx2
#define PP_VEC_ISA "avx2"
#define PP_VEC_BYTES 32
#include "kernels/cpu/vec_kernels.inc"
