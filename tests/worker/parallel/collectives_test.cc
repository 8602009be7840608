// The in-process Collectives: sums in rank order with equal bits everywhere, gathers, errors
// instead of hangs, and the tensor-parallel norm sums.
#include <cstring>
#include <functional>
#include <thread>

#include "gtest/gtest.h"
#include "worker/parallel/parallel.h"

namespace pp::parallel {
namespace {

// Runs body(member) on one thread per member of a fresh group and joins them.
void OnEachRank(int size, const std::function<void(Collectives&)>& body,
                absl::Duration timeout = absl::Seconds(20)) {
  std::vector<std::unique_ptr<Collectives>> group = MakeInProcessGroup(size, timeout);
  std::vector<std::thread> threads;
  for (auto& member : group) threads.emplace_back([&body, &member] { body(*member); });
  for (auto& t : threads) t.join();
}

TEST(CollectivesTest, AllReduceSumsInRankOrderWithTheSameBitsEverywhere) {
  constexpr int kRanks = 4, kN = 1000;
  // Values whose float sum depends on the order: the fixed order must be rank 0, 1, 2, 3.
  auto value = [](int rank, int i) { return (rank % 2 ? 1e8f : 1.0f) * (1.0f + i * 1e-3f); };
  std::vector<float> expected(kN);
  for (int i = 0; i < kN; ++i) {
    float acc = value(0, i);
    for (int r = 1; r < kRanks; ++r) acc += value(r, i);
    expected[i] = acc;
  }
  std::vector<std::vector<float>> results(kRanks);
  OnEachRank(kRanks, [&](Collectives& c) {
    std::vector<float> data(kN);
    for (int i = 0; i < kN; ++i) data[i] = value(c.rank(), i);
    for (int repeat = 0; repeat < 3; ++repeat) {  // the barrier is reusable
      std::vector<float> copy = data;
      ASSERT_TRUE(c.AllReduceSum(copy.data(), kN).ok());
      if (repeat == 2) results[c.rank()] = copy;
    }
  });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(results[r].size(), static_cast<size_t>(kN));
    EXPECT_EQ(std::memcmp(results[r].data(), expected.data(), kN * sizeof(float)), 0) << r;
  }
}

TEST(CollectivesTest, AllGatherPlacesEachRankAtItsOffset) {
  OnEachRank(3, [](Collectives& c) {
    const int64_t mine[2] = {c.rank(), 10 * c.rank()};
    int64_t all[6] = {};
    ASSERT_TRUE(c.AllGather(mine, sizeof(mine), all).ok());
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(all[2 * r], r);
      EXPECT_EQ(all[2 * r + 1], 10 * r);
    }
  });
}

TEST(CollectivesTest, MismatchedLengthsAndMissingPeersAreErrors) {
  OnEachRank(2, [](Collectives& c) {
    std::vector<float> data(c.rank() == 0 ? 4 : 5, 1.0f);
    absl::Status s = c.AllReduceSum(data.data(), data.size());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  });
  // Rank 1 never calls: rank 0 gives up after the timeout, and the group stays failed.
  OnEachRank(
      2,
      [](Collectives& c) {
        if (c.rank() != 0) return;
        float x = 1;
        EXPECT_EQ(c.AllReduceSum(&x, 1).code(), absl::StatusCode::kDeadlineExceeded);
        EXPECT_EQ(c.AllReduceSum(&x, 1).code(), absl::StatusCode::kDeadlineExceeded);
      },
      absl::Milliseconds(200));
}

TEST(CollectivesTest, SumSquaresAddShardedTensorsAndKeepReplicatedOnes) {
  std::vector<std::map<std::string, double>> out(2);
  OnEachRank(2, [&](Collectives& c) {
    std::map<std::string, double> sums = {{"ln.weight", 4.0}, {"qkv.weight", 1.0 + c.rank()}};
    ASSERT_TRUE(AllReduceSumSquares(c, {"qkv.weight"}, sums).ok());
    out[c.rank()] = sums;
  });
  for (const auto& sums : out) {
    EXPECT_EQ(sums.at("ln.weight"), 4.0);
    EXPECT_EQ(sums.at("qkv.weight"), 3.0);
  }
  OnEachRank(2, [&](Collectives& c) {
    std::map<std::string, double> sums = {{c.rank() ? "a" : "b", 1.0}};
    EXPECT_EQ(AllReduceSumSquares(c, {}, sums).code(), absl::StatusCode::kInvalidArgument);
  });
}

}  // namespace
}  // namespace pp::parallel
