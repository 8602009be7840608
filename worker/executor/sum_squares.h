// What ranks all-gather after each step's program: per-tensor gradient sums of squares for the
// canonical clipping norm, and the step loss of a rank holding the last stage, so every rank sees
// the same values and takes the same decision on a non-finite step. Bytes on the wire:
// (name length u32, name, value f64) repeated, host byte order (every rank of a job runs the same
// build); an entry with an empty name carries the loss (no tensor has an empty name).
#ifndef PP_WORKER_EXECUTOR_SUM_SQUARES_H_
#define PP_WORKER_EXECUTOR_SUM_SQUARES_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/comm/transport.h"

namespace pp::executor {

struct TensorSumSq {
  std::string name;  // global tensor name
  double sum_sq = 0;
};

// One rank's part of the gather.
struct RankSums {
  std::optional<double> loss;     // the rank's step loss, when it holds the last stage
  std::vector<TensorSumSq> sums;  // the tensors it speaks for
};

std::string EncodeSumSquares(const RankSums& part);
// DataLoss naming `from_rank` when the bytes are malformed.
absl::StatusOr<RankSums> DecodeSumSquares(const std::string& bytes, int from_rank);
// Every rank's part (index = rank), the same on every rank.
absl::StatusOr<std::vector<RankSums>> AllGatherSums(comm::Transport& transport,
                                                    const RankSums& mine);

// A step's loss or global gradient norm that is not finite.
struct NonFinite {
  std::string what;  // "loss", "gradient of tensor 'NAME'" or "global gradient norm"
  int rank = -1;     // the rank that reported it; -1 when no single rank did
  double value = 0;  // nan, inf or -inf
};

// Over the gather (index = rank): the first non-finite loss in rank order, else the first
// non-finite tensor sum (rank order, then the rank's order), else the total when it overflows.
// The same on every rank, since they all hold the same gather.
std::optional<NonFinite> FindNonFinite(const std::vector<RankSums>& ranks);
// "step 3: non-finite loss nan on rank 1" (step 1-based), for errors and logs.
std::string DescribeNonFinite(int step, const NonFinite& bad);
// The error ending a run at its `bad_steps`-th non-finite step, bad_steps > max_bad_steps.
// OutOfRange: the coordinator fails the job for good, since a rerun from the last checkpoint
// would compute the same values again.
absl::Status TooManyBadSteps(int step, const NonFinite& bad, int bad_steps, int max_bad_steps);

}  // namespace pp::executor

#endif  // PP_WORKER_EXECUTOR_SUM_SQUARES_H_
