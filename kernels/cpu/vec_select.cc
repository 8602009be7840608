#include "kernels/cpu/vec_kernels.h"

namespace pp::kernels {

size_t AttentionScratchFloats(int T, int hs) {
  const size_t tp = (static_cast<size_t>(T) + 31) / 32 * 32;  // as RoundUp32 in the kernels
  const size_t h = static_cast<size_t>(hs);
  // vt (hs, Tp), dS (T + 3, Tp), acc (4, hs), K, Q, dO (T, hs): see vec_attention.inc
  return h * tp + (static_cast<size_t>(T) + 3) * tp + 4 * h + 3 * static_cast<size_t>(T) * h;
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
