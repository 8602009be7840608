// Cost fitting: a measured step's compute and communication times as the simulator's cost model
// (plan.h).
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/median.h"
#include "coordinator/plan/plan.h"
#include "coordinator/plan/timeline.h"
#include "program/message.h"
#include "program/proto.h"

namespace pp::plan {
namespace {

// Per (stage, kind): the mean measured seconds of that kind's actions; 0 when there are none.
class MeanTimes {
 public:
  MeanTimes(const pp::v1::StepTrace& trace, int S) {
    for (const pp::v1::RankTrace& rank : trace.ranks()) {
      for (const pp::v1::TimedAction& t : rank.actions()) {
        const std::optional<prog::Action> a = prog::ActionFromProto(t.action());
        if (!a || prog::IsComm(a->kind) || a->stage < 0 || a->stage >= S) continue;
        auto& [seconds, count] = sums_[{a->stage, a->kind}];
        seconds += t.end() - t.start();
        ++count;
      }
    }
  }
  double Mean(int stage, prog::Kind kind) const {
    auto it = sums_.find({stage, kind});
    return it == sums_.end() ? 0.0 : it->second.first / it->second.second;
  }

 private:
  std::map<std::pair<int, prog::Kind>, std::pair<double, int>> sums_;  // total seconds, count
};

// What messages cost as measured: the mean time a SEND action kept its rank (handing the
// message to the transport), and the mean delivery latency, from the end of a SEND to the end of
// its RECV, over the messages whose receiver was already waiting when the SEND ended (the others
// only show that the message was early). A message is named by the stage at the receiving end:
// SEND_ACTIVATION of s is RECV_ACTIVATION of s+1, SEND_GRAD of s is RECV_GRAD of s-1. Every
// rank's times count from its own step start, and ranks start a step together (after the
// previous step's collectives), so their clocks agree to within that collective's skew.
struct MessageCosts {
  double send_overhead = 0, latency = 0;
};

MessageCosts MessageCostsOf(const pp::v1::StepTrace& trace) {
  using Key = std::tuple<bool, int, int>;  // gradient, edge's lower stage, microbatch
  std::map<Key, const pp::v1::TimedAction*> sends, recvs;
  double send_seconds = 0;
  for (const pp::v1::RankTrace& rank : trace.ranks()) {
    for (const pp::v1::TimedAction& t : rank.actions()) {
      const std::optional<prog::Action> a = prog::ActionFromProto(t.action());
      if (!a || !prog::IsComm(a->kind)) continue;
      const prog::Message m = prog::MessageOf(*a);
      const Key key{m.gradient, m.lo, m.microbatch};
      if (prog::IsSend(a->kind)) {
        sends[key] = &t;
        send_seconds += t.end() - t.start();
      } else {
        recvs[key] = &t;
      }
    }
  }
  MessageCosts costs;
  if (sends.empty()) return costs;
  costs.send_overhead = send_seconds / static_cast<double>(sends.size());
  double waited = 0;
  int count = 0;
  for (const auto& [key, send] : sends) {
    auto it = recvs.find(key);
    if (it == recvs.end() || it->second->start() > send->end()) continue;
    waited += std::max(0.0, it->second->end() - send->end());
    ++count;
  }
  if (count > 0) costs.latency = waited / count;
  return costs;
}

}  // namespace

absl::StatusOr<CostModel> CostsFromTrace(const prog::Schedule& schedule,
                                         const pp::v1::StepTrace& trace) {
  const int S = static_cast<int>(schedule.stage_to_rank.size());
  const MeanTimes times(trace, S);
  CostModel costs;
  costs.forward = costs.backward = 0;  // sums from here (the struct's defaults are 1 and 2)
  for (int s = 0; s < S; ++s) {
    StageCosts c{times.Mean(s, prog::Kind::kForward), times.Mean(s, prog::Kind::kBackward),
                 times.Mean(s, prog::Kind::kBackwardInput),
                 times.Mean(s, prog::Kind::kBackwardWeight)};
    if (c.backward == 0) c.backward = c.backward_input + c.backward_weight;
    if (c.backward_input == 0 && c.backward_weight == 0) {
      c.backward_input = c.backward_weight = c.backward / 2;
    }
    if (c.forward <= 0 || c.backward <= 0) {
      return absl::NotFoundError(
          absl::StrCat("the trace has no forward or backward times of stage ", s));
    }
    costs.stage_costs.push_back(c);
    costs.forward += c.forward / S;
    costs.backward += c.backward / S;
    costs.backward_input += c.backward_input / S;
    costs.backward_weight += c.backward_weight / S;
  }
  for (const StageCosts& c : costs.stage_costs) {
    costs.stage_scale.push_back((c.forward + c.backward) / (costs.forward + costs.backward));
  }
  const MessageCosts messages = MessageCostsOf(trace);
  costs.send_overhead = messages.send_overhead;
  costs.comm_latency = messages.latency;
  return costs;
}

absl::StatusOr<TracedBubble> CompareTraceWithSimulation(const pp::v1::Schedule& schedule,
                                                        const pp::v1::StepTrace& trace) {
  absl::StatusOr<prog::Schedule> plain = ScheduleFromProto(schedule);
  if (!plain.ok()) return plain.status();
  absl::StatusOr<CostModel> costs = CostsFromTrace(*plain, trace);
  if (!costs.ok()) return costs.status();
  absl::StatusOr<Simulation> simulation = Simulate(*plain, *costs);
  if (!simulation.ok()) return simulation.status();
  std::vector<double> busy;
  double first = 0, last = 0;
  bool any = false;
  for (const pp::v1::RankTrace& rank : trace.ranks()) {
    double compute = 0;
    for (const pp::v1::TimedAction& t : rank.actions()) {
      const std::optional<prog::Action> a = prog::ActionFromProto(t.action());
      if (a && !prog::IsComm(a->kind)) compute += t.end() - t.start();
      first = any ? std::min(first, t.start()) : t.start();
      last = any ? std::max(last, t.end()) : t.end();
      any = true;
    }
    busy.push_back(compute);
  }
  return TracedBubble{IdleFraction(busy, last - first), simulation->bubble_fraction, *costs};
}

absl::StatusOr<pp::v1::StepOverheads> FitStepOverheads(
    const std::vector<pp::v1::StepTrace>& traces, const std::vector<double>& step_seconds) {
  if (traces.empty() || traces.size() != step_seconds.size()) {
    return absl::InvalidArgumentError(absl::StrCat("fitting overheads needs one measured time per "
                                                   "traced step: ", traces.size(), " traces, ",
                                                   step_seconds.size(), " times"));
  }
  std::vector<double> send, latency, tail, span;
  for (size_t i = 0; i < traces.size(); ++i) {
    double end = -1;
    for (const pp::v1::RankTrace& rank : traces[i].ranks()) {
      for (const pp::v1::TimedAction& t : rank.actions()) {
        if (!std::isfinite(t.start()) || !std::isfinite(t.end()) || t.start() < 0 ||
            t.end() < t.start()) {
          return absl::InvalidArgumentError(
              absl::StrCat("traced step ", traces[i].step(), " has a bad action time"));
        }
        end = std::max(end, t.end());
      }
    }
    if (end < 0 || !std::isfinite(step_seconds[i]) || step_seconds[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("traced step ", traces[i].step(), " has no action or a bad step time"));
    }
    const MessageCosts messages = MessageCostsOf(traces[i]);
    send.push_back(messages.send_overhead);
    latency.push_back(messages.latency);
    tail.push_back(std::max(0.0, step_seconds[i] - end));
    span.push_back(end);
  }
  pp::v1::StepOverheads overheads;
  overheads.set_send_seconds(common::Median(send));
  overheads.set_latency_seconds(common::Median(latency));
  overheads.set_tail_seconds(common::Median(tail));
  overheads.set_span_seconds(common::Median(span));
  overheads.set_steps(static_cast<int>(traces.size()));
  return overheads;
}

}  // namespace pp::plan
