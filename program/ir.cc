#include "program/ir.h"

#include "absl/strings/str_cat.h"
#include "program/schedules.h"

namespace pp::prog {

bool Schedule::trains() const { return name != kForwardOnly; }

const char* KindName(Kind kind) {
  switch (kind) {
    case Kind::kForward:
      return "FORWARD";
    case Kind::kBackward:
      return "BACKWARD";
    case Kind::kBackwardInput:
      return "BACKWARD_INPUT";
    case Kind::kBackwardWeight:
      return "BACKWARD_WEIGHT";
    case Kind::kSendActivation:
      return "SEND_ACTIVATION";
    case Kind::kRecvActivation:
      return "RECV_ACTIVATION";
    case Kind::kSendGrad:
      return "SEND_GRAD";
    case Kind::kRecvGrad:
      return "RECV_GRAD";
  }
  return "UNKNOWN";
}

std::string Describe(const Action& action) {
  std::string text = absl::StrCat(KindName(action.kind), " stage ", action.stage, " microbatch ",
                                  action.microbatch);
  if (IsSend(action.kind)) {
    absl::StrAppend(&text, " to rank ", action.peer);
  } else if (IsComm(action.kind)) {
    absl::StrAppend(&text, " from rank ", action.peer);
  }
  return text;
}

std::vector<int> LoopedStageToRank(int D, int V) {
  std::vector<int> map(D * V);
  for (int s = 0; s < D * V; ++s) map[s] = s % D;
  return map;
}

std::vector<int> VShapeStageToRank(int D) {
  std::vector<int> map(2 * D);
  for (int r = 0; r < D; ++r) {
    map[r] = r;
    map[2 * D - 1 - r] = r;
  }
  return map;
}

}  // namespace pp::prog
