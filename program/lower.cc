#include "program/lower.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pp::prog {

namespace internal {

void AppendLowered(const Schedule& compute, const Action& a, std::vector<Action>& out) {
  const int S = compute.stages();
  const int s = a.stage;
  const int here = compute.stage_to_rank[s];
  const int next = s + 1 < S ? compute.stage_to_rank[s + 1] : here;
  const int prev = s > 0 ? compute.stage_to_rank[s - 1] : here;
  const bool grad = a.kind == Kind::kBackward || a.kind == Kind::kBackwardInput;
  if (a.kind == Kind::kForward && prev != here) {
    out.push_back({Kind::kRecvActivation, s, a.microbatch, prev});
  }
  if (grad && next != here) out.push_back({Kind::kRecvGrad, s, a.microbatch, next});
  out.push_back(a);
  if (a.kind == Kind::kForward && next != here) {
    out.push_back({Kind::kSendActivation, s, a.microbatch, next});
  }
  if (grad && prev != here) out.push_back({Kind::kSendGrad, s, a.microbatch, prev});
}

}  // namespace internal

absl::StatusOr<Schedule> LowerComms(const Schedule& compute) {
  const int S = compute.stages();
  Schedule lowered;
  lowered.name = compute.name;
  lowered.pipeline = compute.pipeline;
  lowered.chunks = compute.chunks;
  lowered.microbatches = compute.microbatches;
  lowered.stage_to_rank = compute.stage_to_rank;
  lowered.programs.resize(compute.programs.size());
  for (size_t r = 0; r < compute.programs.size(); ++r) {
    std::vector<Action>& out = lowered.programs[r];
    out.reserve(compute.programs[r].size() * 3);  // at most a receive and a send per compute
    for (const Action& a : compute.programs[r]) {
      if (IsComm(a.kind)) {
        return absl::InvalidArgumentError(
            absl::StrCat("rank ", r, ": ", Describe(a), " in a program that is already lowered"));
      }
      if (a.stage < 0 || a.stage >= S) {
        return absl::InvalidArgumentError(
            absl::StrCat("rank ", r, ": ", Describe(a), " names a stage outside 0..", S - 1));
      }
      internal::AppendLowered(compute, a, out);
    }
  }
  return lowered;
}

}  // namespace pp::prog
