// Packed variable-length microbatches (train.tokens_per_microbatch; common/packing.h): what a
// step's microbatch lengths mean to the simulator. Pure functions.
#ifndef PP_COORDINATOR_PLAN_PACKED_H_
#define PP_COORDINATOR_PLAN_PACKED_H_

#include <cstdint>
#include <vector>

namespace pp::plan {

// The simulator's per-microbatch multipliers (CostModel.microbatch_weight) for microbatches of
// tokens[j] tokens each under a budget of `budget` tokens: w_j = tokens[j] / budget, so a full
// row costs what the cost model says of one microbatch. Linear in tokens because the matmuls
// dominate a microbatch's compute (24 C^2 per token per block and the head's 2 vocab C, UnitCosts
// in plan.h); attention's part grows with each document's length squared (common/packing.h
// SequenceSquares), but its documents are at most seq_len long, and it is a small share beside
// the matmuls at the widths a job is planned for. Message bytes are linear in tokens exactly.
// REQUIRES budget >= 1.
std::vector<double> MicrobatchWeights(const std::vector<int64_t>& tokens, int64_t budget);

// What padding every microbatch to `budget` tokens would waste: 1 - sum(tokens) / (n x budget),
// in [0, 1) when every entry is in [1, budget]; 0 for no microbatches. REQUIRES budget >= 1.
double PaddingWaste(const std::vector<int64_t>& tokens, int64_t budget);

}  // namespace pp::plan

#endif  // PP_COORDINATOR_PLAN_PACKED_H_
