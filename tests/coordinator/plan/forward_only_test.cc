// The forward-only schedule evaluation runs: F of every stage and microbatch on any training
// layout, nothing else, validated and simulated like the training schedules.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/plan/plan.h"
#include "coordinator/plan/validate.h"
#include "gtest/gtest.h"
#include "program/lower.h"
#include "tests/coordinator/plan/plan_test_util.h"

namespace pp::plan {
namespace {

struct Layout {
  const char* name;
  int V;
  std::vector<int> stage_to_rank;
};

// The layouts of every training schedule at D ranks.
std::vector<Layout> TrainingLayouts(int D) {
  return {{"looped V=1", 1, prog::LoopedStageToRank(D, 1)},
          {"looped V=2", 2, prog::LoopedStageToRank(D, 2)},
          {"looped V=3", 3, prog::LoopedStageToRank(D, 3)},
          {"v-shape", 2, prog::VShapeStageToRank(D)}};
}

TEST(ForwardOnlyTest, EveryLayoutRunsEachForwardOnceAndNothingElse) {
  for (int D = 1; D <= 5; ++D) {
    for (const Layout& layout : TrainingLayouts(D)) {
      for (int M = 1; M <= 9; ++M) {
        const std::string what = absl::StrCat(layout.name, " D=", D, " M=", M);
        const prog::Schedule compute = prog::ForwardOnly(layout.stage_to_rank, D, layout.V, M);
        EXPECT_EQ(compute.name, "forward-only");
        EXPECT_FALSE(compute.trains());
        EXPECT_EQ(compute.stage_to_rank, layout.stage_to_rank);
        absl::StatusOr<prog::Schedule> lowered = prog::LowerComms(compute);
        ASSERT_TRUE(lowered.ok()) << what << ": " << lowered.status();
        ASSERT_TRUE(Validate(*lowered).ok()) << what << ": " << Validate(*lowered);
        std::vector<int> forwards(static_cast<size_t>(D * layout.V * M), 0);
        for (int r = 0; r < D; ++r) {
          for (const prog::Action& a : lowered->programs[r]) {
            ASSERT_TRUE(a.kind == prog::Kind::kForward || a.kind == prog::Kind::kSendActivation ||
                        a.kind == prog::Kind::kRecvActivation)
                << what << ": " << prog::Describe(a);
            if (a.kind != prog::Kind::kForward) continue;
            EXPECT_EQ(layout.stage_to_rank[a.stage], r) << what;
            ++forwards[static_cast<size_t>(a.stage * M + a.microbatch)];
          }
        }
        EXPECT_EQ(forwards, std::vector<int>(forwards.size(), 1)) << what;
        absl::StatusOr<Simulation> sim = ValidateAndSimulate(*lowered, UnitCosts());
        ASSERT_TRUE(sim.ok()) << what << ": " << sim.status();
        for (const RankStats& rank : sim->ranks) {
          EXPECT_EQ(rank.peak_live, 0) << what << ": a forward-only F keeps nothing";
          EXPECT_EQ(Exact(rank.busy), layout.V * M) << what;
        }
      }
    }
  }
}

// One chunk per rank: GPipe's forward half, the forwards streaming down the ranks. With f = 1
// the step takes M + D - 1 and the bubble is (D-1)/(M+D-1).
TEST(ForwardOnlyTest, OneChunkIsGpipesForwardHalf) {
  for (int D = 1; D <= 8; ++D) {
    for (int M = 1; M <= 16; ++M) {
      const Planned planned = MustPlan("forward-only", D, 1, M);
      EXPECT_EQ(Exact(planned.simulation.makespan), M + D - 1) << "D=" << D << " M=" << M;
      EXPECT_DOUBLE_EQ(planned.simulation.bubble_fraction,
                       static_cast<double>(D - 1) / (M + D - 1));
    }
  }
}

TEST(ForwardOnlyTest, TheTableDrawsItButNoJobTrainsWithIt) {
  const prog::ScheduleKind* kind = prog::FindSchedule("forward-only");
  ASSERT_NE(kind, nullptr);
  EXPECT_FALSE(kind->trains);
  EXPECT_EQ(prog::DefaultChunks("forward-only"), 1);
  EXPECT_EQ(prog::ChunkChoices(*kind, 3), (std::vector<int>{1, 2, 3}));
  const std::vector<std::string>& training = prog::TrainingScheduleNames();
  EXPECT_EQ(training,
            (std::vector<std::string>{"gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-h2",
                                      "zb-v", "v-half", "v-min", "dualpipe-v"}));
  absl::StatusOr<pp::v1::Schedule> plan = PlanSchedule("forward-only", 3, 2, 4, {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->stage_to_rank_size(), 6);
  for (const pp::v1::RankSimulation& rank : plan->simulation().ranks()) {
    EXPECT_EQ(rank.peak_live_activations(), 0);
  }
}

TEST(ForwardOnlyTest, ValidatorRefusesABackwardInItAndTrainingSchedulesWithoutOne) {
  prog::Schedule forward = prog::ForwardOnly(prog::LoopedStageToRank(1, 1), 1, 1, 2);
  forward.programs[0].push_back({prog::Kind::kBackward, 0, 1});
  EXPECT_EQ(Validate(forward).message(),
            "stage 0 microbatch 1 (rank 0) has a backward in a forward-only schedule");
  prog::Schedule training = prog::ForwardOnly(prog::LoopedStageToRank(1, 1), 1, 1, 2);
  training.name = "gpipe";
  EXPECT_EQ(Validate(training).message(),
            "stage 0 microbatch 0 (rank 0) has no BACKWARD (nor BACKWARD_INPUT and "
            "BACKWARD_WEIGHT)");
}

}  // namespace
}  // namespace pp::plan
