// Activation recomputation modes (parallel.recompute), named once for the worker's model
// (worker/model/stage_impl.h does them), the planner's memory and cost model
// (coordinator/plan/recompute.h) and the job-spec validation. Thread-safe, no state.
//
//   none       keep every activation the backward reads
//   full       a stage keeps its inputs only (tokens or input activation, targets) after a forward
//              and runs the forward again just before the input-gradient
//   selective  each block's attention state is dropped after the attention and recomputed from
//              qkv before its backward (Korthikanti et al. 2022, "Reducing Activation
//              Recomputation in Large Transformer Models", sec. 4.2). Since the attention keeps
//              only its softmax row stats (B,NH,T,2; kernels/ops.h), not the (B,NH,T,T)
//              probabilities, this saves little: the T^2 memory is gone in every mode.
//   auto       not a mode: ppcoord picks the first of none, selective, full whose memory estimate
//              fits the workers and puts that name in the job's spec
#ifndef PP_COMMON_RECOMPUTE_H_
#define PP_COMMON_RECOMPUTE_H_

#include <string>

#include "absl/status/statusor.h"

namespace pp::common {

enum class Recompute { kNone, kFull, kSelective };

// "" (the default) and "none", "full", "selective"; InvalidArgument otherwise, "auto" included
// (it must be resolved before anything runs).
absl::StatusOr<Recompute> RecomputeFromName(const std::string& name);
const char* RecomputeName(Recompute mode);

}  // namespace pp::common

#endif  // PP_COMMON_RECOMPUTE_H_
