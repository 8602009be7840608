// Replicas' shares of a step's microbatches.
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/parallel/parallel.h"

namespace pp::parallel {

absl::StatusOr<MicrobatchRange> ReplicaMicrobatches(int dp_rank, int dp, int microbatches) {
  if (dp < 1 || dp_rank < 0 || dp_rank >= dp) {
    return absl::InvalidArgumentError(
        absl::StrCat("replica ", dp_rank, " is outside data parallelism ", dp));
  }
  if (microbatches < 1 || microbatches % dp != 0) {
    return absl::InvalidArgumentError(absl::StrCat("microbatches (", microbatches,
                                                   ") must be a positive multiple of data "
                                                   "parallelism (",
                                                   dp, ")"));
  }
  const int share = microbatches / dp;
  return MicrobatchRange{dp_rank * share, (dp_rank + 1) * share};
}


}  // namespace pp::parallel
