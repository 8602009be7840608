// vec_kernels.inc for the baseline ISA of the build: the fallback on CPUs without AVX-512.
#include "kernels/cpu/vec_kernels.h"

#define PP_VEC_NS vec_generic
#define PP_VEC_ISA "generic"
#define PP_VEC_BYTES 16
#include "kernels/cpu/vec_kernels.inc"
