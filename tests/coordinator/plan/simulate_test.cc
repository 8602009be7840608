#include "coordinator/plan/simulate.h"

#include <algorithm>

#include "coordinator/plan/validate.h"
#include "gtest/gtest.h"
#include "program/lower.h"
#include "program/schedules.h"
#include "tests/coordinator/plan/plan_test_util.h"

namespace pp::plan {
namespace {

// bubble = idle / (D * makespan) must equal num / den exactly: idle * den == num * D * makespan.
void ExpectBubble(const Planned& planned, long num, long den, const std::string& what) {
  const long D = planned.schedule.pipeline;
  const long makespan = Exact(planned.simulation.makespan);
  EXPECT_EQ(TotalIdle(planned) * den, num * D * makespan)
      << what << ": makespan " << makespan << ", idle " << TotalIdle(planned) << ", want bubble "
      << num << "/" << den;
}

TEST(SimulateTest, GpipeAnd1f1bBubbleIsDMinus1OverMPlusDMinus1) {
  for (int D = 1; D <= 8; ++D) {
    for (int M = 1; M <= 32; ++M) {
      for (const char* name : {"gpipe", "1f1b"}) {
        const Planned planned = MustPlan(name, D, 1, M);
        ExpectBubble(planned, D - 1, M + D - 1, absl::StrCat(name, " D=", D, " M=", M));
        EXPECT_EQ(Exact(planned.simulation.makespan), 3 * (M + D - 1));
      }
    }
  }
}

TEST(SimulateTest, InterleavedBubbleIsDMinus1OverVMPlusDMinus1WhenDDividesM) {
  for (int D = 1; D <= 8; ++D) {
    for (int V = 2; V <= 4; ++V) {
      for (int M = D; M <= 32; M += D) {
        const Planned planned = MustPlan("interleaved-1f1b", D, V, M);
        ExpectBubble(planned, D - 1, V * M + D - 1,
                     absl::StrCat("interleaved D=", D, " V=", V, " M=", M));
      }
    }
  }
}

TEST(SimulateTest, ZbH1MakespanIsOneThirdOf1f1bIdle) {
  // Qi et al. 2023, table 1: ZB-H1's bubble is (D-1)(T_F + T_I - T_W); with I = b - w that is
  // M(f+b) + (D-1)(f+b-2w) for the whole step.
  const long f = 1, b = 2, w = 1;
  for (int D = 1; D <= 8; ++D) {
    for (int M = D; M <= 32; ++M) {
      const Planned planned = MustPlan("zb-h1", D, 1, M);
      EXPECT_EQ(Exact(planned.simulation.makespan), M * (f + b) + (D - 1) * (f + b - 2 * w))
          << "D=" << D << " M=" << M;
      // Idle per rank is (D-1)(f+b-2w) = D-1, a third of 1F1B's (D-1)(f+b).
      const Planned one_f_one_b = MustPlan("1f1b", D, 1, M);
      EXPECT_EQ(3 * TotalIdle(planned), TotalIdle(one_f_one_b)) << "D=" << D << " M=" << M;
    }
  }
}

TEST(SimulateTest, ZbvPinnedFigures) {
  // ZB-V with f=1, b=2 split into I=W=1 per chunk. Every rank has 2M chunk-microbatches of
  // work, 3 units each: busy = 6M. Rank D-1 cannot start before the first forward has crossed
  // D-1 ranks, so makespan >= 6M + D - 1. The generator reaches that bound when M = D and when
  // M >= 3D/2, i.e. a bubble of (D-1)/(6M+D-1): a sixth of 1F1B's (D-1)/(M+D-1) with the same
  // total work (1F1B stages are two chunks: f=2, b=4). For D < M < 3D/2 the 2D live-activation
  // cap (1F1B's memory) holds forwards back and the list schedule ends D - 2(M-D) units later.
  for (int D = 1; D <= 8; ++D) {
    for (int M = D; M <= 32; ++M) {
      const Planned planned = MustPlan("zb-v", D, 2, M);
      const long extra = M > D ? std::max(0, D - 2 * (M - D)) : 0;
      const long makespan = 6L * M + D - 1 + extra;
      EXPECT_EQ(Exact(planned.simulation.makespan), makespan) << "D=" << D << " M=" << M;
      for (const RankStats& rank : planned.simulation.ranks) EXPECT_EQ(Exact(rank.busy), 6 * M);
      if (extra == 0) ExpectBubble(planned, D - 1, 6L * M + D - 1, absl::StrCat("zb-v D=", D));
      // 1F1B's memory: 2D chunk activations = D full-stage activations, on every rank.
      for (const RankStats& rank : planned.simulation.ranks) EXPECT_LE(rank.peak_live, 2 * D);
      EXPECT_EQ(planned.simulation.ranks[0].peak_live, 2 * D) << "D=" << D << " M=" << M;
    }
  }
}

TEST(SimulateTest, CommLatencyDelaysEveryCrossRankEdge) {
  // 1F1B, D=2, M=1: F0 on rank 0, F0 on rank 1, B0 on rank 1, B0 on rank 0, with one message
  // each way: makespan = 2f + 2b + 2 * latency.
  CostModel costs;
  costs.comm_latency = 5;
  costs.comm_bandwidth = 100;
  costs.activation_bytes = 200;  // +2 per message
  const Planned planned = MustPlan("1f1b", 2, 1, 1, costs);
  EXPECT_EQ(planned.simulation.makespan, 2 * 1 + 2 * 2 + 2 * (5 + 2));
  EXPECT_EQ(planned.simulation.ranks[0].peak_bytes, 200);
}

// A SEND keeps its rank busy for send_overhead and the message leaves at its end: on the same
// 1F1B D=2 M=1 both messages arrive 0.5 later, and the send time is idle, not compute.
TEST(SimulateTest, SendOverheadDelaysTheMessageAndCountsAsIdle) {
  CostModel costs;
  costs.send_overhead = 0.5;
  const Planned planned = MustPlan("1f1b", 2, 1, 1, costs);
  EXPECT_EQ(planned.simulation.makespan, 2 * 1 + 2 * 2 + 2 * 0.5);
  EXPECT_EQ(planned.simulation.ranks[0].busy, 3);
  EXPECT_EQ(planned.simulation.ranks[1].busy, 3);
  EXPECT_EQ(planned.simulation.bubble_fraction, 1 - 6.0 / (2 * 7));
}

TEST(SimulateTest, StageScaleAndSplitCosts) {
  CostModel costs;
  costs.forward = 2;
  costs.backward = 4;
  costs.backward_weight = 1;  // so I = 3
  costs.stage_scale = {1, 2};
  // zb-h1, D=2, M=1: F0 2, F1 4, I1 6, I0 3, then W0 (1) on rank 0 -> 2+4+6+3+1 = 16.
  const Planned planned = MustPlan("zb-h1", 2, 1, 1, costs);
  EXPECT_EQ(planned.simulation.makespan, 16);
  EXPECT_EQ(planned.simulation.ranks[1].busy, 4 + 6 + 2);

  absl::StatusOr<std::vector<StageCosts>> resolved = ResolveCosts(costs, 2);
  ASSERT_TRUE(resolved.ok());
  EXPECT_EQ((*resolved)[1].backward_input, 6);
}

TEST(SimulateTest, RejectsBadCosts) {
  CostModel negative;
  negative.forward = -1;
  EXPECT_FALSE(Plan("1f1b", 2, 1, 2, negative).ok());
  CostModel wrong_scale;
  wrong_scale.stage_scale = {1, 1, 1};
  absl::StatusOr<Planned> planned = Plan("1f1b", 2, 1, 2, wrong_scale);
  ASSERT_FALSE(planned.ok());
  EXPECT_NE(planned.status().message().find("stage_scale has 3 entries"), std::string::npos);
  CostModel too_big_w;
  too_big_w.backward_weight = 3;  // larger than b = 2
  EXPECT_FALSE(Plan("zb-h1", 2, 1, 2, too_big_w).ok());
}

// Plan runs one execution for validation and simulation; it must give exactly what Validate and
// Simulate give on their own, times included.
TEST(ValidateAndSimulateTest, SameFiguresAsValidateThenSimulate) {
  CostModel costs;
  costs.forward = 1.5;
  costs.backward = 2.25;
  costs.comm_latency = 0.3;
  costs.send_overhead = 0.1;
  ForEachSmallSchedule([&](const std::string& what, int, const prog::Schedule& schedule) {
    ASSERT_TRUE(Validate(schedule).ok()) << what;
    absl::StatusOr<Simulation> alone = Simulate(schedule, costs);
    absl::StatusOr<Simulation> shared = ValidateAndSimulate(schedule, costs);
    ASSERT_TRUE(alone.ok()) << what << ": " << alone.status();
    ASSERT_TRUE(shared.ok()) << what << ": " << shared.status();
    EXPECT_EQ(shared->makespan, alone->makespan) << what;
    EXPECT_EQ(shared->bubble_fraction, alone->bubble_fraction) << what;
    EXPECT_EQ(shared->end, alone->end) << what;
    ASSERT_EQ(shared->ranks.size(), alone->ranks.size()) << what;
    for (size_t r = 0; r < alone->ranks.size(); ++r) {
      EXPECT_EQ(shared->ranks[r].busy, alone->ranks[r].busy) << what << " rank " << r;
      EXPECT_EQ(shared->ranks[r].idle, alone->ranks[r].idle) << what << " rank " << r;
      EXPECT_EQ(shared->ranks[r].peak_live, alone->ranks[r].peak_live) << what;
    }
  });
}

// Errors come in Validate's order, then Simulate's: a deadlock before bad costs.
TEST(ValidateAndSimulateTest, ReportsTheErrorValidateOrSimulateWould) {
  prog::Schedule deadlocked = Lowered("1f1b", 2, 1, 2);
  // Rank 0 waits for microbatch 0's gradient before sending microbatch 0's activation.
  std::vector<prog::Action>& rank0 = deadlocked.programs[0];
  std::rotate(rank0.begin() + 1, rank0.begin() + 4, rank0.begin() + 6);
  const absl::Status deadlock = Validate(deadlocked);
  ASSERT_NE(deadlock.message().find("deadlock: rank 0 waits forever"), std::string::npos)
      << deadlock;
  CostModel negative;
  negative.forward = -1;
  EXPECT_EQ(ValidateAndSimulate(deadlocked, UnitCosts()).status(), deadlock);
  EXPECT_EQ(ValidateAndSimulate(deadlocked, negative).status(), deadlock);

  const prog::Schedule fine = Lowered("1f1b", 2, 1, 2);
  const absl::Status bad_costs = Simulate(fine, negative).status();
  EXPECT_EQ(bad_costs.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateAndSimulate(fine, negative).status(), bad_costs);
}

// Each cost is finite but their sum is not: an error, not a deadlock nor an infinite makespan.
TEST(ValidateAndSimulateTest, RejectsCostsWhoseSumOverflows) {
  CostModel huge;
  huge.forward = 1e308;
  const prog::Schedule schedule = Lowered("1f1b", 2, 1, 2);
  for (const absl::Status& status :
       {Simulate(schedule, huge).status(), ValidateAndSimulate(schedule, huge).status()}) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("costs too large"), std::string::npos) << status;
  }
}

}  // namespace
}  // namespace pp::plan
