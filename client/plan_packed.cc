#include "client/plan_packed.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/packing.h"
#include "common/step_math.h"
#include "worker/data/data.h"

namespace pp::client {

absl::StatusOr<std::vector<int64_t>> FirstStepTokens(const pp::v1::JobSpec& spec, int64_t count) {
  absl::StatusOr<data::TrainData> data = data::TrainData::Open(spec);
  if (!data.ok()) return data.status();
  // Step 1 is step index 0: the sequences consumed before it.
  const int64_t first =
      common::DataPositionAtStep(0, common::GlobalMicrobatches(spec), /*microbatch_size=*/1);
  std::vector<int64_t> tokens;
  tokens.reserve(count);
  for (int64_t j = 0; j < count; ++j) tokens.push_back(data->RowTokens(first + j));
  return tokens;
}

std::string LengthsLine(const std::vector<int64_t>& tokens, int64_t budget) {
  double sum = 0;
  for (int64_t n : tokens) sum += static_cast<double>(n);
  const double mean = tokens.empty() ? 0 : sum / static_cast<double>(tokens.size());
  return absl::StrCat(
      "microbatches of step 1: ", absl::StrJoin(tokens, " "), " tokens",
      absl::StrFormat(" (budget %d, mean %.1f, padding to %d would waste %.1f%%)", budget, mean,
                      budget, 100 * plan::PaddingWaste(tokens, budget)));
}

absl::StatusOr<int> SlowestReplica(const pp::v1::JobSpec& spec, const std::vector<int64_t>& tokens,
                                   plan::CostModel costs) {
  const int M = spec.train().microbatches();
  const std::vector<double> weights =
      plan::MicrobatchWeights(tokens, spec.train().tokens_per_microbatch());
  int slowest = -1;
  double makespan = 0;
  for (int r = 0; int64_t{r + 1} * M <= static_cast<int64_t>(weights.size()); ++r) {
    costs.microbatch_weight.assign(weights.begin() + int64_t{r} * M,
                                   weights.begin() + int64_t{r + 1} * M);
    absl::StatusOr<plan::Planned> planned = plan::PlanSpecSchedule(spec.parallel(), M, costs);
    if (!planned.ok()) return planned.status();
    if (slowest < 0 || planned->simulation.makespan > makespan) {
      slowest = r, makespan = planned->simulation.makespan;
    }
  }
  if (slowest < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("no replica's ", M, " microbatches among ", tokens.size(), " lengths"));
  }
  return slowest;
}

absl::StatusOr<std::string> WeighPackedMicrobatches(const pp::v1::JobSpec& spec,
                                                    plan::CostModel* costs,
                                                    pp::v1::PlanJobResponse* response) {
  if (!common::PacksMicrobatches(spec)) return "";
  const int64_t replicas = std::max(1, spec.parallel().data());
  absl::StatusOr<std::vector<int64_t>> tokens =
      FirstStepTokens(spec, common::GlobalMicrobatches(spec));
  if (!tokens.ok()) return tokens.status();
  absl::StatusOr<int> replica = SlowestReplica(spec, *tokens, *costs);
  if (!replica.ok()) return replica.status();
  const int M = spec.train().microbatches();
  const int64_t budget = spec.train().tokens_per_microbatch();
  const std::vector<int64_t> mine(tokens->begin() + int64_t{*replica} * M,
                                  tokens->begin() + int64_t{*replica + 1} * M);
  costs->microbatch_weight = plan::MicrobatchWeights(mine, budget);
  response->mutable_microbatch_tokens()->Assign(tokens->begin(), tokens->end());
  std::string line = LengthsLine(*tokens, budget);
  if (replicas > 1) {
    absl::StrAppend(&line, "; simulated: replica ", *replica, ", the slowest of ", replicas);
  }
  return line;
}

}  // namespace pp::client
