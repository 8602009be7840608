// PartitionUnits (plan.h): layers of the model, plus embedding and head, into contiguous stages.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/spec_bounds.h"
#include "coordinator/plan/plan.h"

namespace pp::plan {
namespace {

// Contiguous split of `weights` into S non-empty parts minimising the heaviest part: the linear
// partition problem, solved exactly by dynamic programming over (parts, prefix length).
std::vector<int> MinMaxPartition(const std::vector<double>& weights, int S) {
  const int U = static_cast<int>(weights.size());
  std::vector<double> prefix(U + 1, 0);
  for (int i = 0; i < U; ++i) prefix[i + 1] = prefix[i] + weights[i];
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // best[k][i]: heaviest part when the first i units form k parts; cut[k][i]: where part k starts.
  std::vector<std::vector<double>> best(S + 1, std::vector<double>(U + 1, kInf));
  std::vector<std::vector<int>> cut(S + 1, std::vector<int>(U + 1, 0));
  best[0][0] = 0;
  for (int k = 1; k <= S; ++k) {
    for (int i = k; i <= U - (S - k); ++i) {
      for (int j = k - 1; j < i; ++j) {
        const double cost = std::max(best[k - 1][j], prefix[i] - prefix[j]);
        if (cost < best[k][i]) {
          best[k][i] = cost;
          cut[k][i] = j;
        }
      }
    }
  }
  std::vector<int> sizes(S);
  for (int k = S, i = U; k > 0; --k) {
    sizes[k - 1] = i - cut[k][i];
    i = cut[k][i];
  }
  return sizes;
}

// `units` names the U units for messages.
absl::StatusOr<std::vector<int>> ByCost(const std::vector<double>& unit_costs, int S, int U,
                                        const std::string& units) {
  if (static_cast<int>(unit_costs.size()) != U) {
    return absl::InvalidArgumentError(absl::StrCat(
        "partition by cost needs one cost per unit: ", unit_costs.size(), " given for ", units));
  }
  for (size_t i = 0; i < unit_costs.size(); ++i) {
    if (!std::isfinite(unit_costs[i]) || unit_costs[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("unit cost ", i, " must be finite and >= 0, got ", unit_costs[i]));
    }
  }
  return MinMaxPartition(unit_costs, S);
}

absl::StatusOr<std::vector<int>> Explicit(const std::vector<int>& explicit_units, int S, int U,
                                          const std::string& units) {
  if (static_cast<int>(explicit_units.size()) != S) {
    return absl::InvalidArgumentError(
        absl::StrCat("explicit partition lists ", explicit_units.size(), " stages, want S=", S));
  }
  for (int s = 0; s < S; ++s) {
    if (explicit_units[s] < 1) {
      return absl::InvalidArgumentError(absl::StrCat("explicit partition leaves stage ", s,
                                                     " empty (", explicit_units[s], " units)"));
    }
  }
  const long sum = std::accumulate(explicit_units.begin(), explicit_units.end(), 0L);
  if (sum != U) {
    return absl::InvalidArgumentError(
        absl::StrCat("explicit partition covers ", sum, " units but the model has ", units));
  }
  return explicit_units;
}

}  // namespace

absl::StatusOr<std::vector<int>> PartitionUnits(const pp::v1::ModelSpec& model, int S,
                                                const std::string& method,
                                                const std::vector<int>& explicit_units,
                                                const std::vector<double>& unit_costs) {
  if (model.n_layers() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.n_layers must be >= 1, got ", model.n_layers()));
  }
  if (S < 1) return absl::InvalidArgumentError(absl::StrCat("stages S=", S, " < 1"));
  const int U = model.n_layers() + 2;
  const std::string units =
      absl::StrCat(U, " partition units (", model.n_layers(), " layers + embedding + head)");
  if (S > U) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot split ", units, " into ", S, " stages: a stage would be empty"));
  }
  if (method.empty() || method == "uniform") {
    // As DeepSpeed's partition_uniform: sizes differ by at most one, the first stages larger.
    std::vector<int> sizes(S, U / S);
    for (int s = 0; s < U % S; ++s) ++sizes[s];
    return sizes;
  }
  if (method == "params") {
    if (model.d_model() < 1 || model.vocab_size() < 1 || model.seq_len() < 1) {
      return absl::InvalidArgumentError(
          "partition by params needs model.d_model, vocab_size and seq_len >= 1");
    }
    return MinMaxPartition(common::UnitParameters(model), S);
  }
  if (method == "cost") return ByCost(unit_costs, S, U, units);
  if (method == "explicit") return Explicit(explicit_units, S, U, units);
  return absl::InvalidArgumentError(absl::StrCat("unknown partition method '", method,
                                                 "' (known: uniform, params, cost, explicit)"));
}

}  // namespace pp::plan
