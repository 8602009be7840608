#include "program/proto.h"

namespace pp::prog {
namespace {

pp::v1::ActionKind KindToProto(Kind kind) {
  return static_cast<pp::v1::ActionKind>(static_cast<int>(kind) + 1);
}

}  // namespace

std::optional<Action> ActionFromProto(const pp::v1::Action& proto) {
  if (proto.kind() < pp::v1::FORWARD || proto.kind() > pp::v1::RECV_GRAD) return std::nullopt;
  return Action{static_cast<Kind>(proto.kind() - 1), proto.stage(), proto.microbatch(),
                proto.has_peer() ? proto.peer() : -1};
}

pp::v1::Action ActionToProto(const Action& a) {
  pp::v1::Action action;
  action.set_kind(KindToProto(a.kind));
  action.set_stage(a.stage);
  action.set_microbatch(a.microbatch);
  if (IsComm(a.kind)) action.set_peer(a.peer);
  return action;
}

}  // namespace pp::prog
