// Inputs the kernel tests share.
#ifndef PP_TESTS_KERNELS_KERNEL_TEST_UTIL_H_
#define PP_TESTS_KERNELS_KERNEL_TEST_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace pp::kernels {

// Uniform in [-scale, scale), from a fixed LCG so values do not depend on the standard library.
inline std::vector<float> Random(size_t n, uint64_t seed, float scale = 1.0f) {
  std::vector<float> v(n);
  uint64_t s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (auto& x : v) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    x = scale * (static_cast<float>((s >> 40) & 0xffffff) / 8388608.0f - 1.0f);
  }
  return v;
}

}  // namespace pp::kernels

#endif  // PP_TESTS_KERNELS_KERNEL_TEST_UTIL_H_
