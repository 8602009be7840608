// Validator: proves a lowered schedule is runnable, or names the first rank and action that is
// not. Checks, in this order:
//   1. shape and indices: S = D*V stages, V per rank, every action on the rank holding its stage,
//      comm peers are the ranks holding the neighbouring stage (and never the rank itself);
//   2. walking rank 0's program, then rank 1's, ...: no action twice, never B next to I for the
//      same (stage, microbatch), and every compute and send after what it consumes on its own
//      rank (F after the activation's RECV or the previous stage's F, I/B after its F and the
//      gradient, W after its I);
//   3. each (stage, microbatch) has exactly one F and either one B or one I and one W (forward-only:
//      nothing but the F);
//   4. every send has its receive and every receive its send;
//   5. no deadlock, found by executing all programs symbolically (sends asynchronous, receives
//      blocking);
//   6. (run with 1-4) per ordered pair of ranks and kind of message (activation, gradient: the
//      worker's transport channels), the sender's SENDs and the receiver's RECVs name the same
//      messages in the same order, since NCCL matches by posting order alone.
#ifndef PP_COORDINATOR_PLAN_VALIDATE_H_
#define PP_COORDINATOR_PLAN_VALIDATE_H_

#include "absl/status/status.h"
#include "coordinator/plan/execute.h"
#include "program/ir.h"

namespace pp::plan {
namespace internal {

// The validator in two halves, for callers that execute the schedule anyway: checks 1 to 4 and 6,
// then check 5 on their execution of the schedule (under any durations, see execute.h). The planner
// validates through compile.h's ValidateAndSimulate, which runs both on the simulator's one
// execution. Errors are InvalidArgument "rank R, action I (KIND stage S microbatch M): why".
absl::Status CheckStatically(const prog::Schedule& schedule);
absl::Status CheckDeadlock(const prog::Schedule& schedule, const Execution& exec);

}  // namespace internal
}  // namespace pp::plan

#endif  // PP_COORDINATOR_PLAN_VALIDATE_H_
