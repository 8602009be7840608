// RefitWithTrial (calibrated.h "Trial steps"): a running plan's fitted overheads into its
// calibration, with the span scale that makes the plan's own simulated makespan its traced span.
#include <algorithm>

#include "coordinator/plan/calibrated.h"
#include "coordinator/plan/calibrated_hosts.h"

namespace pp::plan {

absl::StatusOr<Refit> RefitWithTrial(const pp::v1::JobSpec& resolved,
                                     pp::v1::Calibration calibration,
                                     const pp::v1::StepOverheads& overheads) {
  pp::v1::StepOverheads* trial = calibration.mutable_trial();
  *trial = overheads;
  trial->set_span_scale(1);
  // The traced delivery includes the transfer, which PredictStep adds from the link's bandwidth.
  const Link link = SlowestLink(calibration);
  if (link.bandwidth > 0) {
    const pp::v1::ModelSpec& m = resolved.model();
    const double bytes = 4.0 * resolved.train().microbatch_size() * m.seq_len() * m.d_model();
    trial->set_latency_seconds(std::max(0.0, trial->latency_seconds() - bytes / link.bandwidth));
  }
  absl::StatusOr<double> unscaled = PredictStepSeconds(resolved, calibration);
  if (!unscaled.ok()) return unscaled.status();
  const double makespan = *unscaled - trial->tail_seconds();
  const double scale = makespan > 0 ? trial->span_seconds() / makespan : 1.0;
  trial->set_span_scale(std::clamp(scale, kMinSpanScale, kMaxSpanScale));
  return Refit{.calibration = calibration,
               .predicted_step_seconds = trial->span_scale() * makespan + trial->tail_seconds()};
}

}  // namespace pp::plan
