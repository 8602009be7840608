// Steps with a non-finite loss or gradient: every rank of the pipeline skips the update alike
// (weights bitwise as before the step) and names what was not finite and the rank that held it.
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/worker/executor/fake_pipeline.h"
#include "worker/executor/sum_squares.h"

namespace pp::executor {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

bool BitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(NonFiniteTest, ANonFiniteLossSkipsTheStepOnEveryRank) {
  const int D = 2, M = 4;
  auto where = OnePerRank(D);
  auto programs = Lower(GpipeOrder(D, M), {where});
  const std::vector<RankOutcome> one_step = RunPipeline(programs, where, M, 1);
  for (double value : {std::nan(""), kInf, -kInf}) {
    SCOPED_TRACE(value);
    // Step 1's losses on the last stage are poisoned, its gradients are not.
    const std::vector<RankOutcome> poisoned =
        RunPipeline(programs, where, M, 2, /*recv_lookahead=*/-1,
                    {.step = 1, .stage = D - 1, .loss = true, .value = value});
    for (int r = 0; r < D; ++r) {
      ASSERT_TRUE(poisoned[r].status.ok()) << poisoned[r].status;
      ASSERT_EQ(poisoned[r].steps.size(), 2u);
      EXPECT_FALSE(poisoned[r].steps[0].non_finite.has_value());
      const std::optional<NonFinite>& bad = poisoned[r].steps[1].non_finite;
      ASSERT_TRUE(bad.has_value()) << "rank " << r;
      EXPECT_EQ(bad->what, "loss");
      EXPECT_EQ(bad->rank, D - 1);
      EXPECT_EQ(std::memcmp(&bad->value, &value, sizeof(double)), 0) << bad->value;
      EXPECT_TRUE(BitwiseEqual(poisoned[r].weights, one_step[r].weights)) << "rank " << r;
    }
  }
}

TEST(NonFiniteTest, ANonFiniteGradientIsNamedWithTheRankThatHoldsIt) {
  const int D = 3, M = 3;
  auto where = OnePerRank(D);
  auto programs = Lower(OneFOneBOrder(D, M, false), {where});
  const std::vector<RankOutcome> poisoned =
      RunPipeline(programs, where, M, 1, /*recv_lookahead=*/-1,
                  {.step = 0, .stage = 1, .loss = false, .value = kInf});
  for (int r = 0; r < D; ++r) {
    ASSERT_TRUE(poisoned[r].status.ok()) << poisoned[r].status;
    const std::optional<NonFinite>& bad = poisoned[r].steps[0].non_finite;
    ASSERT_TRUE(bad.has_value()) << "rank " << r;
    EXPECT_EQ(DescribeNonFinite(1, *bad),
              "step 1: non-finite gradient of tensor 's1.a' inf on rank 1");
    // Not one weight moved, on any rank.
    EXPECT_TRUE(BitwiseEqual(poisoned[r].weights, FakeCompute({r}, D, M).Weights()))
        << "rank " << r;
  }
}

TEST(NonFiniteTest, TheLossComesFirstThenTensorsInRankOrderThenTheTotal) {
  std::vector<RankSums> ranks(3);
  ranks[0].sums = {{"a", 1.0}, {"b", std::nan("")}};
  ranks[1].sums = {{"c", kInf}};
  ranks[2].loss = kInf;
  std::optional<NonFinite> bad = FindNonFinite(ranks);
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(DescribeNonFinite(4, *bad), "step 4: non-finite loss inf on rank 2");

  ranks[2].loss = 2.5;
  bad = FindNonFinite(ranks);
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(DescribeNonFinite(4, *bad), "step 4: non-finite gradient of tensor 'b' nan on rank 0");

  // Each sum finite, their total not: no single rank produced it.
  const double big = std::numeric_limits<double>::max();
  bad = FindNonFinite({RankSums{.loss = std::nullopt, .sums = {{"a", big}}},
                       RankSums{.loss = std::nullopt, .sums = {{"b", big}}}});
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(DescribeNonFinite(2, *bad), "step 2: non-finite global gradient norm inf");

  EXPECT_FALSE(FindNonFinite({RankSums{.loss = 3.0, .sums = {{"a", 1.0}}}}).has_value());
}

TEST(NonFiniteTest, TheLossTravelsWithTheSums) {
  RankSums part{.loss = std::nan(""), .sums = {{"x", 2.0}, {"y", 0.5}}};
  absl::StatusOr<RankSums> back = DecodeSumSquares(EncodeSumSquares(part), 3);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_TRUE(back->loss.has_value());
  EXPECT_TRUE(std::isnan(*back->loss));
  ASSERT_EQ(back->sums.size(), 2u);
  EXPECT_EQ(back->sums[1].name, "y");
  EXPECT_EQ(back->sums[1].sum_sq, 0.5);
  const RankSums no_loss{.loss = std::nullopt, .sums = {{"x", 1.0}}};
  EXPECT_FALSE(DecodeSumSquares(EncodeSumSquares(no_loss), 0)->loss.has_value());
  EXPECT_EQ(DecodeSumSquares("abc", 3).status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace pp::executor
