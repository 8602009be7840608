// Where program actions meet their protos (pp.v1.Action in pp/v1/schedule.proto): the planner's
// schedules go out and the worker's programs and traces come in through these two functions.
#ifndef PP_PROGRAM_PROTO_H_
#define PP_PROGRAM_PROTO_H_

#include <optional>

#include "pp/v1/schedule.pb.h"
#include "program/ir.h"

namespace pp::prog {

// Kind and pp.v1.ActionKind list the same kinds in the same order (the proto starts at 1).
// nullopt for ACTION_KIND_UNSPECIFIED or a kind this build does not know. A missing peer is -1.
std::optional<Action> ActionFromProto(const pp::v1::Action& proto);
// Sets peer only on comm actions.
pp::v1::Action ActionToProto(const Action& action);

}  // namespace pp::prog

#endif  // PP_PROGRAM_PROTO_H_
