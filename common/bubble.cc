#include "common/bubble.h"

namespace pp::common {

double IdleFraction(const std::vector<double>& busy, double span) {
  if (busy.empty() || !(span > 0)) return 0;
  double total = 0;
  for (double b : busy) total += b;
  return 1 - total / (static_cast<double>(busy.size()) * span);
}

}  // namespace pp::common
