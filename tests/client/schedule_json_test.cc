// client/schedule_json.h: the fast schedule JSON is byte for byte protobuf's own.
#include "client/schedule_json.h"

#include <cstdio>
#include <string>

#include "coordinator/plan/plan.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "pp/v1/coordinator.pb.h"

namespace pp::client {
namespace {

std::string Protobuf(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  std::string json;
  EXPECT_TRUE(google::protobuf::util::MessageToJsonString(message, &json, options).ok());
  return json;
}

plan::Planned MustPlan(const std::string& name, int D, int V, int M,
                       const plan::CostModel& costs) {
  absl::StatusOr<plan::Planned> planned = plan::Plan(name, D, V, M, costs);
  EXPECT_TRUE(planned.ok()) << name << ": " << planned.status();
  return *planned;
}

// Every schedule kind, comm actions with peers, and costs whose doubles need 17 digits.
TEST(ScheduleJsonTest, EqualsProtobufForEverySchedule) {
  plan::CostModel costs;
  costs.forward = 1.0 / 3, costs.backward = 2.0 / 7, costs.comm_latency = 0.1;
  costs.activation_bytes = 1e9 / 3;
  struct Case { const char* name; int D, V, M; };
  for (const Case& c : {Case{"gpipe", 3, 1, 5}, Case{"1f1b", 4, 1, 8},
                        Case{"interleaved-1f1b", 2, 3, 4}, Case{"zb-h1", 3, 1, 6},
                        Case{"zb-v", 2, 2, 4}, Case{"forward-only", 2, 1, 3},
                        Case{"1f1b", 1, 1, 1}}) {
    const plan::Planned p = MustPlan(c.name, c.D, c.V, c.M, costs);
    absl::StatusOr<std::string> fast = ScheduleJson(p.schedule, &p.simulation);
    ASSERT_TRUE(fast.ok()) << fast.status();
    EXPECT_EQ(*fast, Protobuf(plan::ScheduleToProto(p.schedule, &p.simulation))) << c.name;
    absl::StatusOr<std::string> bare = ScheduleJson(p.schedule, nullptr);
    ASSERT_TRUE(bare.ok()) << bare.status();
    EXPECT_EQ(*bare, Protobuf(plan::ScheduleToProto(p.schedule, nullptr))) << c.name;
  }
}

// Strings keep protobuf's escaping (quotes, control characters, HTML-unsafe '<'), and a name
// that spells a field cannot fool the splice; empty programs print as protobuf prints them.
TEST(ScheduleJsonTest, EqualsProtobufForOddNamesAndEmptyPrograms) {
  plan::Planned p = MustPlan("1f1b", 2, 1, 2, {});
  p.schedule.name = "a\"<b>\n\\ \"stageToRank\":[],\"ranks\":[] \xc3\xa9";
  p.schedule.programs[1].clear();
  absl::StatusOr<std::string> fast = ScheduleJson(p.schedule, &p.simulation);
  ASSERT_TRUE(fast.ok()) << fast.status();
  EXPECT_EQ(*fast, Protobuf(plan::ScheduleToProto(p.schedule, &p.simulation)));
  p.schedule.programs.clear();
  fast = ScheduleJson(p.schedule, nullptr);
  ASSERT_TRUE(fast.ok()) << fast.status();
  EXPECT_EQ(*fast, Protobuf(plan::ScheduleToProto(p.schedule, nullptr)));
}

// `ppctl plan --spec --format=json` prints a PlanJobResponse with the schedule inside it.
TEST(ScheduleJsonTest, EqualsProtobufInsideAPlanJobResponse) {
  const plan::Planned p = MustPlan("interleaved-1f1b", 2, 2, 4, {});
  pp::v1::PlanJobResponse full;
  *full.mutable_schedule() = plan::ScheduleToProto(p.schedule, &p.simulation);
  full.add_stage_layers(3), full.add_stage_layers(3);
  full.add_memory()->set_total(12345);
  full.set_mesh("dp1 x pp2 x tp1");
  pp::v1::PlanJobResponse lean = full;
  lean.mutable_schedule()->clear_ranks();
  absl::StatusOr<std::string> fast = JsonWithPrograms(lean, p.schedule);
  ASSERT_TRUE(fast.ok()) << fast.status();
  EXPECT_EQ(*fast, Protobuf(full));
}

// Written to a file in pieces (this one is 2.7 MB, several flushes): the same bytes and a newline.
TEST(ScheduleJsonTest, WritesTheSameBytesToAFile) {
  const plan::Planned p = MustPlan("interleaved-1f1b", 8, 4, 256, {});
  std::FILE* file = std::tmpfile();
  ASSERT_NE(file, nullptr);
  ASSERT_TRUE(WriteJsonWithPrograms(plan::ScheduleToProto(WithoutPrograms(p.schedule),
                                                          &p.simulation),
                                    p.schedule, file)
                  .ok());
  std::string written(static_cast<size_t>(std::ftell(file)), '\0');
  std::rewind(file);
  ASSERT_EQ(std::fread(written.data(), 1, written.size(), file), written.size());
  std::fclose(file);
  const std::string expected = Protobuf(plan::ScheduleToProto(p.schedule, &p.simulation)) + "\n";
  EXPECT_GT(expected.size(), 2u << 20);
  EXPECT_TRUE(written == expected) << written.size() << " bytes written, " << expected.size()
                                   << " expected";
}

TEST(ScheduleJsonTest, RefusesAMessageWithoutAnEmptyRanksField) {
  const plan::Planned p = MustPlan("1f1b", 2, 1, 2, {});
  pp::v1::PlanJobResponse response;  // no schedule at all: nothing to splice into
  response.set_mesh("x");
  absl::StatusOr<std::string> json = JsonWithPrograms(response, p.schedule);
  EXPECT_EQ(json.status().code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace pp::client
