// The CPU backend's own loops (everything but the GEMMs), compiled three times from
// vec_kernels.inc: for AVX-512 (AVX512F/BW/DQ/VL with FMA), for AVX2 with FMA, and for the
// baseline ISA of the build. One table
// is chosen per process from the CPU's features (VecKernelsForThisCpu), so every Ops instance of
// a machine runs the same instructions and gets the same bits.
//
// Contract:
// - Each function works on a range (rows, columns, or one attention head) so the caller can give
//   disjoint ranges to threads; the result of a range never depends on how the rest is split.
// - Reductions run in a fixed order: 16 lane partial sums over ascending index, then the lanes
//   added in ascending lane order. No function allocates; scratch comes from the caller.
// - Shapes as in kernels/ops.h. Pure functions of their inputs; safe to call from any thread on
//   disjoint outputs.
#ifndef PP_KERNELS_CPU_VEC_KERNELS_H_
#define PP_KERNELS_CPU_VEC_KERNELS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace pp::kernels {

struct AdamWScalars {
  float lr, beta1, beta2, eps, weight_decay, grad_scale;
  float c1, c2;  // bias corrections 1 - beta^step
};

// One (batch, head) of causal attention. q points at the head's first query (qkv + b*T*3C +
// h*hs); rows are 3C apart, k and v rows are q + C and q + 2C. out points at the head's slice
// of (B,T,C) (rows C apart), stats at its (T,2) softmax row stats (ops.h). doc_start points at the
// batch row's (T) document starts (ops.h: query t sees keys doc_start[t]..t), or is null for plain
// causal attention (the same bits as all zeros).
struct HeadView {
  const float* q;
  int T, C, hs;
  const int32_t* doc_start = nullptr;
};

// Floats of attention scratch enough for every table this CPU runs, Bf16AttentionKernels too (the
// most of their attention_scratch_floats): for callers that try each table with one buffer.
size_t AttentionScratchFloats(int T, int hs);

struct VecKernels {
  const char* isa;  // "avx512", "avx2" or "generic"; "avx512bf16" and "amx" (bf16 attention)
  // rows [n0, n1) of (N,C)
  void (*layernorm_forward)(float* out, float* mean, float* rstd, const float* inp,
                            const float* weight, const float* bias, int64_t n0, int64_t n1,
                            int C);
  // res = a + b, then layernorm_forward of res
  void (*residual_layernorm_forward)(float* res, float* out, float* mean, float* rstd,
                                     const float* a, const float* b, const float* weight,
                                     const float* bias, int64_t n0, int64_t n1, int C);
  // dinp = dres (null: 0; may be dinp) + the input gradient
  void (*layernorm_backward_input)(float* dinp, const float* dres, const float* dout,
                                   const float* inp, const float* weight, const float* mean,
                                   const float* rstd, int64_t n0, int64_t n1, int C);
  // columns [c0, c1) of dweight, dbias (C) over all N rows, rows in ascending order
  void (*layernorm_backward_weight)(float* dweight, float* dbias, const float* dout,
                                    const float* inp, const float* mean, const float* rstd, int N,
                                    int C, int c0, int c1);
  // acc[c] += sum over rows n of x[n*ld + c], for c in [c0, c1), rows in ascending order
  void (*column_sums)(float* acc, const float* x, int N, int ld, int c0, int c1);
  void (*gelu_forward)(float* out, const float* inp, size_t n);
  // dinp = dout * gelu'(inp), overwritten
  void (*gelu_backward)(float* dinp, const float* inp, const float* dout, size_t n);
  void (*attention_forward)(float* out, float* stats, HeadView head, float* scratch);
  void (*attention_backward)(float* dq, const float* dout, const float* stats, HeadView head,
                             float* scratch);
  // floats of scratch one call of attention_forward or attention_backward needs for T and hs
  size_t (*attention_scratch_floats)(int T, int hs);
  // rows [n0, n1) of (N,V), the softmax over the first Vr columns (ops.h: the rest is padding)
  void (*cross_entropy_forward)(float* losses, float* probs, const float* logits,
                                const int32_t* targets, int64_t n0, int64_t n1, int V, int Vr);
  // AdamW on [0, n); with bf16 not null, bf16[i] = to_bf16 of the updated params[i] too
  void (*adamw)(float* params, const float* grads, float* m, float* v, size_t n,
                const AdamWScalars& a, uint16_t* bf16);
  void (*add)(float* acc, const float* x, size_t n);
  // sum of x[i]^2 in double: 8 lane partials (lane l sums i = l mod 8 in ascending i), then the
  // lanes in ascending order
  double (*sum_squares)(const float* x, size_t n);
  void (*residual)(float* out, const float* a, const float* b, size_t n);
  // bfloat16 of x[i], round to nearest, ties to even (NaN stays a quiet NaN, overflow gives
  // Inf): as an fp32 value (the low 16 bits zero) and as its 16 stored bits.
  void (*round_bf16)(float* out, const float* x, size_t n);
  void (*to_bf16)(uint16_t* out, const float* x, size_t n);
  // out[c * ldo + r] = x[r * ldx + c] for r < rows, c < cols: a copy, exact
  void (*transpose)(float* out, int64_t ldo, const float* x, int64_t ldx, int rows, int cols);
};

// Every table this CPU can run, by CPUID: generic first, then AVX2+FMA, then AVX-512; the last is
// the one VecKernelsForThisCpu chooses. The tests check each against the others.
std::vector<const VecKernels*> RunnableVecKernels();
const VecKernels& VecKernelsForThisCpu();

// The AVX-512 table with bf16 attention tiles (vec_attention_bf16.inc; every other kernel is the
// AVX-512 one), or null where the CPU lacks AVX512-BF16. Not in RunnableVecKernels: its attention
// is not fp32's.
const VecKernels* Bf16AttentionKernels();
// Bf16AttentionKernels' table with the scores and weighted rows of its attention on AMX tiles
// (vec_attention_amx.inc), or null where the CPU lacks AMX-BF16 or the kernel refuses this
// process the tiles' state. Not in RunnableVecKernels either.
const VecKernels* AmxAttentionKernels();
// Below this sequence length AmxAttentionKernels' attention is the fp32 code's: set where the
// tiles' conversions and transposes cost what the products saved (attention_bench on an Emerald
// Rapids, 8 queries a step: T = 128 and 192 no faster). With 16 queries a step they save about
// 10% at T = 128 and 20% at 192 (bench/NOTES.md); lowering it changes those jobs' bits.
inline constexpr int kAmxAttentionMinSeq = 256;

namespace vec_avx512 {
extern const VecKernels kTable;
}
namespace vec_avx512bf16 {
extern const VecKernels kTable;
}
namespace vec_amx {
extern const VecKernels kTable;
}
namespace vec_avx2 {
extern const VecKernels kTable;
}
namespace vec_generic {
extern const VecKernels kTable;
}

}  // namespace pp::kernels

#endif  // PP_KERNELS_CPU_VEC_KERNELS_H_
