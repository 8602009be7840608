// Activation recomputation in the planner: the simulator's time (an F again before each B or I)
// and memory (a held microbatch's undropped share), a job's shares, the auto-planner's knob and
// the choice recompute "auto" makes.
#include "coordinator/plan/recompute.h"

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "coordinator/plan/plan.h"
#include "gtest/gtest.h"
#include "tests/coordinator/plan/plan_test_util.h"

namespace pp::plan {
namespace {

CostModel Recomputing(double forward_share, double dropped) {
  CostModel costs;
  costs.recompute_forward = forward_share, costs.recompute_dropped = dropped;
  costs.activation_bytes = 100;
  return costs;
}

// Full recomputation is a B of b + f: every rank's timeline is that of the plain schedule with
// the longer backward, for the fused and the split backward alike.
TEST(RecomputeSimulation, AnotherForwardBeforeEachBackward) {
  for (const char* name : {"gpipe", "1f1b", "zb-h1"}) {
    for (int D : {2, 4}) {
      CostModel longer;
      longer.backward = 3;
      longer.backward_input = 2;  // I + f; W stays 1
      longer.backward_weight = 1;
      const Planned again = MustPlan(name, D, 1, 8, Recomputing(1, 0));
      const Planned plain = MustPlan(name, D, 1, 8, longer);
      EXPECT_EQ(again.simulation.makespan, plain.simulation.makespan) << name << " D=" << D;
      for (int r = 0; r < D; ++r) {
        EXPECT_EQ(again.simulation.ranks[r].busy, plain.simulation.ranks[r].busy) << name;
      }
    }
  }
  // 1F1B D=2 M=2 with f=1, b=2 and half of F again (B = 2.5): rank 0 runs F0 [0,1], F1 [1,2];
  // rank 1 F0 [1,2], B0 [2,4.5], F1 [4.5,5.5], B1 [5.5,8]; rank 0 B0 [4.5,7], B1 [8,10.5].
  EXPECT_EQ(MustPlan("1f1b", 2, 1, 2, Recomputing(0.5, 0)).simulation.makespan, 10.5);
}

// Peak bytes on rank 0 with a quarter of each activation held (dropped 0.75), 100 bytes whole:
// 1F1B D=4 holds the 3 earlier microbatches at 25 and the 4th whole in its forward (175), and
// the first B rebuilds its own (4 x 25 + 75 = 175); GPipe M=8 holds 7 x 25 + 100 = 275.
TEST(RecomputeSimulation, HeldMicrobatchesKeepTheUndroppedShare) {
  const Planned onef = MustPlan("1f1b", 4, 1, 8, Recomputing(1, 0.75));
  EXPECT_EQ(onef.simulation.ranks[0].peak_live, 4);
  EXPECT_EQ(onef.simulation.ranks[0].peak_bytes, 175);
  EXPECT_EQ(onef.simulation.ranks[0].peak_units, 1.75);
  EXPECT_EQ(onef.simulation.ranks[3].peak_bytes, 100);  // the last rank holds one at a time
  EXPECT_EQ(MustPlan("gpipe", 4, 1, 8, Recomputing(1, 0.75)).simulation.ranks[0].peak_bytes, 275);
  // Without recomputation the peak is peak_live whole activations.
  const Planned plain = MustPlan("gpipe", 4, 1, 8, Recomputing(0, 0));
  EXPECT_EQ(plain.simulation.ranks[0].peak_bytes, 800);
  // A split backward rebuilds the activation at I and holds it whole until W: zb-h1 never holds
  // less than 1F1B's rebuilt microbatch, and less than without recomputation.
  const Planned zb = MustPlan("zb-h1", 4, 1, 8, Recomputing(1, 0.75));
  const Planned zb_plain = MustPlan("zb-h1", 4, 1, 8, Recomputing(0, 0));
  EXPECT_LT(zb.simulation.ranks[0].peak_bytes, zb_plain.simulation.ranks[0].peak_bytes);
  EXPECT_GE(zb.simulation.ranks[0].peak_bytes, 175);
}

TEST(RecomputeSimulation, SharesOutsideZeroToOneAreRefused) {
  for (double bad : {-0.1, 1.5}) {
    EXPECT_EQ(Plan("1f1b", 2, 1, 2, Recomputing(bad, 0)).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(Plan("1f1b", 2, 1, 2, Recomputing(0, bad)).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

pp::v1::JobSpec Spec(const std::string& recompute, int pipeline = 2) {
  pp::v1::JobSpec spec;
  pp::v1::ModelSpec* m = spec.mutable_model();
  m->set_vocab_size(256), m->set_seq_len(64), m->set_d_model(64), m->set_n_heads(4);
  m->set_n_layers(4);
  spec.mutable_parallel()->set_pipeline(pipeline);
  spec.mutable_parallel()->set_chunks(1);
  spec.mutable_parallel()->set_schedule("1f1b");
  spec.mutable_parallel()->set_recompute(recompute);
  spec.mutable_train()->set_steps(2);
  spec.mutable_train()->set_microbatches(4);
  spec.mutable_train()->set_microbatch_size(2);
  return spec;
}

double Sum(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), 0.0); }

TEST(RecomputeShares, FromTheModelAndTheMemoryModel) {
  const std::vector<int> units = {3, 3};
  const std::vector<int64_t> none = *HeldBytesPerMicrobatch(Spec("none"), units);
  EXPECT_EQ(RecomputeSharesOf(Spec("none"), units)->forward, 0);
  EXPECT_EQ(RecomputeSharesOf(Spec("none"), units)->dropped, 0);
  const RecomputeShares full = *RecomputeSharesOf(Spec("full"), units);
  EXPECT_EQ(full.forward, 1);
  EXPECT_DOUBLE_EQ(full.dropped, 1 - Sum(*HeldBytesPerMicrobatch(Spec("full"), units)) / Sum(none));
  const RecomputeShares selective = *RecomputeSharesOf(Spec("selective"), units);
  const std::vector<double> costs = UnitCosts(Spec("none").model());
  // 4 blocks x 4TC = 4 x 4 x 64 x 64 per token, over every unit's forward.
  EXPECT_DOUBLE_EQ(selective.forward,
                   4 * 4 * 64.0 * 64 / std::accumulate(costs.begin(), costs.end(), 0.0));
  // Selective drops the attention stats, B x NH x T x 2 floats a block: 2 x 4 x 64 x 2 x 4 bytes.
  EXPECT_NEAR(selective.dropped, 4 * (2 * 4 * 64 * 2 * 4.0) / Sum(none), 1e-15);
  EXPECT_LT(selective.dropped, full.dropped);
  EXPECT_GT(selective.dropped, 0);
  EXPECT_EQ(RecomputeSharesOf(Spec("auto"), units).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// "auto" takes the first mode whose estimate fits: the budget decides. Microbatches of 16
// sequences put every rank's peak in its activations (not the checkpoint's copies), so the few
// bytes selective drops show.
TEST(ChooseRecomputeTest, TheLeastRecomputationThatFits) {
  pp::v1::JobSpec spec = Spec("auto");
  spec.mutable_train()->set_microbatch_size(16);
  const std::vector<int> units = {3, 3};
  const pp::v1::Schedule schedule =
      *PlanSchedule("1f1b", 2, 1, 4, pp::v1::CostModel());
  auto peak = [&](const char* mode) {
    pp::v1::JobSpec s = spec;
    s.mutable_parallel()->set_recompute(mode);
    int64_t most = 0;
    for (const RankMemory& r : *EstimateMemory(s, units, schedule)) {
      most = std::max(most, r.bytes.total);
    }
    return most;
  };
  const int64_t none = peak("none"), selective = peak("selective"), full = peak("full");
  ASSERT_GT(none, selective);
  ASSERT_GT(selective, full);
  auto budget = [](int64_t bytes) -> MemoryFits {
    return [bytes](const std::vector<RankMemory>& memory) {
      for (const RankMemory& r : memory) {
        if (r.bytes.total > bytes) return absl::FailedPreconditionError("too big");
      }
      return absl::OkStatus();
    };
  };
  EXPECT_EQ(ChooseRecompute(spec, units, schedule, budget(none))->mode, "none");
  const RecomputeChoice middle = *ChooseRecompute(spec, units, schedule, budget(none - 1));
  EXPECT_EQ(middle.mode, "selective");
  EXPECT_NE(middle.reason.find("none does not fit"), std::string::npos) << middle.reason;
  EXPECT_NE(middle.reason.find("selective fits"), std::string::npos) << middle.reason;
  EXPECT_EQ(ChooseRecompute(spec, units, schedule, budget(full))->mode, "full");
  const absl::StatusOr<RecomputeChoice> nothing =
      ChooseRecompute(spec, units, schedule, budget(full - 1));
  EXPECT_EQ(nothing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(nothing.status().message().find("tried none, selective and full"), std::string::npos);
}

// The auto-planner tries the modes only under a budget, and says what recomputation bought.
TEST(AutoPlanRecompute, ABudgetOnlyRecomputationMeets) {
  AutoPlanRequest request;
  request.pipeline = 4;
  request.min_microbatches = request.max_microbatches = 8;
  request.schedules = {"1f1b"};
  request.recompute = {{"full", 1, 0.75}};
  absl::StatusOr<AutoPlan> free = ChooseSchedule(request);
  ASSERT_TRUE(free.ok()) << free.status();
  ASSERT_EQ(free->candidates.size(), 1u);  // no budget: none only
  request.memory_budget = 2;  // 1F1B holds 4 on rank 0; with full recomputation 1.75
  absl::StatusOr<AutoPlan> plan = ChooseSchedule(request);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->candidates.size(), 2u);
  EXPECT_FALSE(plan->candidates[0].fits);
  const Candidate& chosen = plan->candidates.at(plan->chosen);
  EXPECT_EQ(chosen.recompute, "full");
  EXPECT_EQ(chosen.memory, 1.75);
  EXPECT_NE(plan->reason.find("because no candidate fits the budget without recomputation"),
            std::string::npos)
      << plan->reason;
  EXPECT_NE(DescribeAutoPlan(*plan).find("recompute"), std::string::npos);
  // A budget plain 1F1B meets: recomputation only costs time, so it is not chosen.
  request.memory_budget = 4;
  EXPECT_EQ(ChooseSchedule(request)->candidates.at(ChooseSchedule(request)->chosen).recompute,
            "none");
  request.costs.recompute_forward = 1;  // recomputation belongs in the options
  EXPECT_EQ(ChooseSchedule(request).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pp::plan
