#include "common/step_math.h"

#include <algorithm>

namespace pp::common {

int64_t GlobalMicrobatches(const pp::v1::JobSpec& spec) {
  return int64_t{spec.train().microbatches()} * std::max(1, spec.parallel().data());
}

int64_t ReplicaTokensPerStep(const pp::v1::JobSpec& spec) {
  return static_cast<int64_t>(spec.train().microbatches()) * spec.train().microbatch_size() *
         spec.model().seq_len();
}

int64_t GlobalTokensPerStep(const pp::v1::JobSpec& spec) {
  return ReplicaTokensPerStep(spec) * std::max(1, spec.parallel().data());
}

int64_t DataPositionAtStep(int64_t step, int64_t microbatches, int64_t microbatch_size) {
  return step * microbatches * microbatch_size;
}

bool CheckpointDue(int done_steps, int total_steps, int every_steps) {
  return done_steps == total_steps || (every_steps > 0 && done_steps % every_steps == 0);
}

}  // namespace pp::common
