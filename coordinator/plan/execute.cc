#include "coordinator/plan/execute.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pp::plan::internal {

int ComputeIndex(prog::Kind kind) {
  switch (kind) {
    case prog::Kind::kForward:
      return 0;
    case prog::Kind::kBackward:
      return 1;
    case prog::Kind::kBackwardInput:
      return 2;
    case prog::Kind::kBackwardWeight:
      return 3;
    default:
      return -1;
  }
}

Durations ZeroDurations(int stages) {
  Durations zero;
  zero.compute.assign(4 * static_cast<size_t>(stages), 0.0);
  return zero;
}

namespace {

// The symbolic machine of Execute: ranks run their programs until a receive blocks; a send
// wakes the rank waiting for it.
class Machine {
 public:
  Machine(const prog::Schedule& schedule, const Durations& durations, bool record_times)
      : schedule_(schedule),
        durations_(durations),
        record_times_(record_times),
        M_(schedule.microbatches),
        S_(schedule.stages()),
        sent_(static_cast<size_t>(S_) * M_ * 2, kNotYet),
        blocked_on_(schedule.pipeline, kNone),
        clock_(schedule.pipeline, 0) {
    const int D = schedule.pipeline;
    exec_.ran.assign(D, 0);
    if (record_times) {
      exec_.end.resize(D);
      for (int r = 0; r < D; ++r) exec_.end[r].reserve(schedule.programs[r].size());
    }
    for (int r = 0; r < D; ++r) runnable_.push_back(D - 1 - r);  // a stack; rank 0 first
  }

  Execution Run() && {
    while (!runnable_.empty()) {
      const int r = runnable_.back();
      runnable_.pop_back();
      RunUntilBlocked(r);
    }
    for (int r = 0; r < schedule_.pipeline; ++r) {
      if (exec_.ran[r] < schedule_.programs[r].size()) exec_.deadlocked = true;
    }
    return std::move(exec_);
  }

 private:
  // Below every time (durations are >= 0), including an infinite one when costs overflow, so
  // whether a message was sent never depends on when.
  static constexpr double kNotYet = -1;
  static constexpr size_t kNone = ~size_t{0};

  // Messages are keyed by (stage of the sender, microbatch, activation or gradient).
  size_t Message(int stage, int microbatch, bool grad) const {
    return (static_cast<size_t>(stage) * M_ + microbatch) * 2 + grad;
  }

  void RunUntilBlocked(int r) {
    const std::vector<prog::Action>& program = schedule_.programs[r];
    size_t i = exec_.ran[r];
    double now = clock_[r];
    for (; i < program.size(); ++i) {
      const prog::Action& a = program[i];
      if (a.kind == prog::Kind::kSendActivation || a.kind == prog::Kind::kSendGrad) {
        const bool grad = a.kind == prog::Kind::kSendGrad;
        const size_t m = Message(a.stage, a.microbatch, grad);
        now += durations_.send;
        if (sent_[m] == kNotYet) sent_[m] = now;
        const int receiver = schedule_.stage_to_rank[grad ? a.stage - 1 : a.stage + 1];
        if (blocked_on_[receiver] == m) {
          blocked_on_[receiver] = kNone;
          runnable_.push_back(receiver);
        }
      } else if (prog::IsComm(a.kind)) {
        const bool grad = a.kind == prog::Kind::kRecvGrad;
        const size_t m = Message(grad ? a.stage + 1 : a.stage - 1, a.microbatch, grad);
        if (sent_[m] == kNotYet) {
          blocked_on_[r] = m;
          break;
        }
        now = std::max(now, sent_[m] + TransferDuration(durations_, a.microbatch));
      } else {
        now += ComputeDuration(durations_, a, S_);
      }
      if (record_times_) exec_.end[r].push_back(now);
    }
    exec_.ran[r] = i;
    clock_[r] = now;
  }

  const prog::Schedule& schedule_;
  const Durations& durations_;
  const bool record_times_;
  const int M_, S_;
  std::vector<double> sent_;  // when each message was first sent
  // Per rank, the message it is blocked on (kNone: runnable or done). A message has one possible
  // receiver, the rank of the stage it goes to, so a send need only ask that rank.
  std::vector<size_t> blocked_on_;
  std::vector<double> clock_;
  std::vector<int> runnable_;
  Execution exec_;
};

}  // namespace

Execution Execute(const prog::Schedule& schedule, const Durations& durations, bool record_times) {
  return Machine(schedule, durations, record_times).Run();
}

}  // namespace pp::plan::internal
