// vec_kernels.inc for x86-64 with AVX-512 (compiled with -mavx512f -mavx512bw -mavx512dq
// -mavx512vl -mavx2 -mfma, 512-bit vectors preferred; see kernels/CMakeLists.txt). Only called
// when the CPU has those features (VecKernelsForThisCpu).
#include "kernels/cpu/vec_kernels.h"

#define PP_VEC_NS vec_avx512
#define PP_VEC_ISA "avx512"
#define PP_VEC_BYTES 64
#include "kernels/cpu/vec_kernels.inc"
