#include "coordinator/plan/auto_plan.h"

#include <set>
#include <string>

#include "gtest/gtest.h"
#include "program/schedules.h"

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

// The nine schedules are all candidates (dualpipe-v only where M >= 2D); with a message latency
// zb-h2's extra warm-up forwards hide it best (ppctl plan --auto in docs/planner.md).
TEST(AutoPlanTest, ConsidersEveryTrainingScheduleAndPicksANewOne) {
  AutoPlanRequest request;
  request.pipeline = 2;
  request.min_microbatches = 2;
  request.max_microbatches = 4;
  request.costs.comm_latency = 0.2;
  absl::StatusOr<AutoPlan> plan = ChooseSchedule(request);
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::set<std::string> names;
  for (const Candidate& c : plan->candidates) {
    names.insert(c.schedule);
    if (c.schedule == "dualpipe-v") {
      EXPECT_GE(c.microbatches, 4);
    }
  }
  EXPECT_EQ(names.size(), prog::TrainingScheduleNames().size());
  EXPECT_EQ(Chosen(*plan).schedule, "zb-h2") << DescribeAutoPlan(*plan);
  EXPECT_EQ(Chosen(*plan).microbatches, 4);
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
  request.schedules = {"1f1b", "forward-only"};
  EXPECT_EQ(ChooseSchedule(request).status().message(),
            "schedule 'forward-only' trains nothing (it runs evaluation); the planner compares "
            "gpipe, 1f1b, interleaved-1f1b, zb-h1, zb-h2, zb-v, v-half, v-min, dualpipe-v");
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

MeshPlanRequest EightWorkers() {
  MeshPlanRequest r;
  r.workers = 8;
  r.batch = 32;
  r.n_layers = 8;
  r.n_heads = 8;
  r.costs.forward = 1;  // per sequence, whole model
  r.costs.backward = 2;
  r.costs.activation_bytes = 1000;
  r.costs.boundary_bytes = 100;
  r.costs.weight_bytes = 10000;
  return r;
}

const MeshCandidate& ChosenMesh(const MeshPlan& plan) { return plan.candidates.at(plan.chosen); }

TEST(MeshPlanTest, FreeCommunicationPicksASplitWithoutBubble) {
  absl::StatusOr<MeshPlan> plan = ChooseMesh(EightWorkers());
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_GE(plan->chosen, 0);
  const MeshCandidate& best = ChosenMesh(*plan);
  // 32 sequences x 3 time units over 8 workers, no bubble: DP and TP both reach it; ties go to
  // the smaller TP.
  EXPECT_DOUBLE_EQ(best.step, 32 * 3 / 8.0) << DescribeMeshPlan(*plan);
  EXPECT_EQ(best.dp, 8);
  for (const MeshCandidate& c : plan->candidates) {
    EXPECT_EQ(c.dp * c.pp * c.tp, 8);
    EXPECT_EQ(8 % c.tp, 0);
    EXPECT_GE(c.step, best.step);
  }
  EXPECT_NE(DescribeMeshPlan(*plan).find("<- chosen"), std::string::npos);
  EXPECT_NE(plan->reason.find("dp8 x pp1 x tp1"), std::string::npos) << plan->reason;
}

TEST(MeshPlanTest, MemoryForcesTheModelToBeSplit) {
  MeshPlanRequest r = EightWorkers();
  // Weights, gradients and moments take 40000 bytes unsplit; allow a quarter plus activations.
  r.memory_per_worker = 12000;
  absl::StatusOr<MeshPlan> plan = ChooseMesh(r);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_GE(plan->chosen, 0) << DescribeMeshPlan(*plan);
  EXPECT_GE(ChosenMesh(*plan).pp * ChosenMesh(*plan).tp, 4) << DescribeMeshPlan(*plan);
  EXPECT_LE(ChosenMesh(*plan).memory, 12000);
  for (const MeshCandidate& c : plan->candidates) {
    if (c.pp * c.tp < 4) {
      EXPECT_FALSE(c.fits) << c.dp << " " << c.pp << " " << c.tp;
    }
  }
  EXPECT_NE(plan->reason.find("exceed memory"), std::string::npos);
}

TEST(MeshPlanTest, ExpensiveCollectivesMoveWorkOffTensorAndDataParallelism) {
  MeshPlanRequest r = EightWorkers();
  r.memory_per_worker = 12000;  // the model must be split 4 ways
  r.costs.comm_latency = 0.05;  // each all-reduce step; a pipeline message pays it once
  absl::StatusOr<MeshPlan> plan = ChooseMesh(r);
  ASSERT_TRUE(plan.ok());
  const MeshCandidate& best = ChosenMesh(*plan);
  // TP pays 2(TP-1) latencies for each of 4 all-reduces per block and microbatch: pipelining wins.
  EXPECT_EQ(best.tp, 1) << DescribeMeshPlan(*plan);
  EXPECT_GE(best.pp, 4);
  for (const MeshCandidate& c : plan->candidates) {
    EXPECT_EQ(c.tp > 1, c.tp_comm > 0);
    EXPECT_EQ(c.dp > 1, c.dp_comm > 0);
  }
}

TEST(MeshPlanTest, StageCostsScaleWithTheSplit) {
  MeshPlanRequest r = EightWorkers();
  MeshCandidate c{1, 2, 2, "1f1b", 1, 4};  // 32 sequences in 4 microbatches of 8
  CostModel costs = MeshStageCosts(r, c);
  EXPECT_DOUBLE_EQ(costs.forward, 8.0 / 2 / 2);
  EXPECT_DOUBLE_EQ(costs.backward, 2 * 8.0 / 2 / 2);
  EXPECT_DOUBLE_EQ(costs.activation_bytes, 8 * 100);
  r.costs.comm_bandwidth = 100;
  costs = MeshStageCosts(r, c);
  // 4 blocks per stage, 2 all-reduces each, each of 800 bytes over 2 ranks: 800 / 100.
  EXPECT_DOUBLE_EQ(costs.forward, 2 + 4 * 2 * 8.0);
}

TEST(MeshPlanTest, BadRequestsAndImpossibleMemory) {
  MeshPlanRequest r = EightWorkers();
  r.workers = 0;
  EXPECT_EQ(ChooseMesh(r).status().code(), absl::StatusCode::kInvalidArgument);
  r = EightWorkers();
  r.costs.comm_latency = -1;
  EXPECT_NE(ChooseMesh(r).status().message().find("comm_latency"), std::string::npos);
  r = EightWorkers();
  r.schedules = {"nope"};
  EXPECT_FALSE(ChooseMesh(r).ok());
  r = EightWorkers();
  r.workers = 7, r.batch = 4, r.n_heads = 4, r.n_layers = 4;  // DP 7 or PP 7 or TP 7: none works
  EXPECT_NE(ChooseMesh(r).status().message().find("no split of 7 workers"), std::string::npos);
  r = EightWorkers();
  r.memory_per_worker = 100;
  absl::StatusOr<MeshPlan> plan = ChooseMesh(r);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->chosen, -1);
  EXPECT_NE(plan->reason.find("none of the"), std::string::npos);
}

}  // namespace
}  // namespace pp::plan
