#include <algorithm>

#include "kernels/cpu/vec_kernels.h"

namespace pp::kernels {

size_t AttentionScratchFloats(int T, int hs) {
  size_t most = 0;
  for (const VecKernels* k : RunnableVecKernels()) {
    most = std::max(most, k->attention_scratch_floats(T, hs));
  }
  if (const VecKernels* bf16 = Bf16AttentionKernels()) {
    most = std::max(most, bf16->attention_scratch_floats(T, hs));
  }
  return most;
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

const VecKernels* Bf16AttentionKernels() {
#if defined(__x86_64__) && defined(__GNUC__)
  if (RunnableVecKernels().back() == &vec_avx512::kTable && __builtin_cpu_supports("avx512bf16")) {
    return &vec_avx512bf16::kTable;
  }
#endif
  return nullptr;
}

const VecKernels& VecKernelsForThisCpu() {
  static const VecKernels* const best = RunnableVecKernels().back();
  return *best;
}

}  // namespace pp::kernels
