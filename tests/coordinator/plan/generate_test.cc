#include <algorithm>

#include "coordinator/plan/validate.h"
#include "gtest/gtest.h"
#include "program/lower.h"
#include "program/schedules.h"
#include "tests/coordinator/plan/plan_test_util.h"

namespace pp::plan {
namespace {

std::vector<int> ChunkOptions(const std::string& name) {
  if (name == "interleaved-1f1b") return {2, 3, 4};
  if (name == "forward-only") return {1, 2, 3};
  return {prog::DefaultChunks(name)};
}

// Acceptance: every program for D in 1..8, V in 1..4 where allowed, M in 1..32 validates.
TEST(GenerateTest, EveryScheduleValidatesAcrossShapes) {
  int checked = 0, refused = 0;
  for (const std::string& name : prog::ScheduleNames()) {
    for (int D = 1; D <= 8; ++D) {
      for (int V : ChunkOptions(name)) {
        for (int M = 1; M <= 32; ++M) {
          absl::StatusOr<prog::Schedule> compute = prog::Generate(name, D, V, M);
          // Megatron refuses M < D; its order deadlocks when the last group has r = M mod D
          // microbatches with 1 <= r <= D-3 (2 <= r for V = 2).
          const int r = M % D;
          const bool interleaved_refused =
              name == "interleaved-1f1b" && (M < D || (r >= (V == 2 ? 2 : 1) && r <= D - 3));
          if (interleaved_refused || (name == "dualpipe-v" && M < 2 * D)) {
            EXPECT_EQ(compute.status().code(), absl::StatusCode::kInvalidArgument)
                << "D=" << D << " V=" << V << " M=" << M;
            ++refused;
            continue;
          }
          ASSERT_TRUE(compute.ok())
              << name << " D=" << D << " V=" << V << " M=" << M << ": " << compute.status();
          absl::StatusOr<prog::Schedule> lowered = prog::LowerComms(*compute);
          ASSERT_TRUE(lowered.ok()) << lowered.status();
          absl::Status status = Validate(*lowered);
          ASSERT_TRUE(status.ok())
              << name << " D=" << D << " V=" << V << " M=" << M << ": " << status;
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked + refused, 8 * 32 * 14);  // forward-only: V = 1, 2, 3
  EXPECT_GT(checked, 8 * 32 * 12);
}

int PeakOnRankZero(const std::string& name, int D, int V, int M) {
  return MustPlan(name, D, V, M).simulation.ranks[0].peak_live;
}

TEST(GenerateTest, PeakLiveActivationsOnRankZero) {
  for (int D = 1; D <= 8; ++D) {
    for (int M = 1; M <= 32; ++M) {
      EXPECT_EQ(PeakOnRankZero("gpipe", D, 1, M), M) << "D=" << D << " M=" << M;
      EXPECT_EQ(PeakOnRankZero("1f1b", D, 1, M), std::min(D, M)) << "D=" << D << " M=" << M;
      EXPECT_EQ(PeakOnRankZero("zb-h1", D, 1, M), std::min(D, M)) << "D=" << D << " M=" << M;
      for (int V = 2; V <= 4; ++V) {
        if (!prog::Generate("interleaved-1f1b", D, V, M).ok()) continue;  // refused M
        // Megatron's warm-up on rank 0 is 2(D-1) + (V-1)D forwards; the first steady-state
        // forward comes before the first backward frees anything.
        const int warmup = std::min(2 * (D - 1) + (V - 1) * D, V * M);
        EXPECT_EQ(PeakOnRankZero("interleaved-1f1b", D, V, M), std::min(warmup + 1, V * M))
            << "D=" << D << " V=" << V << " M=" << M;
      }
    }
  }
}

TEST(GenerateTest, InterleavedFollowsMegatronGroupsWhenDDoesNotDivideM) {
  // D=2, V=2, M=3: groups of D=2 microbatches: {0,1} then the remainder {2}. Rank 1's warm-up is
  // (V-1)*D = 2 forwards; the forward order is table order (mb, chunk):
  // (0,a) (1,a) (0,b) (1,b) (2,a) (2,b).
  absl::StatusOr<prog::Schedule> schedule = prog::Generate("interleaved-1f1b", 2, 2, 3);
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  std::vector<std::pair<int, int>> forwards;  // (stage, microbatch) on rank 1
  for (const prog::Action& a : schedule->programs[1]) {
    if (a.kind == prog::Kind::kForward) forwards.push_back({a.stage, a.microbatch});
  }
  const std::vector<std::pair<int, int>> want = {{1, 0}, {1, 1}, {3, 0}, {3, 1}, {1, 2}, {3, 2}};
  EXPECT_EQ(forwards, want);
  // Backwards reverse the chunk: the first backward on rank 1 is the last chunk's (stage 3).
  const auto first_backward =
      std::find_if(schedule->programs[1].begin(), schedule->programs[1].end(),
                   [](const prog::Action& a) { return a.kind == prog::Kind::kBackward; });
  ASSERT_NE(first_backward, schedule->programs[1].end());
  EXPECT_EQ(first_backward->stage, 3);
  EXPECT_EQ(first_backward->microbatch, 0);
}

TEST(GenerateTest, RefusesWhatTheSchedulesRefuseSayingWhy) {
  absl::StatusOr<prog::Schedule> few = prog::Generate("interleaved-1f1b", 4, 2, 3);
  ASSERT_FALSE(few.ok());
  EXPECT_EQ(few.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(few.status().message().find("M >= D"), std::string::npos) << few.status();
  EXPECT_NE(few.status().message().find("Megatron"), std::string::npos) << few.status();

  absl::StatusOr<prog::Schedule> cyclic = prog::Generate("interleaved-1f1b", 4, 3, 5);
  ASSERT_FALSE(cyclic.ok());
  EXPECT_NE(cyclic.status().message().find("deadlocks"), std::string::npos) << cyclic.status();
  EXPECT_TRUE(prog::Generate("interleaved-1f1b", 4, 3, 6).ok());  // M mod D = D-2 works

  absl::StatusOr<prog::Schedule> one_chunk = prog::Generate("interleaved-1f1b", 4, 1, 8);
  ASSERT_FALSE(one_chunk.ok());
  EXPECT_NE(one_chunk.status().message().find("V >= 2"), std::string::npos);

  absl::StatusOr<prog::Schedule> zbv = prog::Generate("zb-v", 4, 3, 8);
  ASSERT_FALSE(zbv.ok());
  EXPECT_NE(zbv.status().message().find("exactly 2"), std::string::npos) << zbv.status();

  absl::StatusOr<prog::Schedule> unknown = prog::Generate("chimera", 4, 1, 8);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("unknown schedule 'chimera'"), std::string::npos);

  EXPECT_FALSE(prog::Generate("1f1b", 0, 1, 8).ok());
  EXPECT_FALSE(prog::Generate("1f1b", 4, 1, 0).ok());
  EXPECT_FALSE(prog::Generate("gpipe", 4, 2, 8).ok());
}

TEST(GenerateTest, ZeroChunksMeansTheScheduleDefault) {
  EXPECT_EQ(prog::Generate("zb-v", 3, 0, 6)->chunks, 2);
  EXPECT_EQ(prog::Generate("interleaved-1f1b", 3, 0, 6)->chunks, 2);
  EXPECT_EQ(prog::Generate("1f1b", 3, 0, 6)->chunks, 1);
}

TEST(GenerateTest, ZbvPlacesTwoChunksInAV) {
  absl::StatusOr<prog::Schedule> schedule = prog::Generate("zb-v", 4, 2, 8);
  ASSERT_TRUE(schedule.ok());
  EXPECT_EQ(schedule->stage_to_rank, (std::vector<int>{0, 1, 2, 3, 3, 2, 1, 0}));
}

}  // namespace
}  // namespace pp::plan
