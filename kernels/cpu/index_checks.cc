#include "kernels/cpu/index_checks.h"

#include <cstdio>
#include <cstdlib>

namespace pp::kernels {

void CheckDocStarts(const int32_t* doc_start, int B, int T, const char* op) {
  if (doc_start == nullptr) return;
  for (int64_t b = 0; b < B; ++b) {
    const int32_t* s = doc_start + b * T;
    for (int t = 0; t < T; ++t) {
      if (s[t] == t || (t > 0 && s[t] == s[t - 1])) continue;
      std::fprintf(stderr, "pp::kernels cpu: %s: doc_start[%lld,%d] = %d breaks ops.h's rule\n", op,
                   static_cast<long long>(b), t, s[t]);
      std::abort();
    }
  }
}

void CheckPositions(const int32_t* positions, int B, int T, const char* op) {
  if (positions == nullptr) return;
  for (int64_t i = 0; i < int64_t{B} * T; ++i) {
    if (positions[i] >= 0 && positions[i] < T) continue;
    std::fprintf(stderr, "pp::kernels cpu: %s: positions[%lld,%lld] = %d is outside [0, %d)\n", op,
                 static_cast<long long>(i / T), static_cast<long long>(i % T), positions[i], T);
    std::abort();
  }
}

}  // namespace pp::kernels
