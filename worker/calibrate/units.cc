// Calibration::TimeUnits: the three kinds of partition unit through compute::ModelCompute.
#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/spec_bounds.h"
#include "worker/calibrate/calibrate.h"
#include "worker/compute/model_compute.h"

namespace pp::calibrate {
namespace {

// Stage k of the timing plan holds exactly one unit of kind k.
constexpr int kKinds = 3;
constexpr const char* kKindNames[kKinds] = {"embedding", "block", "head"};
enum Cost { kForward, kBackward, kInput, kWeight, kCosts };

// Samples[kind][cost]: seconds of every timed call.
using Samples = std::vector<double>[kKinds][kCosts];

pp::v1::TaskPlan TimingPlan(const pp::v1::JobSpec& spec) {
  pp::v1::TaskPlan plan;
  *plan.mutable_spec() = spec;
  plan.set_world_size(1);
  const int head = spec.model().n_layers() + 1;
  for (int k = 0; k < kKinds; ++k) {
    pp::v1::StageLayers* stage = plan.add_stages();
    stage->set_stage(k);
    const int unit = k == 0 ? 0 : k == 1 ? 1 : head;
    stage->set_first_unit(unit);
    stage->set_last_unit(unit);
    plan.add_stage_to_rank(0);
  }
  return plan;
}

// One microbatch through embedding -> block -> head and back, twice: full backwards, then split
// ones. A and G are (B,T,C) buffers between the units.
class UnitPass {
 public:
  UnitPass(Calibration& calibration, compute::ModelCompute& compute)
      : calibration_(calibration), compute_(compute) {
    for (float*& b : buffers_) b = compute_.AllocBuffer(compute_.InputSize(1));
  }
  ~UnitPass() {
    for (float* b : buffers_) compute_.FreeBuffer(b);
  }

  // Adds each call's seconds to `samples` (null: a warm-up).
  absl::Status Run(Samples* samples) {
    float *a0 = buffers_[0], *a1 = buffers_[1], *g1 = buffers_[2], *g0 = buffers_[3];
    if (absl::Status s = compute_.BeginStep(0); !s.ok()) return s;
    for (bool split : {false, true}) {
      const auto forward = [&](int k, const float* in, float* out) {
        return Time(samples, k, kForward, [&] { return compute_.Forward(k, 0, in, out).status(); });
      };
      absl::Status s = forward(0, nullptr, a0);
      if (s.ok()) s = forward(1, a0, a1);
      if (s.ok()) s = forward(2, a1, nullptr);
      if (!s.ok()) return s;
      s = split ? Split(samples, g1, g0) : Full(samples, g1, g0);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

 private:
  // Head, block, embedding: grad_out of unit k is grad_in of unit k+1.
  absl::Status Full(Samples* samples, float* g1, float* g0) {
    const auto backward = [&](int k, const float* grad_out, float* grad_in) {
      return Time(samples, k, kBackward,
                  [&] { return compute_.Backward(k, 0, grad_out, grad_in); });
    };
    absl::Status s = backward(2, nullptr, g1);
    if (s.ok()) s = backward(1, g1, g0);
    if (s.ok()) s = backward(0, g0, nullptr);
    return s;
  }

  absl::Status Split(Samples* samples, float* g1, float* g0) {
    const auto split = [&](int k, const float* grad_out, float* grad_in) {
      absl::Status s = Time(samples, k, kInput, [&] {
        return compute_.BackwardInput(k, 0, grad_out, grad_in);
      });
      if (!s.ok()) return s;
      return Time(samples, k, kWeight, [&] { return compute_.BackwardWeight(k, 0); });
    };
    absl::Status s = split(2, nullptr, g1);
    if (s.ok()) s = split(1, g1, g0);
    if (s.ok()) s = split(0, g0, nullptr);
    return s;
  }

  // Times `call` as the executor does (slowdown included), after checking the deadline.
  template <typename Call>
  absl::Status Time(Samples* samples, int kind, Cost cost, Call call) {
    if (absl::Status s = calibration_.Check(); !s.ok()) return s;
    const auto start = std::chrono::steady_clock::now();
    if (absl::Status s = call(); !s.ok()) return s;
    const auto seconds = [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    if (calibration_.slowdown() != nullptr) calibration_.slowdown()->Stretch(seconds());
    if (samples != nullptr) (*samples)[kind][cost].push_back(seconds());
    return absl::OkStatus();
  }

  Calibration& calibration_;
  compute::ModelCompute& compute_;
  float* buffers_[4] = {};
};

// Parameters of one unit of each kind (common::UnitParameters): the optimizer's time is shared
// out by them.
double KindParams(const pp::v1::ModelSpec& m, int kind) {
  const std::vector<double> units = common::UnitParameters(m);
  return kind == 0 ? units.front() : kind == 1 ? units[1] : units.back();
}

// Passes at one microbatch size until `until` (at least one timed pass, deadline permitting). With `optimizer`, also the AdamW step of the three units, per parameter.
absl::Status TimeSize(Calibration& calibration, const pp::v1::JobSpec& spec,
                      const std::string& device, absl::Time until, Samples& samples,
                      std::vector<double>* optimizer) {
  absl::StatusOr<std::unique_ptr<compute::ModelCompute>> compute =
      compute::ModelCompute::Create(TimingPlan(spec), device);
  if (!compute.ok()) return compute.status();
  UnitPass pass(calibration, **compute);
  if (absl::Status s = pass.Run(nullptr); !s.ok()) return s;
  do {
    if (absl::Status s = pass.Run(&samples); !s.ok()) return s;
  } while (absl::Now() < until);
  double params = 0;
  for (int k = 0; k < kKinds; ++k) params += KindParams(spec.model(), k);
  for (int i = 0; optimizer != nullptr && i < 3 && calibration.Check().ok(); ++i) {
    const auto start = std::chrono::steady_clock::now();
    if (absl::Status s = (*compute)->OptimizerStep(1, 1.0f); !s.ok()) return s;
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (calibration.slowdown() != nullptr) calibration.slowdown()->Stretch(seconds);
    optimizer->push_back(seconds / params);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Calibration::TimeUnits(pp::v1::RankCalibration& out) {
  const absl::Time start = absl::Now();
  const absl::Time compute_end = start + (deadline_ - start) * kComputeShare;
  const int sizes = request_.sequences_size();
  absl::Status status;
  std::vector<std::string> missing;
  std::vector<double> per_param;  // the optimizer's seconds per parameter, timed at the first size
  for (int i = 0; i < sizes; ++i) {
    const int s = request_.sequences(i);
    Samples samples;
    // Each size gets an equal share of what is left of the compute share.
    const absl::Time until = absl::Now() + (compute_end - absl::Now()) / (sizes - i);
    if (status.ok()) {
      status = TimeSize(*this, TimingSpec(request_.spec(), s), env_.device, until, samples,
                        i == 0 ? &per_param : nullptr);
    }
    for (int k = 0; k < kKinds; ++k) {
      pp::v1::UnitCost* cost = out.add_units();
      cost->set_unit(kKindNames[k]);
      cost->set_sequences(s);
      if (!per_param.empty()) {
        cost->set_optimizer(Median(per_param) * KindParams(request_.spec().model(), k));
      }
      const auto set = [&](Cost c, void (pp::v1::UnitCost::*setter)(double)) {
        if (samples[k][c].empty()) {
          missing.push_back(absl::StrCat(kKindNames[k], " at ", s, " sequences"));
        } else {
          (cost->*setter)(Mean(samples[k][c]));
        }
      };
      set(kForward, &pp::v1::UnitCost::set_forward);
      set(kBackward, &pp::v1::UnitCost::set_backward);
      set(kInput, &pp::v1::UnitCost::set_backward_input);
      set(kWeight, &pp::v1::UnitCost::set_backward_weight);
    }
  }
  if (status.code() == absl::StatusCode::kDeadlineExceeded && missing.empty()) {
    return absl::OkStatus();
  }
  if (!status.ok() && status.code() != absl::StatusCode::kDeadlineExceeded) return status;
  if (missing.empty()) return absl::OkStatus();
  std::sort(missing.begin(), missing.end());
  missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
  return absl::DeadlineExceededError(
      absl::StrCat("calibration of rank ", request_.rank(), " ran out of its ",
                   request_.budget_seconds(), " s before timing ", absl::StrJoin(missing, ", ")));
}

}  // namespace pp::calibrate
