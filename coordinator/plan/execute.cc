#include "coordinator/plan/execute.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pp::plan::internal {

int ComputeIndex(Kind kind) {
  switch (kind) {
    case Kind::kForward:
      return 0;
    case Kind::kBackward:
      return 1;
    case Kind::kBackwardInput:
      return 2;
    case Kind::kBackwardWeight:
      return 3;
    default:
      return -1;
  }
}

Event Produces(Kind kind) {
  switch (kind) {
    case Kind::kForward:
      return kForwardDone;
    case Kind::kBackward:
    case Kind::kBackwardInput:
      return kGradDone;
    case Kind::kBackwardWeight:
      return kWeightDone;
    case Kind::kSendActivation:
      return kActSent;
    case Kind::kSendGrad:
      return kGradSent;
    case Kind::kRecvActivation:
      return kActRecvd;
    case Kind::kRecvGrad:
      return kGradRecvd;
  }
  return kForwardDone;
}

Deps DepsOf(const Action& a, const Schedule& schedule) {
  const int s = a.stage, S = schedule.stages();
  const std::vector<int>& rank = schedule.stage_to_rank;
  Deps deps;
  auto add = [&](Event event, int stage) {
    deps.event[deps.count] = event;
    deps.stage[deps.count++] = stage;
  };
  switch (a.kind) {
    case Kind::kForward:
      if (s > 0 && rank[s - 1] == rank[s]) add(kForwardDone, s - 1);
      if (s > 0 && rank[s - 1] != rank[s]) add(kActRecvd, s);
      break;
    case Kind::kBackward:
    case Kind::kBackwardInput:
      add(kForwardDone, s);
      if (s + 1 < S && rank[s + 1] == rank[s]) add(kGradDone, s + 1);
      if (s + 1 < S && rank[s + 1] != rank[s]) add(kGradRecvd, s);
      break;
    case Kind::kBackwardWeight:
      add(kGradDone, s);
      break;
    case Kind::kSendActivation:
      add(kForwardDone, s);
      break;
    case Kind::kSendGrad:
      add(kGradDone, s);
      break;
    case Kind::kRecvActivation:
      add(kActSent, s - 1);
      deps.remote = true;
      break;
    case Kind::kRecvGrad:
      add(kGradSent, s + 1);
      deps.remote = true;
      break;
  }
  return deps;
}

namespace {

// D, V, M >= 1; S = D*V stages; every rank holds V of them; one program per rank.
absl::Status CheckShape(const Schedule& schedule) {
  const int D = schedule.pipeline, V = schedule.chunks, M = schedule.microbatches;
  if (D < 1 || V < 1 || M < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("schedule needs D, V, M >= 1, got D=", D, " V=", V, " M=", M));
  }
  const int S = schedule.stages();
  if (S != D * V) {
    return absl::InvalidArgumentError(
        absl::StrCat("stage_to_rank has ", S, " entries, want D*V = ", D * V));
  }
  std::vector<int> held(D, 0);
  for (int s = 0; s < S; ++s) {
    const int r = schedule.stage_to_rank[s];
    if (r < 0 || r >= D) {
      return absl::InvalidArgumentError(
          absl::StrCat("stage ", s, " is mapped to rank ", r, ", outside 0..", D - 1));
    }
    ++held[r];
  }
  for (int r = 0; r < D; ++r) {
    if (held[r] != V) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", r, " holds ", held[r], " stages, want V=", V));
    }
  }
  if (static_cast<int>(schedule.programs.size()) != D) {
    return absl::InvalidArgumentError(
        absl::StrCat("schedule has ", schedule.programs.size(), " programs, want D=", D));
  }
  return absl::OkStatus();
}

// Action i of rank r: a known kind, stage and microbatch in range, on the rank holding its
// stage; a comm's peer holds the neighbouring stage and is another rank. Returns why not, or
// nothing.
std::optional<std::string> ActionProblem(const Schedule& schedule, int r, const Action& a) {
  const int S = schedule.stages(), M = schedule.microbatches;
  if (a.kind > Kind::kRecvGrad) return "unknown action kind";
  if (a.stage < 0 || a.stage >= S) return absl::StrCat("stage outside 0..", S - 1);
  if (a.microbatch < 0 || a.microbatch >= M) return absl::StrCat("microbatch outside 0..", M - 1);
  if (schedule.stage_to_rank[a.stage] != r) {
    return absl::StrCat("stage ", a.stage, " is held by rank ", schedule.stage_to_rank[a.stage]);
  }
  if (!IsComm(a.kind)) {
    if (a.peer != -1) return "a compute action has a peer";
    return std::nullopt;
  }
  const bool to_next = a.kind == Kind::kSendActivation || a.kind == Kind::kRecvGrad;
  const int other = to_next ? a.stage + 1 : a.stage - 1;
  if (other < 0 || other >= S) {
    return absl::StrCat("stage ", a.stage, " has no stage ", other, " to talk to");
  }
  const int want = schedule.stage_to_rank[other];
  if (want == r) return absl::StrCat("stage ", other, " is on the same rank; no message is needed");
  if (a.peer != want) {
    return absl::StrCat("peer should be rank ", want, ", which holds stage ", other);
  }
  return std::nullopt;
}

}  // namespace

absl::Status CheckIndices(const Schedule& schedule) {
  if (absl::Status status = CheckShape(schedule); !status.ok()) return status;
  for (int r = 0; r < schedule.pipeline; ++r) {
    const std::vector<Action>& program = schedule.programs[r];
    for (size_t i = 0; i < program.size(); ++i) {
      if (std::optional<std::string> why = ActionProblem(schedule, r, program[i])) {
        return absl::InvalidArgumentError(
            absl::StrCat("rank ", r, ", action ", i, " (", Describe(program[i]), "): ", *why));
      }
    }
  }
  return absl::OkStatus();
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
  Machine(const Schedule& schedule, const Durations& durations, bool record_times)
      : schedule_(schedule), durations_(durations), record_times_(record_times),
        M_(schedule.microbatches), S_(schedule.stages()),
        sent_(static_cast<size_t>(S_) * M_ * 2, kNotYet), blocked_on_(schedule.pipeline, kNone),
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
    const std::vector<Action>& program = schedule_.programs[r];
    size_t i = exec_.ran[r];
    double now = clock_[r];
    for (; i < program.size(); ++i) {
      const Action& a = program[i];
      if (a.kind == Kind::kSendActivation || a.kind == Kind::kSendGrad) {
        const bool grad = a.kind == Kind::kSendGrad;
        const size_t m = Message(a.stage, a.microbatch, grad);
        now += durations_.send;
        if (sent_[m] == kNotYet) sent_[m] = now;
        const int receiver = schedule_.stage_to_rank[grad ? a.stage - 1 : a.stage + 1];
        if (blocked_on_[receiver] == m) {
          blocked_on_[receiver] = kNone;
          runnable_.push_back(receiver);
        }
      } else if (IsComm(a.kind)) {
        const bool grad = a.kind == Kind::kRecvGrad;
        const size_t m = Message(grad ? a.stage + 1 : a.stage - 1, a.microbatch, grad);
        if (sent_[m] == kNotYet) {
          blocked_on_[r] = m;
          break;
        }
        now = std::max(now, sent_[m] + durations_.transfer);
      } else {
        now += durations_.compute[ComputeIndex(a.kind) * S_ + a.stage];
      }
      if (record_times_) exec_.end[r].push_back(now);
    }
    exec_.ran[r] = i;
    clock_[r] = now;
  }

  const Schedule& schedule_;
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

Execution Execute(const Schedule& schedule, const Durations& durations, bool record_times) {
  return Machine(schedule, durations, record_times).Run();
}

}  // namespace pp::plan::internal
