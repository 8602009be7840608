// The CPU backend of Ops: oneDNN's f32 matmul (AVX-512 CPUs) or OpenBLAS sgemm for matmuls, each
// called single-threaded, own vector loops in a fixed order elsewhere (vec_kernels.h), all
// parallelised over its own pool (thread_pool.h). In bf16
// (common/precision.h) only the three Matmul ops change, on one of two paths:
// - fast: operands converted to bf16 (round to nearest even), oneDNN's bf16 x bf16 -> f32 matmul
//   (dnnl_gemm.h), where this CPU's oneDNN can create one (avx512_core_bf16 or AMX) and runs it
//   faster than fp32 (AMX tiles, or a CPU not made by Intel: MakeCpuOps); on AMX the products
//   whose shapes fit run on the own tile kernel instead (amx_gemm.h, kAmxProductsEnv);
// - fallback: operands rounded to bf16 values held in fp32 scratch, then fp32's product
//   (oneDNN's f32 matmul or OpenBLAS sgemm, as fp32 picks). The numerics are those of bf16: a
//   product of two bf16 values is exact in fp32 and the sums are fp32, as on the fast path
//   (whose summation order is oneDNN's, so its bits may differ).
// On both, a weight is converted (or packed) once after each write, not before each product
// (weight_copies.h; ops.h says which ops may write a weight; cpu_products.h runs the products).
#ifndef PP_KERNELS_CPU_CPU_OPS_H_
#define PP_KERNELS_CPU_CPU_OPS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/precision.h"
#include "kernels/ops.h"

namespace pp::kernels {

// How the CPU backend runs the three Matmul ops.
enum class CpuMatmul {
  kSgemm,        // fp32: OpenBLAS sgemm
  kSgemmBf16,    // bf16 fallback: bf16-rounded operands, sgemm
  kDnnlF32,      // fp32 on oneDNN (the default where it is an AVX-512 kernel)
  kDnnlF32Bf16,  // bf16 fallback: bf16-rounded operands, oneDNN's f32 matmul
  kDnnlBf16,     // bf16 fast path
};

// Setting this environment variable to 1 makes fp32 take OpenBLAS even where oneDNN's f32 matmul
// is an AVX-512 kernel (for comparisons: bench/trainer).
inline constexpr char kForceFp32OpenBlasEnv[] = "PP_FP32_OPENBLAS";

// Setting this environment variable to 1 makes bf16 take the fallback even where oneDNN could
// run bf16 (documented in docs/jobs.md "Precision").
inline constexpr char kForceBf16FallbackEnv[] = "PP_BF16_FALLBACK";
// Setting this one to 1 makes bf16 take oneDNN's bf16 matmul wherever oneDNN can create it, also
// where the fallback is faster (Intel without AMX); PP_BF16_FALLBACK=1 wins over it.
inline constexpr char kForceBf16OneDnnEnv[] = "PP_BF16_ONEDNN";
// bf16 attention tiles (vec_attention_bf16.inc) go with oneDNN's bf16 products: on AMX wherever
// the CPU has it (AmxAttentionKernels), else on AVX512-BF16 where the CPU is not made by Intel;
// this variable at 1 takes AVX512-BF16's on any CPU that has it and lacks AMX, at 0 neither
// (MatmulPath ends in "; attention: bf16 tiles (AMX, from T = 256)" or "(AVX512-BF16)" where
// they are taken; below T = 256 the AMX table's attention is fp32's: vec_kernels.h).
inline constexpr char kBf16AttentionEnv[] = "PP_BF16_ATTENTION";
// On AMX, bf16's products whose B has n a multiple of 16 and k of 32 run on the own tile kernel
// (amx_gemm.h; MatmulPath then holds kAmxProductsPath); this variable at 0 leaves them all to
// oneDNN (for comparisons: bench/trainer/matmul_bench.cc).
inline constexpr char kAmxProductsEnv[] = "PP_BF16_AMX_PRODUCTS";
inline constexpr char kAmxProductsPath[] = "; own AMX tile products where n % 16 = 0, k % 32 = 0";

// threads: threads of the pool, the caller's included (one worker process per core wants 1, which
// starts no thread). Results are bitwise the same for every thread count. fp32 is kDnnlF32 where
// oneDNN's f32 matmul on this CPU is an AVX-512 kernel and PP_FP32_OPENBLAS is not 1, else
// kSgemm. bf16 is kDnnlBf16 where oneDNN can create it, on AMX tiles or a CPU not made by Intel
// (or with PP_BF16_ONEDNN=1), and PP_BF16_FALLBACK is not 1; else the fallback on fp32's product
// (kDnnlF32Bf16 or kSgemmBf16). Ops::MatmulPath says which, and for the fallback why.
std::unique_ptr<Ops> MakeCpuOps(int threads, common::Precision precision = common::Precision::kFp32);

// That path and no other: Unavailable when oneDNN cannot create it (its message says why).
absl::StatusOr<std::unique_ptr<Ops>> MakeCpuOpsWith(int threads, CpuMatmul matmul);

}  // namespace pp::kernels

#endif  // PP_KERNELS_CPU_CPU_OPS_H_
