// Comm lowering: turns compute-only programs (generate.h) into programs a worker can run, by
// adding a SEND/RECV pair for every stage edge that crosses ranks (none where consecutive stages
// share a rank, as at the tip of a V).
//
// Placement: each SEND right after the compute that produces its tensor, each RECV right before
// the compute that consumes it. With asynchronous sends and blocking receives, a rank then only
// ever waits for data the compute order itself waits for, so the lowered programs deadlock exactly
// when the compute order does (the validator checks it). Messages are keyed by (kind, stage,
// microbatch), so a worker may post every receive early and wait at the RECV.
#ifndef PP_PROGRAM_LOWER_H_
#define PP_PROGRAM_LOWER_H_

#include <vector>

#include "absl/status/statusor.h"
#include "program/ir.h"

namespace pp::prog {

// InvalidArgument if `compute` already holds comm actions or names a stage out of range.
absl::StatusOr<Schedule> LowerComms(const Schedule& compute);

namespace internal {
// What LowerComms emits for one compute action `a` of `compute`: its receive, itself, its send.
// For callers that track where each lowered action came from (torch_csv.h). REQUIRES: `a` a
// compute action whose stage is in range.
void AppendLowered(const Schedule& compute, const Action& a, std::vector<Action>& out);
}  // namespace internal

}  // namespace pp::prog

#endif  // PP_PROGRAM_LOWER_H_
