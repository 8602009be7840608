// Cost fitting: a measured step's compute times as the simulator's cost model (plan.h).
#include <map>
#include <utility>

#include "absl/status/status.h"
#include "coordinator/plan/plan.h"

namespace pp::plan {
namespace {

// Per (stage, kind): the mean measured seconds of that kind's actions; 0 when there are none.
class MeanTimes {
 public:
  MeanTimes(const pp::v1::StepTrace& trace, int S) {
    for (const pp::v1::RankTrace& rank : trace.ranks()) {
      for (const pp::v1::TimedAction& t : rank.actions()) {
        const Action a = ActionFromProto(t.action());
        if (IsComm(a.kind) || a.stage < 0 || a.stage >= S) continue;
        auto& [seconds, count] = sums_[{a.stage, a.kind}];
        seconds += t.end() - t.start();
        ++count;
      }
    }
  }
  double Mean(int stage, Kind kind) const {
    auto it = sums_.find({stage, kind});
    return it == sums_.end() ? 0.0 : it->second.first / it->second.second;
  }

 private:
  std::map<std::pair<int, Kind>, std::pair<double, int>> sums_;  // total seconds, count
};

}  // namespace

absl::StatusOr<CostModel> CostsFromTrace(const Schedule& schedule,
                                         const pp::v1::StepTrace& trace) {
  const int S = static_cast<int>(schedule.stage_to_rank.size());
  const MeanTimes times(trace, S);
  std::vector<double> forward(S), backward(S);
  double f = 0, b = 0, i = 0, w = 0;
  for (int s = 0; s < S; ++s) {
    forward[s] = times.Mean(s, Kind::kForward);
    const double input = times.Mean(s, Kind::kBackwardInput);
    const double weight = times.Mean(s, Kind::kBackwardWeight);
    backward[s] = times.Mean(s, Kind::kBackward) + input + weight;
    f += forward[s] / S;
    b += backward[s] / S;
    i += input / S;
    w += weight / S;
  }
  if (f <= 0 || b <= 0) return absl::NotFoundError("the trace has no forward or backward times");
  CostModel costs;
  costs.forward = f;
  costs.backward = b;
  costs.backward_input = i;
  costs.backward_weight = w;
  for (int s = 0; s < S; ++s) costs.stage_scale.push_back((forward[s] + backward[s]) / (f + b));
  return costs;
}

absl::StatusOr<double> BubbleWithMeasuredCosts(const pp::v1::Schedule& schedule,
                                               const pp::v1::StepTrace& trace) {
  absl::StatusOr<Schedule> plain = ScheduleFromProto(schedule);
  if (!plain.ok()) return plain.status();
  absl::StatusOr<CostModel> costs = CostsFromTrace(*plain, trace);
  if (!costs.ok()) return costs.status();
  absl::StatusOr<Simulation> simulation = Simulate(*plain, *costs);
  if (!simulation.ok()) return simulation.status();
  return simulation->bubble_fraction;
}

}  // namespace pp::plan
