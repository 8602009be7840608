// Per-microbatch costs (CostModel.microbatch_weight, packed variable-length microbatches): the
// simulator scales microbatch j's computes and message bytes by w_j, all 1 changes nothing, and
// the auto-planner passes the first M weights to a candidate of M microbatches.
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/plan/auto_plan.h"
#include "coordinator/plan/packed.h"
#include "coordinator/plan/simulate.h"
#include "gtest/gtest.h"
#include "tests/coordinator/plan/plan_test_util.h"

namespace pp::plan {
namespace {

// Every figure the same, bit for bit.
void ExpectSameSimulation(const Simulation& a, const Simulation& b, const std::string& what) {
  EXPECT_EQ(a.makespan, b.makespan) << what;
  EXPECT_EQ(a.bubble_fraction, b.bubble_fraction) << what;
  EXPECT_EQ(a.end, b.end) << what;
  ASSERT_EQ(a.ranks.size(), b.ranks.size()) << what;
  for (size_t r = 0; r < a.ranks.size(); ++r) {
    EXPECT_EQ(a.ranks[r].busy, b.ranks[r].busy) << what << " rank " << r;
    EXPECT_EQ(a.ranks[r].idle, b.ranks[r].idle) << what << " rank " << r;
    EXPECT_EQ(a.ranks[r].peak_bytes, b.ranks[r].peak_bytes) << what << " rank " << r;
  }
}

Simulation MustSimulate(const prog::Schedule& schedule, const CostModel& costs) {
  absl::StatusOr<Simulation> sim = Simulate(schedule, costs);
  EXPECT_TRUE(sim.ok()) << sim.status();
  return sim.ok() ? *std::move(sim) : Simulation{};
}

// Costs that touch every term: split backward, recomputation, latency, bandwidth, send overhead.
CostModel EveryTerm() {
  CostModel costs;
  costs.forward = 1.3, costs.backward = 2.7, costs.backward_weight = 1.1;
  costs.comm_latency = 0.3, costs.comm_bandwidth = 7, costs.activation_bytes = 5;
  costs.send_overhead = 0.05, costs.recompute_forward = 0.4, costs.recompute_dropped = 0.5;
  return costs;
}

TEST(WeightedSimulateTest, AllOnesIsTheUnweightedResultBitForBit) {
  ForEachSmallSchedule([](const std::string& what, int D, const prog::Schedule& schedule) {
    CostModel weighted = EveryTerm();
    weighted.microbatch_weight.assign(schedule.microbatches, 1.0);
    ExpectSameSimulation(MustSimulate(schedule, weighted), MustSimulate(schedule, EveryTerm()),
                         what);
    // The shared-processor run too: every rank on one core.
    CostModel shared = EveryTerm();
    shared.rank_host.assign(D, 0), shared.host_cores = {1};
    CostModel shared_weighted = shared;
    shared_weighted.microbatch_weight = weighted.microbatch_weight;
    ExpectSameSimulation(MustSimulate(schedule, shared_weighted), MustSimulate(schedule, shared),
                         what + " shared");
  });
}

// One stage: the microbatches run back to back, so doubling one adds exactly its f + b.
TEST(WeightedSimulateTest, OneStageGpipeGrowsByOneMicrobatch) {
  const prog::Schedule schedule = Lowered("gpipe", 1, 1, 4);
  CostModel costs;
  costs.microbatch_weight = {1, 2, 1, 1};
  const Simulation sim = MustSimulate(schedule, costs);
  EXPECT_EQ(sim.makespan, MustSimulate(schedule, CostModel{}).makespan + 3);
  EXPECT_EQ(sim.makespan, 15);
  EXPECT_EQ(sim.ranks[0].busy, 15);
  EXPECT_EQ(sim.bubble_fraction, 0);
}

// 1F1B, D=2, M=4, f=1 b=2, microbatch 0 twice as long (F0 = 2, B0 = 4) and free comms:
//   rank 0: F0 0-2, F1 2-3, (waits) B0 8-12, F2 12-13, B1 13-15, F3 15-16, B2 16-18, (waits)
//           B3 19-21
//   rank 1: (waits) F0 2-4, B0 4-8, F1 8-9, B1 9-11, (waits) F2 13-14, B2 14-16, F3 16-17,
//           B3 17-19
// Each rank is busy 3 x (2 + 1 + 1 + 1) = 15 of 21: bubble 1 - 30 / 42 = 2/7 (uniform: 1/5).
TEST(WeightedSimulateTest, TwoStage1f1bWithOneLongMicrobatch) {
  CostModel costs;
  costs.microbatch_weight = {2, 1, 1, 1};
  const Planned planned = MustPlan("1f1b", 2, 1, 4, costs);
  const Simulation& sim = planned.simulation;
  EXPECT_EQ(sim.makespan, 21);
  for (const RankStats& rank : sim.ranks) EXPECT_EQ(rank.busy, 15);
  EXPECT_EQ(TotalIdle(planned) * 7, 2 * 2 * 21);  // bubble 2/7, exactly
  EXPECT_DOUBLE_EQ(sim.bubble_fraction, 2.0 / 7);
  EXPECT_DOUBLE_EQ(MustPlan("1f1b", 2, 1, 4).simulation.bubble_fraction, 1.0 / 5);
}

// A message carries w_j x activation_bytes; the latency is per message and does not scale.
TEST(WeightedSimulateTest, MessageBytesScaleAndLatencyDoesNot) {
  CostModel costs;
  costs.comm_latency = 1, costs.comm_bandwidth = 1, costs.activation_bytes = 3;
  costs.microbatch_weight = {2};
  // F 0-2 on rank 0, arrives 2 + 1 + 2 x 3 = 9; F 9-11, B 11-15 on rank 1; the gradient arrives
  // at 22; B 22-26 on rank 0.
  EXPECT_EQ(MustPlan("gpipe", 2, 1, 1, costs).simulation.makespan, 26);
  costs.microbatch_weight = {1};  // F 0-1, arrives 5, F 5-6, B 6-8, arrives 12, B 12-14
  EXPECT_EQ(MustPlan("gpipe", 2, 1, 1, costs).simulation.makespan, 14);
}

// On hosts with enough cores the fluid run gives the per-rank figures, weights included.
TEST(WeightedSimulateTest, SharedRunAgreesWithWeights) {
  const prog::Schedule schedule = Lowered("zb-h1", 3, 1, 5);
  CostModel costs = EveryTerm();
  costs.microbatch_weight = {0.5, 1, 0.25, 0.75, 1};
  absl::StatusOr<internal::Durations> durations =
      internal::DurationsOf(costs, schedule.stages(), schedule.microbatches);
  ASSERT_TRUE(durations.ok()) << durations.status();
  CostModel roomy = costs;
  roomy.rank_host = {0, 0, 0}, roomy.host_cores = {3};
  absl::StatusOr<Simulation> fluid = internal::SimulateShared(schedule, roomy, *durations);
  ASSERT_TRUE(fluid.ok()) << fluid.status();
  const Simulation direct = MustSimulate(schedule, costs);
  EXPECT_NEAR(fluid->makespan, direct.makespan, 1e-9);
  EXPECT_LT(direct.makespan, MustSimulate(schedule, EveryTerm()).makespan);
}

TEST(WeightedSimulateTest, RefusesBadWeights) {
  const prog::Schedule schedule = Lowered("1f1b", 2, 1, 3);
  const std::pair<std::vector<double>, std::string> cases[] = {
      {{1, 1}, "microbatch_weight has 2 entries but the schedule has 3 microbatches"},
      {{1, -1, 1}, "microbatch_weight[1] must be a finite number >= 0, got -1"},
      {{1, 1, std::nan("")}, "microbatch_weight[2] must be a finite number >= 0"},
  };
  for (const auto& [weights, message] : cases) {
    CostModel costs;
    costs.microbatch_weight = weights;
    for (const absl::Status& status :
         {Simulate(schedule, costs).status(), ValidateAndSimulate(schedule, costs).status()}) {
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_NE(status.message().find(message), std::string::npos) << status;
    }
  }
}

TEST(PackedWeightsTest, TokensOverTheBudget) {
  EXPECT_EQ(MicrobatchWeights({128, 64, 1, 96}, 128),
            (std::vector<double>{1, 0.5, 1.0 / 128, 0.75}));
  EXPECT_TRUE(MicrobatchWeights({}, 128).empty());
  EXPECT_DOUBLE_EQ(PaddingWaste({128, 64, 32, 32}, 128), 0.5);
  EXPECT_EQ(PaddingWaste({128, 128}, 128), 0);
  EXPECT_EQ(PaddingWaste({}, 128), 0);
}

// A candidate of M microbatches runs the first M weights, on top of the (min M / M) scaling.
TEST(PackedWeightsTest, AutoPlannerPassesTheFirstMWeights) {
  AutoPlanRequest request;
  request.pipeline = 2, request.min_microbatches = 2, request.max_microbatches = 4;
  request.schedules = {"gpipe", "1f1b"};
  request.microbatch_weights = {1, 0.5, 0.25, 2, 7};
  absl::StatusOr<AutoPlan> plan = ChooseSchedule(request);
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (const Candidate& c : plan->candidates) {
    const CostModel costs = CandidateCosts(request, c);
    ASSERT_EQ(costs.microbatch_weight.size(), static_cast<size_t>(c.microbatches));
    for (int j = 0; j < c.microbatches; ++j) {
      EXPECT_EQ(costs.microbatch_weight[j], request.microbatch_weights[j]);
    }
    EXPECT_EQ(c.step, MustPlan(c.schedule, 2, c.chunks, c.microbatches, costs).simulation.makespan);
  }
  // gpipe D=2 M=2 at scale 1: F0 1 on rank 0, then 0.5; rank 1 runs F0 1-2, F1 2-2.5, B0 2.5-4.5,
  // B1 4.5-5.5; rank 0's B0 4.5-6.5 and B1 6.5-7.5.
  int gpipe2 = 0;
  for (const Candidate& c : plan->candidates) {
    if (c.schedule != "gpipe" || c.microbatches != 2) continue;
    EXPECT_EQ(c.step, 7.5);
    ++gpipe2;
  }
  EXPECT_EQ(gpipe2, 1);

  request.microbatch_weights = {1, 1, 1};
  EXPECT_NE(ChooseSchedule(request).status().message().find(
                "microbatch_weights has 3 entries, fewer than the largest M 4"),
            std::string::npos);
  request.microbatch_weights = {1, 1, 1, -2};
  EXPECT_NE(ChooseSchedule(request).status().message().find("got -2"), std::string::npos);
  request.microbatch_weights = {};
  request.costs.microbatch_weight = {1, 1};
  EXPECT_EQ(ChooseSchedule(request).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pp::plan
