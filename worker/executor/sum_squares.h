// The per-tensor gradient sums of squares that ranks all-gather for the canonical clipping norm,
// and their bytes on the wire: (name length u32, name, sum f64) repeated, host byte order (every
// rank of a job runs the same build).
#ifndef PP_WORKER_EXECUTOR_SUM_SQUARES_H_
#define PP_WORKER_EXECUTOR_SUM_SQUARES_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace pp::executor {

struct TensorSumSq {
  std::string name;  // global tensor name
  double sum_sq = 0;
};

std::string EncodeSumSquares(const std::vector<TensorSumSq>& sums);
// Appends the sums in `bytes` to `out`; DataLoss naming `from_rank` when they are malformed.
absl::Status DecodeSumSquares(const std::string& bytes, int from_rank,
                              std::vector<TensorSumSq>& out);

}  // namespace pp::executor

#endif  // PP_WORKER_EXECUTOR_SUM_SQUARES_H_
