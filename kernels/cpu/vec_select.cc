#include <algorithm>

#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "kernels/cpu/vec_kernels.h"

namespace pp::kernels {

size_t AttentionScratchFloats(int T, int hs) {
  size_t most = 0;
  for (const VecKernels* k : RunnableVecKernels()) {
    most = std::max(most, k->attention_scratch_floats(T, hs));
  }
  for (const VecKernels* bf16 : {Bf16AttentionKernels(), AmxAttentionKernels()}) {
    if (bf16 != nullptr) most = std::max(most, bf16->attention_scratch_floats(T, hs));
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

namespace {

// Whether the kernel lets this process use the AMX tiles' data (Linux 5.16+ asks each process to
// request it: arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA). The permission is the
// process's, for every thread; oneDNN requests the same for its AMX kernels.
bool AmxPermitted() {
#if defined(__x86_64__) && defined(__linux__)
  constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  static const bool permitted = syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  return permitted;
#else
  return false;
#endif
}

}  // namespace

const VecKernels* AmxAttentionKernels() {
#if defined(__x86_64__) && defined(__GNUC__)
  if (Bf16AttentionKernels() != nullptr && __builtin_cpu_supports("amx-tile") &&
      __builtin_cpu_supports("amx-bf16") && AmxPermitted()) {
    return &vec_amx::kTable;
  }
#endif
  return nullptr;
}

const VecKernels& VecKernelsForThisCpu() {
  static const VecKernels* const best = RunnableVecKernels().back();
  return *best;
}

}  // namespace pp::kernels
