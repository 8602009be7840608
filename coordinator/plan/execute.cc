#include "coordinator/plan/execute.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace pp::plan::internal {
namespace {

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

}  // namespace

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

absl::Status CheckIndices(const Schedule& schedule) {
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
  for (int r = 0; r < D; ++r) {
    const std::vector<Action>& program = schedule.programs[r];
    for (size_t i = 0; i < program.size(); ++i) {
      const Action& a = program[i];
      auto bad = [&](const std::string& why) {
        return absl::InvalidArgumentError(
            absl::StrCat("rank ", r, ", action ", i, " (", Describe(a), "): ", why));
      };
      if (a.kind > Kind::kRecvGrad) return bad("unknown action kind");
      if (a.stage < 0 || a.stage >= S) return bad(absl::StrCat("stage outside 0..", S - 1));
      if (a.microbatch < 0 || a.microbatch >= M) {
        return bad(absl::StrCat("microbatch outside 0..", M - 1));
      }
      if (schedule.stage_to_rank[a.stage] != r) {
        return bad(
            absl::StrCat("stage ", a.stage, " is held by rank ", schedule.stage_to_rank[a.stage]));
      }
      if (!IsComm(a.kind)) {
        if (a.peer != -1) return bad("a compute action has a peer");
        continue;
      }
      const bool to_next = a.kind == Kind::kSendActivation || a.kind == Kind::kRecvGrad;
      const int other = to_next ? a.stage + 1 : a.stage - 1;
      if (other < 0 || other >= S) {
        return bad(absl::StrCat("stage ", a.stage, " has no stage ", other, " to talk to"));
      }
      const int want = schedule.stage_to_rank[other];
      if (want == r) {
        return bad(absl::StrCat("stage ", other, " is on the same rank; no message is needed"));
      }
      if (a.peer != want) {
        return bad(absl::StrCat("peer should be rank ", want, ", which holds stage ", other));
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

Execution Execute(const Schedule& schedule, const Durations& durations, bool record_times) {
  const int D = schedule.pipeline, S = schedule.stages(), M = schedule.microbatches;
  // Below every time (durations are >= 0), including an infinite one when costs overflow, so
  // whether a message was sent never depends on when.
  constexpr double kNotYet = -1;
  // When each message was first sent, keyed by (stage of the sender, microbatch, activation or
  // gradient).
  std::vector<double> sent(static_cast<size_t>(S) * M * 2, kNotYet);
  auto message = [M](int stage, int microbatch, bool grad) {
    return (static_cast<size_t>(stage) * M + microbatch) * 2 + grad;
  };
  // Per rank, the message it is blocked on (kNone: runnable or done). A message has one possible
  // receiver, the rank of the stage it goes to, so a send need only ask that rank.
  constexpr size_t kNone = ~size_t{0};
  std::vector<size_t> blocked_on(D, kNone);
  Execution exec;
  exec.ran.assign(D, 0);
  if (record_times) {
    exec.end.resize(D);
    for (int r = 0; r < D; ++r) exec.end[r].reserve(schedule.programs[r].size());
  }
  std::vector<double> clock(D, 0);
  std::vector<int> runnable(D);
  for (int r = 0; r < D; ++r) runnable[r] = D - 1 - r;  // a stack; rank 0 first
  while (!runnable.empty()) {
    const int r = runnable.back();
    runnable.pop_back();
    const std::vector<Action>& program = schedule.programs[r];
    size_t i = exec.ran[r];
    double now = clock[r];
    for (; i < program.size(); ++i) {
      const Action& a = program[i];
      if (a.kind == Kind::kSendActivation || a.kind == Kind::kSendGrad) {
        const bool grad = a.kind == Kind::kSendGrad;
        const size_t m = message(a.stage, a.microbatch, grad);
        now += durations.send;
        if (sent[m] == kNotYet) sent[m] = now;
        const int receiver = schedule.stage_to_rank[grad ? a.stage - 1 : a.stage + 1];
        if (blocked_on[receiver] == m) {
          blocked_on[receiver] = kNone;
          runnable.push_back(receiver);
        }
      } else if (IsComm(a.kind)) {
        const bool grad = a.kind == Kind::kRecvGrad;
        const size_t m = message(grad ? a.stage + 1 : a.stage - 1, a.microbatch, grad);
        if (sent[m] == kNotYet) {
          blocked_on[r] = m;
          break;
        }
        now = std::max(now, sent[m] + durations.transfer);
      } else {
        now += durations.compute[ComputeIndex(a.kind) * S + a.stage];
      }
      if (record_times) exec.end[r].push_back(now);
    }
    exec.ran[r] = i;
    clock[r] = now;
  }
  for (int r = 0; r < D; ++r) {
    if (exec.ran[r] < schedule.programs[r].size()) exec.deadlocked = true;
  }
  return exec;
}

}  // namespace pp::plan::internal
