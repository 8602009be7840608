// vec_kernels.inc for x86-64 with AVX-512 and AVX512-BF16 (vec_avx512.cc's flags and
// -mavx512bf16; see kernels/CMakeLists.txt): the same kernels as vec_avx512.cc but for attention,
// whose tile products run in bf16 (vec_attention_bf16.inc). Only called when the CPU has those
// features, for bf16 jobs (Bf16AttentionKernels).
#include "kernels/cpu/vec_kernels.h"

#define PP_VEC_NS vec_avx512bf16
#define PP_VEC_ISA "avx512bf16"
#define PP_VEC_BYTES 64
#include "kernels/cpu/vec_kernels.inc"
