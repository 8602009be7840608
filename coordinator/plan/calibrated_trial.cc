// RefitWithTrial (calibrated.h "Trial steps"): a running plan's fitted overheads into its
// calibration, with the per-action overhead that makes the plan's own simulated makespan its
// traced span.
#include <algorithm>

#include "coordinator/plan/calibrated.h"
#include "coordinator/plan/calibrated_hosts.h"

namespace pp::plan {
namespace {

// Halvings of [0, span]: 2^-20 of a span is well inside a step's noise.
constexpr int kBisections = 20;

}  // namespace

absl::StatusOr<Refit> RefitWithTrial(const pp::v1::JobSpec& resolved,
                                     pp::v1::Calibration calibration,
                                     const pp::v1::StepOverheads& overheads) {
  pp::v1::StepOverheads* trial = calibration.mutable_trial();
  *trial = overheads;
  // The traced delivery includes the transfer, which PredictStep adds from the link's bandwidth.
  const Link link = SlowestLink(calibration);
  if (link.bandwidth > 0) {
    const double bytes = BoundaryBytes(resolved.model(), resolved.train().microbatch_size());
    trial->set_latency_seconds(std::max(0.0, trial->latency_seconds() - bytes / link.bandwidth));
  }
  // The makespan grows with the overhead: bisect for the one that gives the traced span.
  const auto makespan_at = [&](double extra) -> absl::StatusOr<double> {
    trial->set_action_seconds(extra);
    absl::StatusOr<double> step = PredictStepSeconds(resolved, calibration);
    if (!step.ok()) return step.status();
    return *step - trial->tail_seconds();
  };
  double low = 0, high = overheads.span_seconds();
  absl::StatusOr<double> bare = makespan_at(0);
  if (!bare.ok()) return bare.status();
  if (*bare >= overheads.span_seconds()) high = 0;  // nothing to add
  for (int i = 0; i < kBisections && low < high; ++i) {
    const double mid = (low + high) / 2;
    absl::StatusOr<double> makespan = makespan_at(mid);
    if (!makespan.ok()) return makespan.status();
    (*makespan < overheads.span_seconds() ? low : high) = mid;
  }
  absl::StatusOr<double> makespan = makespan_at((low + high) / 2);
  if (!makespan.ok()) return makespan.status();
  return Refit{.calibration = calibration,
               .predicted_step_seconds = *makespan + trial->tail_seconds()};
}

}  // namespace pp::plan
