// Row-major bf16 x bf16 -> fp32 matrix products on AMX tiles, for the CPU backend's bf16 fast path
// where the CPU has AMX (cpu_ops.h). Debian's oneDNN 2.6 ran a step's products at 0.65-0.85x the
// speed of PyTorch 2.15's oneDNN on the same core (DNNL_VERBOSE on both, shape (c)); this kernel,
// two by two tiles of (16, 16) fp32 sums over the whole sum length, ran them 1.2x oneDNN 2.6
// (bench/NOTES.md "2026-12-06, seventh session").
//
// Contract:
// - B is packed once into the tiles' layout (Pack*), then serves any number of products: a
//   weight's packing is kept from one product to the next (weight_copies.h).
// - Each element of C is its own sum over k, one TDPBF16PS step of 32 after another in ascending
//   order, started from zero, or from C's old value when accumulating, with the bias added
//   after: the same bits for any m, any row offset and any split of the rows over threads.
// - Fits(n, k): n a multiple of 16 and k of 32 (whole tiles along n and the sum); any m.
// - Threads: every function may run on several threads at once on disjoint outputs; Gemm loads
//   its thread's tile configuration on entry and releases the tiles on return.
// - REQUIRES for every function: the CPU has AMX-BF16 and the process may use the tiles
//   (AmxAttentionKernels() is not null: vec_kernels.h).
#ifndef PP_KERNELS_CPU_AMX_GEMM_H_
#define PP_KERNELS_CPU_AMX_GEMM_H_

#include <cstddef>
#include <cstdint>

namespace pp::kernels::amx {

inline bool Fits(int n, int k) { return n > 0 && k > 0 && n % 16 == 0 && k % 32 == 0; }
// Words (two bf16 each) of B (k, n) packed.
inline size_t PackedWords(int k, int n) { return size_t(k) / 2 * size_t(n); }

// Elements (i, j) of B (k, n), i in [i0, i1) and j in [c0, c1), packed into `out` (all of B,
// PackedWords(k, n) words), from fp32 values rounded to bf16 as vec_kernels.h's to_bf16 rounds
// them, or from bf16 bits. PackRows reads B's rows: element (i, j) at x[(i - i0) * ld + j - c0],
// i0 and i1 even. PackColumns reads B's columns (B = x^T, a weight (n, k) as the forward's B):
// element (i, j) at x[(j - c0) * ld + i - i0], i0 and i1 multiples of 32. c0 and c1 are
// multiples of 16 in both.
void PackRows(uint32_t* out, const float* x, int ld, int k, int i0, int i1, int c0, int c1);
void PackRows(uint32_t* out, const uint16_t* x, int ld, int k, int i0, int i1, int c0, int c1);
void PackColumns(uint32_t* out, const float* x, int ld, int k, int i0, int i1, int c0, int c1);
void PackColumns(uint32_t* out, const uint16_t* x, int ld, int k, int i0, int i1, int c0, int c1);

// Columns [c0, c1) (multiples of 16) of x (k, cols), rows ld apart, transposed into bf16 rows ldo
// apart, rounded as to_bf16 rounds: out[j * ldo + i] = x[i * ld + j] for i in [0, k), k a
// multiple of 32 (the weight gradient's A, dout^T).
void TransposeToBf16(uint16_t* out, int ldo, const float* x, int ld, int k, int c0, int c1);

// C (m, n) rows ldc apart = A (m, k) (bf16 bits, rows lda apart) times packed B, plus C when
// `accumulate`, plus bias (n) on every row when not null. REQUIRES: Fits(n, k), m >= 0.
void Gemm(float* c, int ldc, const uint16_t* a, int lda, const uint32_t* b, int m, int n, int k,
          bool accumulate, const float* bias);

}  // namespace pp::kernels::amx

#endif  // PP_KERNELS_CPU_AMX_GEMM_H_
