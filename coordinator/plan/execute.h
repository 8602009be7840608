// Private to the planner: running the per-rank programs the way workers would (each rank in
// program order; sends asynchronous; a receive waits for its send).
//
// Every input of a compute or a send is produced on its own rank (an earlier compute or receive:
// program/rules.h); the validator checks that statically. Given that, a rank only ever waits at
// receives, and a local input is always ready by the time the rank reaches the action. Execute
// therefore tracks messages only. Which actions run, and whether the programs deadlock, depend on
// the programs alone, never on the durations: the validator runs it with zero durations (symbolic
// execution, to find deadlocks), the simulator with the cost model, and ValidateAndSimulate
// (compile.h) once for both.
#ifndef PP_COORDINATOR_PLAN_EXECUTE_H_
#define PP_COORDINATOR_PLAN_EXECUTE_H_

#include <cstddef>
#include <vector>

#include "absl/status/status.h"
#include "program/ir.h"
#include "program/rules.h"

namespace pp::plan::internal {

// k of Durations.compute for a compute kind (F 0, B 1, I 2, W 3); -1 for a comm.
int ComputeIndex(prog::Kind kind);

struct Durations {
  // Compute time of kind k (F, B, I, W) at stage s: compute[k * S + s].
  std::vector<double> compute;
  double transfer = 0;  // from a send to the matching receive: latency + bytes / bandwidth
  double send = 0;      // a SEND occupies its rank this long; the message leaves at its end
  // Per microbatch, the multiplier of its computes and message bytes (CostModel.
  // microbatch_weight); empty: all 1, and transfer is used as it is.
  std::vector<double> weight;
  double latency = 0, bytes_time = 0;  // transfer's two parts: latency + bytes_time = transfer
};

// What compute action `a` (F, B, I or W) of a schedule of S stages takes.
inline double ComputeDuration(const Durations& d, const prog::Action& a, int S) {
  const double base = d.compute[ComputeIndex(a.kind) * S + a.stage];
  return d.weight.empty() ? base : base * d.weight[a.microbatch];
}

// From a send of `microbatch`'s message to its receive. With weight 1 it is transfer bit for bit
// (latency + 1 x bytes_time), so all-1 weights change no result.
inline double TransferDuration(const Durations& d, int microbatch) {
  return d.weight.empty() ? d.transfer : d.latency + d.weight[microbatch] * d.bytes_time;
}

// All zero: for runs that only ask what ran.
Durations ZeroDurations(int stages);

struct Execution {
  std::vector<size_t> ran;  // per rank: how many actions of its program ran
  bool deadlocked = false;  // some rank stopped before its program's end
  // With record_times, per rank, per action that ran: when it ended. Each action starts when the
  // previous one on its rank ended (the first at 0); a RECV ends when its data has arrived, so its
  // span is time spent waiting.
  std::vector<std::vector<double>> end;
};

// Requires CheckIndices to pass; times are meaningful when the local-order check passes too.
Execution Execute(const prog::Schedule& schedule, const Durations& durations, bool record_times);

}  // namespace pp::plan::internal

#endif  // PP_COORDINATOR_PLAN_EXECUTE_H_
