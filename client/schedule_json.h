// The proto3 JSON of a compiled schedule, fast: what `ppctl plan --format=json` prints.
//
// Protobuf's JSON printer builds a pp.v1.Schedule message and walks it through reflection, about
// 2.5 us per action: 4 s for interleaved-1f1b D=64 V=4 M=1024 (1.57 M actions, 90 MB). The rank
// programs are nearly all of that text and have one fixed shape, so they are written here straight
// from the planner's structs; everything else (names, the stage map, the simulation's doubles) is
// still printed by protobuf, so its number formatting and string escaping stay protobuf's own.
// The result is byte for byte what MessageToJsonString with always_print_primitive_fields
// prints (tests/client/schedule_json_test.cc holds it to that).
//
// Threading: pure functions.
#ifndef PP_CLIENT_SCHEDULE_JSON_H_
#define PP_CLIENT_SCHEDULE_JSON_H_

#include <cstdio>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/plan/plan.h"
#include "google/protobuf/message.h"

namespace pp::client {

// MessageToJsonString(ScheduleToProto(schedule, simulation)), always printing primitive fields.
// `simulation` may be null.
absl::StatusOr<std::string> ScheduleJson(const prog::Schedule& schedule,
                                         const plan::Simulation* simulation);

// The same for a message that holds, as its field `field` (a pp.v1.Schedule), the proto of
// `schedule` with every RankProgram left out (ScheduleToProto of a schedule without programs):
// the programs are written into its place. A pp.v1.PlanJobResponse's `schedule` is one.
// Internal error when that field prints no empty "ranks" where the programs belong.
absl::StatusOr<std::string> JsonWithPrograms(const google::protobuf::Message& message,
                                             const prog::Schedule& schedule);

// JsonWithPrograms, then a newline, written to `file` as it is made, in pieces of about 1 MB.
// Unavailable when a write fails.
absl::Status WriteJsonWithPrograms(const google::protobuf::Message& message,
                                   const prog::Schedule& schedule, std::FILE* file);

// The schedule without its programs: what JsonWithPrograms expects inside the message.
prog::Schedule WithoutPrograms(const prog::Schedule& schedule);

}  // namespace pp::client

#endif  // PP_CLIENT_SCHEDULE_JSON_H_
