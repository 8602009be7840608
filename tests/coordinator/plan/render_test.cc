#include "coordinator/plan/render.h"

#include "absl/strings/str_cat.h"
#include "coordinator/plan/convert.h"
#include "coordinator/plan/plan.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/coordinator/plan/plan_test_util.h"

namespace pp::plan {
namespace {

TEST(RenderTest, AsciiTimelineOf1f1b) {
  // D=2, M=2, f=1, b=2. Rank 1: F0 [1,2] B0 [2,4] F1 [4,5] B1 [5,7]; rank 0: F0 [0,1] F1 [1,2],
  // then B0 waits for rank 1's B0: [4,6], B1 [7,9]. One cell per time unit, microbatches from 1.
  const Planned planned = MustPlan("1f1b", 2, 1, 2);
  const std::string ascii =
      RenderAscii(TimelineFromSimulation(planned.schedule, planned.simulation));
  EXPECT_EQ(ascii,
            "rank 0: [F1] [F2] [  ] [  ] [B1     ] [  ] [B2     ]\n"
            "rank 1: [  ] [F1] [B1     ] [F2] [B2     ]\n"
            "(one cell = 1 time units; F forward, B backward, I input-grad, W weight-grad; number "
            "= microbatch from 1; [  ] idle)\n");
}

TEST(RenderTest, ChunksGetALetter) {
  const Planned planned = MustPlan("interleaved-1f1b", 2, 2, 2);
  const std::string ascii =
      RenderAscii(TimelineFromSimulation(planned.schedule, planned.simulation));
  EXPECT_EQ(ascii.substr(0, 23), "rank 0: [F1a] [F2a] [F1");
  EXPECT_NE(ascii.find("letter = chunk"), std::string::npos);
}

// A measured trace with the simulated times renders exactly like the simulation.
TEST(RenderTest, MeasuredTraceRendersWithTheSameCode) {
  const Planned planned = MustPlan("zb-h1", 3, 1, 4);
  const Timeline simulated = TimelineFromSimulation(planned.schedule, planned.simulation);
  pp::v1::StepTrace trace;
  trace.set_step(7);
  for (int r = 2; r >= 0; --r) {  // ranks out of order on purpose
    pp::v1::RankTrace* rank = trace.add_ranks();
    rank->set_rank(r);
    for (const TimedAction& t : simulated.ranks[r]) {
      pp::v1::TimedAction* timed = rank->add_actions();
      *timed->mutable_action() =
          ScheduleToProto(prog::Schedule{"", 1, 1, 1, {0}, {{t.action}}}, nullptr)
              .ranks(0)
              .actions(0);
      timed->set_start(t.start);
      timed->set_end(t.end);
    }
  }
  trace.add_ranks()->add_actions();  // an UNSPECIFIED action is skipped, not a crash
  EXPECT_EQ(RenderAscii(TimelineFromTrace(trace)), RenderAscii(simulated));
}

TEST(RenderTest, ChromeTraceIsJsonWithOneEventPerAction) {
  const Planned planned = MustPlan("1f1b", 2, 1, 2);
  const std::string json =
      RenderChrome(TimelineFromSimulation(planned.schedule, planned.simulation), 1000);
  google::protobuf::Struct parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &parsed).ok()) << json;
  const auto& events = parsed.fields().at("traceEvents").list_value().values();
  size_t actions = 0;
  for (const auto& program : planned.schedule.programs) actions += program.size();
  ASSERT_EQ(static_cast<size_t>(events.size()), actions + 2);  // + a thread name per rank
  // Rank 0's B0 runs [4, 6] units = [4000, 6000] us.
  bool found = false;
  for (const auto& event : events) {
    const auto& f = event.struct_value().fields();
    if (f.at("name").string_value() == "BACKWARD stage 0 microbatch 0") {
      EXPECT_EQ(f.at("ts").number_value(), 4000);
      EXPECT_EQ(f.at("dur").number_value(), 2000);
      EXPECT_EQ(f.at("tid").number_value(), 0);
      found = true;
    }
  }
  EXPECT_TRUE(found);
}

// Every event of a schedule with comms is the timeline's action, field by field, in order.
TEST(RenderTest, ChromeEventsAreTheTimelinesActions) {
  const Planned planned = MustPlan("zb-v", 3, 2, 6);
  const Timeline timeline = TimelineFromSimulation(planned.schedule, planned.simulation);
  google::protobuf::Struct parsed;
  const std::string json = RenderChrome(timeline, 1e6 / 3);  // non-integer microseconds
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &parsed).ok());
  EXPECT_EQ(parsed.fields().at("displayTimeUnit").string_value(), "ms");
  const auto& events = parsed.fields().at("traceEvents").list_value().values();
  int e = 0;
  for (size_t r = 0; r < timeline.ranks.size(); ++r) {
    const auto& meta = events[e++].struct_value().fields();
    EXPECT_EQ(meta.at("ph").string_value(), "M");
    EXPECT_EQ(meta.at("args").struct_value().fields().at("name").string_value(),
              absl::StrCat("rank ", r));
    for (const TimedAction& t : timeline.ranks[r]) {
      ASSERT_LT(e, events.size());
      const auto& f = events[e++].struct_value().fields();
      EXPECT_EQ(f.at("name").string_value(), prog::Describe(t.action));
      EXPECT_EQ(f.at("cat").string_value(), prog::KindName(t.action.kind));
      EXPECT_EQ(f.at("ph").string_value(), "X");
      EXPECT_EQ(f.at("tid").number_value(), r);
      EXPECT_EQ(f.at("ts").number_value(), t.start * (1e6 / 3));
      EXPECT_EQ(f.at("dur").number_value(), (t.end - t.start) * (1e6 / 3));
      const auto& args = f.at("args").struct_value().fields();
      EXPECT_EQ(args.at("stage").number_value(), t.action.stage);
      EXPECT_EQ(args.at("microbatch").number_value(), t.action.microbatch);
      EXPECT_EQ(args.count("peer") > 0, t.action.peer >= 0);
      if (t.action.peer >= 0) EXPECT_EQ(args.at("peer").number_value(), t.action.peer);
    }
  }
  EXPECT_EQ(e, events.size());
}

TEST(ConvertTest, ProtoRoundTripAndJsonShape) {
  const Planned planned = MustPlan("zb-v", 2, 2, 3);
  const pp::v1::Schedule proto = ScheduleToProto(planned.schedule, &planned.simulation);
  absl::StatusOr<prog::Schedule> back = ScheduleFromProto(proto);
  ASSERT_TRUE(back.ok());
  ASSERT_EQ(back->programs.size(), planned.schedule.programs.size());
  for (size_t r = 0; r < back->programs.size(); ++r) {
    ASSERT_EQ(back->programs[r].size(), planned.schedule.programs[r].size());
    for (size_t i = 0; i < back->programs[r].size(); ++i) {
      const prog::Action& a = back->programs[r][i];
      const prog::Action& b = planned.schedule.programs[r][i];
      EXPECT_TRUE(a.kind == b.kind && a.stage == b.stage && a.microbatch == b.microbatch &&
                  a.peer == b.peer);
    }
  }
  EXPECT_EQ(back->stage_to_rank, planned.schedule.stage_to_rank);

  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  ASSERT_TRUE(google::protobuf::util::MessageToJsonString(proto, &json, options).ok());
  EXPECT_NE(json.find(R"({"rank":0,"actions":[{"kind":"FORWARD","stage":0,"microbatch":0},)"),
            std::string::npos)
      << json.substr(0, 300);
  EXPECT_NE(json.find(R"("kind":"SEND_ACTIVATION","stage":0,"microbatch":0,"peer":1)"),
            std::string::npos);
  EXPECT_NE(json.find(R"("bubbleDefinition":"1 - sum(busy))"), std::string::npos);

  pp::v1::Schedule bad = proto;
  bad.mutable_ranks(1)->mutable_actions(0)->set_kind(pp::v1::ACTION_KIND_UNSPECIFIED);
  EXPECT_FALSE(ScheduleFromProto(bad).ok());
}

TEST(PlanScheduleTest, FacadeSimulatesUnsetCostsAsUniform) {
  absl::StatusOr<pp::v1::Schedule> schedule = PlanSchedule("1f1b", 4, 1, 8, pp::v1::CostModel());
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  EXPECT_EQ(schedule->simulation().makespan(), 3 * (8 + 4 - 1));
  EXPECT_EQ(schedule->stage_to_rank_size(), 4);
  absl::StatusOr<std::string> ascii = RenderScheduleAscii(*schedule, pp::v1::CostModel());
  ASSERT_TRUE(ascii.ok());
  EXPECT_EQ(ascii->substr(0, 13), "rank 0: [F1] ");
  absl::StatusOr<pp::v1::Schedule> refused =
      PlanSchedule("interleaved-1f1b", 4, 2, 2, pp::v1::CostModel());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pp::plan
