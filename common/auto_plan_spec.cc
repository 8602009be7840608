#include "common/auto_plan_spec.h"

#include <cstdint>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/job_spec.h"
#include "common/spec_field.h"

namespace pp::common {
namespace {

using spec::Field;

// Every bound in [low, high]; NaN is refused too.
absl::Status CheckBounds(const pp::v1::ParallelSpec& parallel) {
  const pp::v1::AutoPlanSpec& bounds = parallel.auto_plan();
  for (auto [field, value, low, high] :
       {std::tuple<const char*, double, double, double>{"parallel.chunks", parallel.chunks(), 0,
                                                        kMaxAutoChunks},
        {"parallel.auto_plan.max_chunks", bounds.max_chunks(), 1, kMaxAutoChunks},
        {"parallel.auto_plan.max_microbatches", bounds.max_microbatches(), 1,
         kMaxAutoMicrobatches},
        {"parallel.auto_plan.calibration_seconds", bounds.calibration_seconds(), 0.1, 600},
        {"parallel.auto_plan.drift_threshold", bounds.drift_threshold(), 0.01, 100},
        {"parallel.auto_plan.drift_steps", bounds.drift_steps(), 1, 1e6},
        {"parallel.auto_plan.max_replans", bounds.max_replans(), -1, 100},
        {"parallel.auto_plan.trial_steps", bounds.trial_steps(), -1, 100},
        {"parallel.auto_plan.trial_gain", bounds.trial_gain(), 0, 10}}) {
    if (!(value >= low && value <= high)) {
      return Field(field, absl::StrCat("must be in [", low, ", ", high, "], got ", value));
    }
  }
  return absl::OkStatus();
}

}  // namespace

void ApplyAutoPlanDefaults(pp::v1::AutoPlanSpec* bounds) {
  if (bounds->max_chunks() == 0) bounds->set_max_chunks(4);
  if (bounds->max_microbatches() == 0) bounds->set_max_microbatches(64);
  if (bounds->calibration_seconds() == 0) bounds->set_calibration_seconds(10);
  if (bounds->drift_threshold() == 0) bounds->set_drift_threshold(0.25);
  if (bounds->drift_steps() == 0) bounds->set_drift_steps(5);
  if (bounds->max_replans() == 0) bounds->set_max_replans(1);
  if (bounds->trial_steps() == 0) bounds->set_trial_steps(3);
  if (bounds->trial_gain() == 0) bounds->set_trial_gain(0.1);
}

absl::Status ValidateAutoParallel(const pp::v1::JobSpec& spec) {
  const pp::v1::ParallelSpec& parallel = spec.parallel();
  if (parallel.pipeline() < 1) {
    return Field("parallel.pipeline", absl::StrCat("must be >= 1, got ", parallel.pipeline()));
  }
  if (parallel.tensor() != 1 || parallel.data() != 1) {
    return Field("parallel.schedule", "\"auto\" plans pipeline parallelism only: set "
                                      "parallel.tensor and parallel.data to 1");
  }
  if (CarriesSchedule(parallel)) {
    return Field(CarriedScheduleField(parallel), "not allowed with parallel.schedule \"auto\"");
  }
  if (!parallel.partition().empty() || !parallel.stage_layers().empty()) {
    return Field("parallel.partition",
                 "must be empty with parallel.schedule \"auto\": the partition is chosen");
  }
  if (parallel.recompute() != "none" && parallel.recompute() != "auto") {
    return Field("parallel.recompute",
                 "with parallel.schedule \"auto\" only none or auto (the search adds it)");
  }
  if (absl::Status s = CheckBounds(parallel); !s.ok()) return s;
  const int64_t units = int64_t{spec.model().n_layers()} + 2;
  if (units < parallel.pipeline()) {
    return Field("parallel.pipeline",
                 absl::StrCat("pipeline ", parallel.pipeline(), " stages but the model has only ",
                              units, " partition units (model.n_layers + 2)"));
  }
  return absl::OkStatus();
}

}  // namespace pp::common
