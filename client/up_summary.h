// `ppctl up`'s summary of a finished job: loss, tokens/s, the FLOP rate and its share of the
// measured peak (worker/trainer/flop_rate.h, measured here: the cluster is on this machine), the
// measured and simulated bubbles (the planner's, plan.h: the compiled schedule under uniform costs
// and under the per-stage costs measured in the last traced step), the measured timeline of that
// step, and its Chrome trace.
#ifndef PP_CLIENT_UP_SUMMARY_H_
#define PP_CLIENT_UP_SUMMARY_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "client/work_dir.h"
#include "pp/v1/coordinator.grpc.pb.h"

namespace pp::client {

// What `ppctl up` saw of the job while it ran.
struct UpRun {
  std::string job_id;
  pp::v1::JobSpec spec;
  std::string device = "cpu";  // every worker's --device
  std::optional<pp::v1::JobEvent> first_step;
  pp::v1::JobEvent last_event;  // EVENT_FINISHED
  double bubble_sum = 0;        // measured bubbles of steps 2..
  int bubble_steps = 0;
};

// Prints the summary on stdout and writes the Chrome trace to `chrome_trace` (empty:
// <dir>/<job>.trace.json, or $TMPDIR/ppctl-up-<job>.trace.json for a temporary dir). Asks ppcoord
// for the trace, the job and the plan (10 s each); Unavailable when the trace cannot be had. The
// learning rate, tokens and plan are those of the job's spec as ppcoord resolved it (train.steps
// of a spec of train.epochs alone), or without the job, of run.spec with the events' total steps.
absl::Status PrintSummary(pp::v1::Coordinator::Stub& stub, const UpRun& run, const WorkDir& dir,
                          const std::string& chrome_trace);

}  // namespace pp::client

#endif  // PP_CLIENT_UP_SUMMARY_H_
