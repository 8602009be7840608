#include "coordinator/plan/auto_plan.h"

#include "gtest/gtest.h"

namespace pp::plan {
namespace {

const Candidate& Chosen(const AutoPlan& plan) { return plan.candidates.at(plan.chosen); }

TEST(AutoPlanTest, FreeCommsAndNoBudgetPickTheLeastBubble) {
  AutoPlanRequest request;
  request.pipeline = 4;
  request.min_microbatches = 4;
  request.max_microbatches = 8;
  absl::StatusOr<AutoPlan> plan = ChooseSchedule(request);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_GE(plan->chosen, 0);
  // Everything compared has the same total work, so the shortest step is the smallest bubble.
  for (const Candidate& c : plan->candidates) EXPECT_GE(c.step, Chosen(*plan).step);
  EXPECT_EQ(Chosen(*plan).schedule, "zb-v");
  EXPECT_NE(plan->reason.find("shortest simulated step"), std::string::npos);
  EXPECT_NE(DescribeAutoPlan(*plan).find("<- chosen"), std::string::npos);
}

TEST(AutoPlanTest, MemoryBudgetExcludesGpipe) {
  AutoPlanRequest request;
  request.pipeline = 4;
  request.min_microbatches = 8;
  request.max_microbatches = 8;
  request.schedules = {"gpipe", "1f1b"};
  request.memory_budget = 4;  // 1F1B holds 4 microbatches on rank 0, GPipe 8
  absl::StatusOr<AutoPlan> plan = ChooseSchedule(request);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->candidates.size(), 2u);
  EXPECT_FALSE(plan->candidates[0].fits);
  EXPECT_EQ(plan->candidates[0].memory, 8);
  EXPECT_EQ(Chosen(*plan).schedule, "1f1b");
}

TEST(AutoPlanTest, LatencyMakesManySmallMicrobatchesLose) {
  // Costs are for one microbatch at M=2; M=16 cuts every compute cost by 8 but each of its many
  // messages still pays latency 1.
  AutoPlanRequest request;
  request.pipeline = 2;
  request.min_microbatches = 2;
  request.max_microbatches = 16;
  request.schedules = {"1f1b"};
  request.costs.forward = 8;
  request.costs.backward = 16;
  request.costs.comm_latency = 1;
  absl::StatusOr<AutoPlan> plan = ChooseSchedule(request);
  ASSERT_TRUE(plan.ok());
  EXPECT_LT(Chosen(*plan).microbatches, 16);
  EXPECT_GT(Chosen(*plan).microbatches, 2) << DescribeAutoPlan(*plan);
}

TEST(AutoPlanTest, BadRequestsAndImpossibleBudgets) {
  AutoPlanRequest request;
  request.pipeline = 4;
  request.min_microbatches = 8;
  request.max_microbatches = 4;
  EXPECT_EQ(ChooseSchedule(request).status().code(), absl::StatusCode::kInvalidArgument);
  request.max_microbatches = 8;
  request.schedules = {"nope"};
  EXPECT_FALSE(ChooseSchedule(request).ok());
  request.schedules = {};
  request.costs.forward = -1;
  EXPECT_FALSE(ChooseSchedule(request).ok());
  request.costs.forward = 1;
  request.memory_budget = 0.5;
  absl::StatusOr<AutoPlan> plan = ChooseSchedule(request);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->chosen, -1);
  EXPECT_NE(plan->reason.find("none of the"), std::string::npos);
}

}  // namespace
}  // namespace pp::plan
