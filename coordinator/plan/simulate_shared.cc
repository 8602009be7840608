// Processor sharing (simulate.h, "Shared processors"): ranks on one host share its cores, so a
// compute runs slower while more ranks than cores compute at once. An event-driven fluid
// simulation: between two events every running action progresses at its host's current rate, and
// an event is an action ending or a message arriving at a rank waiting for it.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "coordinator/plan/simulate.h"

namespace pp::plan::internal {

absl::Status CheckSharing(const CostModel& costs, int D) {
  if (costs.rank_host.empty()) {
    if (costs.host_cores.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "host_cores has ", costs.host_cores.size(), " entries but rank_host is empty"));
  }
  if (static_cast<int64_t>(costs.rank_host.size()) != D) {
    return absl::InvalidArgumentError(absl::StrCat("rank_host has ", costs.rank_host.size(),
                                                   " entries but the schedule has ", D, " ranks"));
  }
  const int64_t hosts = static_cast<int64_t>(costs.host_cores.size());
  for (int64_t h = 0; h < hosts; ++h) {
    if (costs.host_cores[h] < 1) {
      return absl::InvalidArgumentError(absl::StrCat("host_cores[", h, "] is ",
                                                     costs.host_cores[h], ", want >= 1"));
    }
  }
  for (int r = 0; r < D; ++r) {
    const int h = costs.rank_host[r];
    if (h < 0 || h >= hosts) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank_host[", r, "] is ", h, ", not a host of host_cores (", hosts, " hosts)"));
    }
  }
  return absl::OkStatus();
}

bool Oversubscribed(const CostModel& costs) {
  std::vector<int> ranks(costs.host_cores.size(), 0);
  for (int h : costs.rank_host) {
    if (++ranks[h] > costs.host_cores[h]) return true;
  }
  return false;
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr size_t kNone = ~size_t{0};

// The fluid machine. Each rank is in one state: running an action on its host's cores (kCpu,
// `remaining` work left), waiting at a receive (kWaiting: until `until`, or for a message not
// sent yet, until = infinity), or done.
class SharedMachine {
 public:
  SharedMachine(const prog::Schedule& schedule, const Durations& durations, const CostModel& costs)
      : schedule_(schedule),
        durations_(durations),
        costs_(costs),
        S_(schedule.stages()),
        M_(schedule.microbatches),
        sent_(static_cast<size_t>(S_) * M_ * 2, -1),
        ranks_(schedule.pipeline),
        end_(schedule.pipeline),
        work_(schedule.pipeline, 0) {}

  // OK, or InvalidArgument for a deadlock or a step that does not end in finite time.
  absl::Status Run() {
    for (int r = 0; r < schedule_.pipeline; ++r) Proceed(r);
    Drain();
    for (;;) {
      const std::vector<double> rate = Rates();
      double next = kInf;
      for (int r = 0; r < schedule_.pipeline; ++r) next = std::min(next, EventTime(r, rate));
      if (!std::isfinite(next)) break;
      Advance(next, rate);
    }
    bool stuck = false, endless = false;
    for (const Rank& rank : ranks_) {
      stuck |= rank.state != State::kDone;
      endless |= rank.state == State::kCpu || (rank.state == State::kWaiting && rank.until < kInf);
    }
    if (endless) {
      return absl::InvalidArgumentError("costs too large: the simulated step does not end");
    }
    if (stuck) {
      return absl::InvalidArgumentError("schedule deadlocks; run the validator for details");
    }
    return absl::OkStatus();
  }

  std::vector<std::vector<double>>& end() { return end_; }
  const std::vector<double>& work() const { return work_; }

 private:
  enum class State { kCpu, kWaiting, kDone };
  struct Rank {
    State state = State::kCpu;
    size_t next = 0;          // the action it runs or waits at
    double remaining = 0;     // kCpu: work left, in cost units
    double until = kInf;      // kWaiting: when its message arrives (infinity: not sent yet)
    size_t message = kNone;   // kWaiting: the message it waits for
  };

  size_t Message(int stage, int microbatch, bool grad) const {
    return (static_cast<size_t>(stage) * M_ + microbatch) * 2 + grad;
  }

  // The current rate of every rank's host: min(1, cores / ranks running on its cores).
  std::vector<double> Rates() const {
    std::vector<int> running(costs_.host_cores.size(), 0);
    for (int r = 0; r < schedule_.pipeline; ++r) {
      if (ranks_[r].state == State::kCpu) ++running[costs_.rank_host[r]];
    }
    std::vector<double> rate(running.size(), 1.0);
    for (size_t h = 0; h < running.size(); ++h) {
      if (running[h] > costs_.host_cores[h]) {
        rate[h] = static_cast<double>(costs_.host_cores[h]) / running[h];
      }
    }
    return rate;
  }

  double EventTime(int r, const std::vector<double>& rate) const {
    const Rank& rank = ranks_[r];
    if (rank.state == State::kCpu) return now_ + rank.remaining / rate[costs_.rank_host[r]];
    return rank.state == State::kWaiting ? rank.until : kInf;
  }

  // Moves the clock to `t`, the earliest event: every action due by then ends (within a relative
  // 1e-12, so that rounding leaves no splinter of work for a later event), the others progress.
  void Advance(double t, const std::vector<double>& rate) {
    std::vector<int> due;
    for (int r = 0; r < schedule_.pipeline; ++r) {
      Rank& rank = ranks_[r];
      const double when = EventTime(r, rate);
      if (when <= t || when - t <= 1e-12 * t) {
        due.push_back(r);
      } else if (rank.state == State::kCpu) {
        rank.remaining -= rate[costs_.rank_host[r]] * (t - now_);
      }
    }
    now_ = t;
    for (int r : due) {
      if (ranks_[r].state == State::kCpu) EndCpuAction(r);
      Finish(r);
      Proceed(r);
    }
    Drain();
  }

  void Finish(int r) {
    end_[r].push_back(now_);
    ++ranks_[r].next;
  }

  // A SEND's message leaves when its overhead ends; a receiver waiting for it is woken.
  void EndCpuAction(int r) {
    const prog::Action& a = schedule_.programs[r][ranks_[r].next];
    if (!prog::IsSend(a.kind)) return;
    const bool grad = a.kind == prog::Kind::kSendGrad;
    const size_t m = Message(a.stage, a.microbatch, grad);
    if (sent_[m] < 0) sent_[m] = now_;
    const int receiver = schedule_.stage_to_rank[grad ? a.stage - 1 : a.stage + 1];
    // Only a receiver blocked on this very message: one waiting for an earlier copy of it (a
    // duplicate send) already knows when it arrives.
    const Rank& waiting = ranks_[receiver];
    if (waiting.state == State::kWaiting && waiting.message == m && waiting.until == kInf) {
      woken_.push_back(receiver);
    }
  }

  void Drain() {
    while (!woken_.empty()) {
      const int r = woken_.back();
      woken_.pop_back();
      if (ranks_[r].state == State::kWaiting) Proceed(r);
    }
  }

  // Runs rank r's program from its current action at `now_` until an action needs time: one
  // with work starts on the cores, a receive whose message has not arrived waits.
  void Proceed(int r) {
    const std::vector<prog::Action>& program = schedule_.programs[r];
    Rank& rank = ranks_[r];
    while (rank.next < program.size()) {
      const prog::Action& a = program[rank.next];
      if (prog::IsComm(a.kind) && !prog::IsSend(a.kind)) {
        const bool grad = a.kind == prog::Kind::kRecvGrad;
        rank.message = Message(grad ? a.stage + 1 : a.stage - 1, a.microbatch, grad);
        rank.until = sent_[rank.message] < 0
                         ? kInf
                         : sent_[rank.message] + TransferDuration(durations_, a.microbatch);
        if (rank.until > now_) {
          rank.state = State::kWaiting;
          return;
        }
      } else {
        const double work =
            prog::IsSend(a.kind) ? durations_.send : ComputeDuration(durations_, a, S_);
        if (!prog::IsSend(a.kind)) work_[r] += work;
        rank.state = State::kCpu;
        rank.remaining = work;
        if (work > 0) return;
        EndCpuAction(r);
      }
      Finish(r);
    }
    rank.state = State::kDone;
  }

  const prog::Schedule& schedule_;
  const Durations& durations_;
  const CostModel& costs_;
  const int S_, M_;
  std::vector<double> sent_;  // when each message left (-1: not yet)
  std::vector<Rank> ranks_;
  std::vector<std::vector<double>> end_;
  std::vector<double> work_;  // per rank: nominal compute
  std::vector<int> woken_;    // ranks whose message left at now_
  double now_ = 0;
};

}  // namespace

absl::StatusOr<Simulation> SimulateShared(const prog::Schedule& schedule, const CostModel& costs,
                                          const Durations& durations) {
  SharedMachine machine(schedule, durations, costs);
  if (absl::Status status = machine.Run(); !status.ok()) return status;
  Execution exec;
  exec.end = std::move(machine.end());
  for (const std::vector<double>& ends : exec.end) exec.ran.push_back(ends.size());
  absl::StatusOr<Simulation> sim = Summarize(schedule, costs, std::move(exec));
  if (!sim.ok()) return sim.status();
  // Busy is the nominal compute (simulate.h): a compute slowed by sharing counts the slowdown
  // as idle, so the bubble shows what sharing costs.
  for (size_t r = 0; r < sim->ranks.size(); ++r) {
    sim->ranks[r].busy = machine.work()[r];
    sim->ranks[r].idle = sim->makespan - sim->ranks[r].busy;
  }
  sim->bubble_fraction = IdleFraction(machine.work(), sim->makespan);
  return sim;
}

absl::StatusOr<Simulation> Conclude(const prog::Schedule& schedule, const CostModel& costs,
                                    const Durations& durations, Execution exec) {
  if (absl::Status status = CheckSharing(costs, schedule.pipeline); !status.ok()) return status;
  if (Oversubscribed(costs)) return SimulateShared(schedule, costs, durations);
  return Summarize(schedule, costs, std::move(exec));
}

}  // namespace pp::plan::internal
