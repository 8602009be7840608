#include "coordinator/plan/packed.h"

namespace pp::plan {

std::vector<double> MicrobatchWeights(const std::vector<int64_t>& tokens, int64_t budget) {
  std::vector<double> weights;
  weights.reserve(tokens.size());
  for (int64_t n : tokens) weights.push_back(static_cast<double>(n) / static_cast<double>(budget));
  return weights;
}

double PaddingWaste(const std::vector<int64_t>& tokens, int64_t budget) {
  if (tokens.empty()) return 0;
  double sum = 0;
  for (int64_t n : tokens) sum += static_cast<double>(n);
  return 1 - sum / (static_cast<double>(tokens.size()) * static_cast<double>(budget));
}

}  // namespace pp::plan
