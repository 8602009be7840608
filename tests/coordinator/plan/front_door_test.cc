// The planner's front door (plan.h): the schedule table, the one bubble definition, and the
// cost fitting of a measured step.
#include "coordinator/plan/plan.h"

#include <cmath>

#include "gtest/gtest.h"
#include "tests/coordinator/plan/plan_test_util.h"

namespace pp::plan {
namespace {

TEST(ScheduleTableTest, NamesChunkRulesAndChoicesComeFromOneTable) {
  ASSERT_EQ(prog::ScheduleNames(),
            (std::vector<std::string>{"gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-h2", "zb-v",
                                      "v-half", "v-min", "dualpipe-v", "forward-only"}));
  ASSERT_EQ(prog::Schedules().size(), prog::ScheduleNames().size());
  EXPECT_EQ(prog::FindSchedule("chimera"), nullptr);
  EXPECT_EQ(prog::DefaultChunks("zb-v"), 2);
  EXPECT_EQ(prog::DefaultChunks("interleaved-1f1b"), 2);
  EXPECT_EQ(prog::DefaultChunks("1f1b"), 1);
  EXPECT_EQ(prog::DefaultChunks("dualpipe-v"), 2);
  EXPECT_EQ(prog::DefaultChunks("zb-h2"), 1);
  EXPECT_EQ(prog::ChunkChoices(*prog::FindSchedule("zb-v"), 4), std::vector<int>{2});
  EXPECT_EQ(prog::ChunkChoices(*prog::FindSchedule("gpipe"), 4), std::vector<int>{1});
  EXPECT_EQ(prog::ChunkChoices(*prog::FindSchedule("interleaved-1f1b"), 4),
            (std::vector<int>{2, 3, 4}));
  EXPECT_TRUE(prog::CheckScheduleNames({"1f1b", "zb-h1"}).ok());
  EXPECT_EQ(prog::CheckScheduleNames({"1f1b", "chimera"}).message(),
            "unknown schedule 'chimera' (known: gpipe, 1f1b, interleaved-1f1b, zb-h1, zb-h2, zb-v, "
            "v-half, v-min, dualpipe-v, forward-only)");
}

TEST(ScheduleTableTest, RefusalsSayWhichRuleOfTheTable) {
  EXPECT_EQ(prog::Generate("zb-v", 4, 3, 8).status().message(),
            "zb-v runs exactly 2 chunk(s) per rank, got V=3");
  EXPECT_EQ(prog::Generate("gpipe", 4, 2, 8).status().message(),
            "gpipe runs exactly 1 chunk(s) per rank, got V=2");
  EXPECT_EQ(prog::Generate("interleaved-1f1b", 4, 1, 8).status().message(),
            "interleaved-1f1b needs V >= 2 chunks per rank (got V=1; with one chunk use 1f1b)");
  EXPECT_NE(prog::Generate("interleaved-1f1b", 4, 2, 2).status().message().find("needs M >= D"),
            std::string::npos);
  // Size checks come before the name, as they always did.
  EXPECT_EQ(prog::Generate("chimera", 0, 1, 8).status().message(), "pipeline depth D=0 < 1");
}

TEST(IdleFractionTest, IdleShareOfAllRanksTimeFromFirstActionToLast) {
  EXPECT_DOUBLE_EQ(IdleFraction({2, 1}, 2), 0.25);
  EXPECT_DOUBLE_EQ(IdleFraction({3, 3, 3}, 3), 0);
  EXPECT_EQ(IdleFraction({}, 5), 0);
  EXPECT_EQ(IdleFraction({1, 1}, 0), 0);
  // The simulator's figure is this definition over its ranks' busy time and the makespan.
  const Planned planned = MustPlan("1f1b", 4, 1, 8);
  std::vector<double> busy;
  for (const RankStats& rank : planned.simulation.ranks) busy.push_back(rank.busy);
  EXPECT_EQ(planned.simulation.bubble_fraction, IdleFraction(busy, planned.simulation.makespan));
  EXPECT_DOUBLE_EQ(planned.simulation.bubble_fraction, 3.0 / 11);  // (D-1) / (M+D-1)
}

// A trace whose actions took exactly the simulated times of `planned` (f seconds per cost unit).
pp::v1::StepTrace TraceOf(const Planned& planned, double seconds_per_unit) {
  const v1::Schedule proto = ScheduleToProto(planned.schedule, &planned.simulation);
  pp::v1::StepTrace trace;
  const Timeline timeline = TimelineFromSimulation(planned.schedule, planned.simulation);
  for (size_t r = 0; r < timeline.ranks.size(); ++r) {
    pp::v1::RankTrace* rank = trace.add_ranks();
    rank->set_rank(static_cast<int>(r));
    for (size_t k = 0; k < timeline.ranks[r].size(); ++k) {
      pp::v1::TimedAction* t = rank->add_actions();
      *t->mutable_action() = proto.ranks(static_cast<int>(r)).actions(static_cast<int>(k));
      t->set_start(timeline.ranks[r][k].start * seconds_per_unit);
      t->set_end(timeline.ranks[r][k].end * seconds_per_unit);
    }
  }
  return trace;
}

// The bubble of `planned`'s schedule re-simulated under `trace`'s measured costs.
double Resimulated(const Planned& planned, const pp::v1::StepTrace& trace) {
  absl::StatusOr<TracedBubble> compared =
      CompareTraceWithSimulation(ScheduleToProto(planned.schedule, nullptr), trace);
  EXPECT_TRUE(compared.ok()) << compared.status();
  return compared.ok() ? compared->simulated : -1;
}

TEST(CostsFromTraceTest, MeasuredTimesBecomeTheCostModel) {
  CostModel costs;
  costs.forward = 1;
  costs.backward = 3;
  const Planned planned = MustPlan("1f1b", 3, 1, 6, costs);
  const pp::v1::StepTrace trace = TraceOf(planned, 0.01);
  absl::StatusOr<CostModel> fitted = CostsFromTrace(planned.schedule, trace);
  ASSERT_TRUE(fitted.ok()) << fitted.status();
  EXPECT_DOUBLE_EQ(fitted->forward, 0.01);
  EXPECT_DOUBLE_EQ(fitted->backward, 0.03);
  ASSERT_EQ(fitted->stage_scale.size(), 3u);
  for (double scale : fitted->stage_scale) EXPECT_DOUBLE_EQ(scale, 1);
  ASSERT_EQ(fitted->stage_costs.size(), 3u);
  for (const StageCosts& c : fitted->stage_costs) {
    EXPECT_DOUBLE_EQ(c.forward, 0.01);
    EXPECT_DOUBLE_EQ(c.backward, 0.03);
    EXPECT_DOUBLE_EQ(c.backward_input, 0.015);
  }
  EXPECT_EQ(fitted->send_overhead, 0);
  EXPECT_EQ(fitted->comm_latency, 0);
  // Re-simulated under what was measured, the schedule has the bubble it was planned with.
  EXPECT_NEAR(Resimulated(planned, trace), planned.simulation.bubble_fraction, 1e-12);
  EXPECT_EQ(CostsFromTrace(planned.schedule, pp::v1::StepTrace()).status().code(),
            absl::StatusCode::kNotFound);
}

// Stages of their own costs, split backwards, and messages that cost their sender and take
// time to arrive: the fit gives them back, and the re-simulation the bubble planned with them.
TEST(CostsFromTraceTest, PerStageCostsSendOverheadAndLatencyComeBack) {
  CostModel costs;
  costs.stage_costs = {{1, 3, 2, 1}, {2, 4, 1, 3}, {1.5, 2, 1, 1}, {1, 2.5, 1.5, 1}};
  costs.send_overhead = 0.2;
  costs.comm_latency = 0.5;
  const Planned planned = MustPlan("zb-v", 2, 2, 6, costs);
  const pp::v1::StepTrace trace = TraceOf(planned, 0.001);
  absl::StatusOr<CostModel> fitted = CostsFromTrace(planned.schedule, trace);
  ASSERT_TRUE(fitted.ok()) << fitted.status();
  ASSERT_EQ(fitted->stage_costs.size(), 4u);
  for (size_t s = 0; s < 4; ++s) {
    SCOPED_TRACE(s);
    EXPECT_NEAR(fitted->stage_costs[s].forward, 0.001 * costs.stage_costs[s].forward, 1e-12);
    EXPECT_NEAR(fitted->stage_costs[s].backward_input,
                0.001 * costs.stage_costs[s].backward_input, 1e-12);
    EXPECT_NEAR(fitted->stage_costs[s].backward_weight,
                0.001 * costs.stage_costs[s].backward_weight, 1e-12);
  }
  EXPECT_NEAR(fitted->send_overhead, 0.0002, 1e-12);
  EXPECT_NEAR(fitted->comm_latency, 0.0005, 1e-12);
  EXPECT_NEAR(Resimulated(planned, trace), planned.simulation.bubble_fraction, 1e-9);
}

// Trial steps (calibrated.h): three traced steps of one plan, each with its own tail after the
// last action; the medians come back, and bad input is refused.
TEST(FitStepOverheadsTest, MediansOfSendsLatencyTailAndSpan) {
  CostModel costs;
  costs.send_overhead = 0.2;
  costs.comm_latency = 0.5;
  const Planned planned = MustPlan("1f1b", 3, 1, 6, costs);
  const pp::v1::StepTrace trace = TraceOf(planned, 0.001);
  const double span = 0.001 * planned.simulation.makespan;
  absl::StatusOr<pp::v1::StepOverheads> fitted =
      FitStepOverheads({trace, trace, trace}, {span + 0.010, span + 0.030, span + 0.020});
  ASSERT_TRUE(fitted.ok()) << fitted.status();
  EXPECT_NEAR(fitted->send_seconds(), 0.0002, 1e-12);
  EXPECT_NEAR(fitted->latency_seconds(), 0.0005, 1e-12);
  EXPECT_NEAR(fitted->tail_seconds(), 0.020, 1e-12);
  EXPECT_NEAR(fitted->span_seconds(), span, 1e-12);
  EXPECT_EQ(fitted->steps(), 3);

  EXPECT_EQ(FitStepOverheads({}, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FitStepOverheads({trace}, {1, 2}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FitStepOverheads({pp::v1::StepTrace()}, {1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FitStepOverheads({trace}, {std::nan("")}).status().code(),
            absl::StatusCode::kInvalidArgument);
  pp::v1::StepTrace bad = trace;
  bad.mutable_ranks(0)->mutable_actions(0)->set_end(-1);
  EXPECT_EQ(FitStepOverheads({bad}, {1}).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pp::plan
