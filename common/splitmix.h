// splitmix64's finaliser (Steele, Lea, Flood, "Fast splittable pseudorandom number generators",
// 2014): a bijective 64-bit mix, so SplitMix(key + i * kSplitMixGolden) is a counter-based
// stream. The model's initialisation and the sampler draw from it. Header-only, no state.
#ifndef PP_COMMON_SPLITMIX_H_
#define PP_COMMON_SPLITMIX_H_

#include <cstdint>

namespace pp::common {

inline uint64_t SplitMix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
inline constexpr uint64_t kSplitMixGolden = 0x9e3779b97f4a7c15ULL;

}  // namespace pp::common

#endif  // PP_COMMON_SPLITMIX_H_
