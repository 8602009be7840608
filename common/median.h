// The median of a sample set, for figures that one slow sample must not decide (calibration's
// round trips and timings, ppctl up's traced steps).
#ifndef PP_COMMON_MEDIAN_H_
#define PP_COMMON_MEDIAN_H_

#include <algorithm>
#include <vector>

namespace pp::common {

// The median of `samples` (the mean of the middle two for an even count). REQUIRES non-empty.
inline double Median(std::vector<double> samples) {
  const size_t mid = samples.size() / 2;
  std::nth_element(samples.begin(), samples.begin() + mid, samples.end());
  if (samples.size() % 2 == 1) return samples[mid];
  const double upper = samples[mid];
  const double lower = *std::max_element(samples.begin(), samples.begin() + mid);
  return (lower + upper) / 2;
}

}  // namespace pp::common

#endif  // PP_COMMON_MEDIAN_H_
