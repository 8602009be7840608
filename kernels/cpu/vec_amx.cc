// vec_kernels.inc for x86-64 with AVX-512, AVX512-BF16 and AMX (vec_avx512bf16.cc's flags and
// -mamx-tile -mamx-bf16; see kernels/CMakeLists.txt): vec_avx512bf16.cc's kernels, but the bf16
// attention's scores and weighted rows run on AMX tiles (vec_attention_amx.inc). Only called
// when the CPU has AMX and the kernel lets this process use it, for bf16 jobs
// (AmxAttentionKernels).
#include "kernels/cpu/vec_kernels.h"

#define PP_VEC_NS vec_amx
#define PP_VEC_ISA "amx"
#define PP_VEC_BYTES 64
#include "kernels/cpu/vec_kernels.inc"
