// `ppctl plan --spec` of a spec that packs variable-length microbatches
// (train.tokens_per_microbatch; common/packing.h): the lengths of the step's microbatches, read
// from the data on this machine, become the simulator's per-microbatch costs
// (coordinator/plan/packed.h), so the bubble figures reflect the real lengths. ppcoord does not
// read the data to plan and keeps uniform costs (docs/planner.md "Packed microbatches").
//
// Threading: pure functions over files read once.
#ifndef PP_CLIENT_PLAN_PACKED_H_
#define PP_CLIENT_PLAN_PACKED_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/plan/plan.h"
#include "pp/v1/coordinator.pb.h"
#include "pp/v1/job.pb.h"

namespace pp::client {

// The tokens of the first `count` microbatches of step 1 in global order (data replica r's
// microbatch j is r x M + j), each 1..tokens_per_microbatch: training sequences
// DataPositionAtStep(0, R x M, 1) + j, as TrainData::RowTokens gives them. REQUIRES a validated
// spec that packs. Errors: those of opening the data (worker/data/data.h TrainData::Open).
absl::StatusOr<std::vector<int64_t>> FirstStepTokens(const pp::v1::JobSpec& spec, int64_t count);

// "microbatches of step 1: 97 128 ... tokens (budget 128, mean 101.3, padding to 128 would waste
// 20.9%)". REQUIRES budget >= 1.
std::string LengthsLine(const std::vector<int64_t>& tokens, int64_t budget);

// Which data replica's M microbatches of `tokens` (R x M of them, FirstStepTokens) make the
// slowest simulated step under `costs` with their weights (plan::MicrobatchWeights): the one
// the step waits for at the gradient all-reduce; the lowest on a tie. Errors: those of
// plan::PlanSpecSchedule, InvalidArgument when `tokens` holds fewer than M.
absl::StatusOr<int> SlowestReplica(const pp::v1::JobSpec& spec, const std::vector<int64_t>& tokens,
                                   plan::CostModel costs);

// For a spec that packs: step 1's lengths into response->microbatch_tokens, the slowest
// replica's weights into costs->microbatch_weight, and the line to print (LengthsLine, with
// "; simulated: replica r, the slowest of R" when R > 1). For one that does not: "", and
// nothing changes. Errors: those above.
absl::StatusOr<std::string> WeighPackedMicrobatches(const pp::v1::JobSpec& spec,
                                                    plan::CostModel* costs,
                                                    pp::v1::PlanJobResponse* response);

}  // namespace pp::client

#endif  // PP_CLIENT_PLAN_PACKED_H_
