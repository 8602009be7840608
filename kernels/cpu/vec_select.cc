#include "kernels/cpu/vec_kernels.h"

namespace pp::kernels {

size_t AttentionScratchFloats(int T, int hs) {
  const size_t tp = (static_cast<size_t>(T) + 31) / 32 * 32 + 16;  // ScoreStride in the kernels
  const size_t h = static_cast<size_t>(hs);
  const size_t tile = 8;  // the largest kTile in vec_attention.inc
  // vt (hs, Tp), dS (T + tile - 1, Tp), acc (tile, hs), K, Q, dO (T, hs): see vec_attention.inc
  return h * tp + (static_cast<size_t>(T) + tile - 1) * tp + tile * h +
         3 * static_cast<size_t>(T) * h;
}

std::vector<const VecKernels*> RunnableVecKernels() {
  std::vector<const VecKernels*> tables = {&vec_generic::kTable};
#if defined(__x86_64__) && defined(__GNUC__)
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx2) tables.push_back(&vec_avx2::kTable);
  if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")) {
    tables.push_back(&vec_avx512::kTable);
  }
#endif
  return tables;
}

const VecKernels& VecKernelsForThisCpu() {
  static const VecKernels* const best = RunnableVecKernels().back();
  return *best;
}

}  // namespace pp::kernels
