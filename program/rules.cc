#include "program/rules.h"

#include "absl/strings/str_cat.h"
#include "program/message.h"

namespace pp::prog {
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

// ActionProblem for a comm action whose kind, stage and microbatch are in range.
std::optional<std::string> CommProblem(const std::vector<int>& stage_to_rank, int rank,
                                       const Action& a, StageNaming naming) {
  const int S = static_cast<int>(stage_to_rank.size());
  const int held_by = stage_to_rank[a.stage];
  if (naming == StageNaming::kOwnStage && held_by != rank) {
    return absl::StrCat("stage ", a.stage, " is held by rank ", held_by);
  }
  const Ends ends = EndsOf(stage_to_rank, rank, a);
  if (ends.mine < 0 || ends.mine >= S || stage_to_rank[ends.mine] != rank) {
    return "no edge between a stage of this rank and a stage of another rank";
  }
  if (ends.other < 0 || ends.other >= S) {
    return absl::StrCat("stage ", ends.mine, " has no stage ", ends.other, " to talk to");
  }
  const int want = stage_to_rank[ends.other];
  if (want == rank) {
    return absl::StrCat("no edge to another rank: stage ", ends.other,
                        " is on this rank too, so no message is needed");
  }
  if (a.peer != want) {
    return absl::StrCat("peer should be rank ", want, ", which holds stage ", ends.other);
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> ActionProblem(const std::vector<int>& stage_to_rank, int microbatches,
                                         int rank, const Action& a, StageNaming naming) {
  const int S = static_cast<int>(stage_to_rank.size());
  if (a.kind > Kind::kRecvGrad) return "unknown action kind";
  if (a.stage < 0 || a.stage >= S) return absl::StrCat("stage outside 0..", S - 1);
  if (a.microbatch < 0 || a.microbatch >= microbatches) {
    return absl::StrCat("microbatch outside 0..", microbatches - 1);
  }
  if (IsComm(a.kind)) return CommProblem(stage_to_rank, rank, a, naming);
  if (stage_to_rank[a.stage] != rank) {
    return absl::StrCat("stage ", a.stage, " is held by rank ", stage_to_rank[a.stage]);
  }
  if (a.peer != -1) return "a compute action has a peer";
  return std::nullopt;
}

absl::Status CheckIndices(const Schedule& schedule) {
  if (absl::Status status = CheckShape(schedule); !status.ok()) return status;
  for (int r = 0; r < schedule.pipeline; ++r) {
    const std::vector<Action>& program = schedule.programs[r];
    for (size_t i = 0; i < program.size(); ++i) {
      if (std::optional<std::string> why =
              ActionProblem(schedule.stage_to_rank, schedule.microbatches, r, program[i],
                            StageNaming::kOwnStage)) {
        return absl::InvalidArgumentError(
            absl::StrCat("rank ", r, ", action ", i, " (", Describe(program[i]), "): ", *why));
      }
    }
  }
  return absl::OkStatus();
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

}  // namespace pp::prog
