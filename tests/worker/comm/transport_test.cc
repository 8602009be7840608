// Gloo transport between ranks in threads of this process, rendezvous through a memory store
// (fifo_transport_test.cc: the fifo transport on top of it).
#include <chrono>
#include <cstring>
#include <functional>
#include <latch>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "worker/comm/transport.h"

namespace pp::comm {
namespace {

comm::TransportOptions Options(int rank, int size, absl::Duration timeout = absl::Seconds(10)) {
  TransportOptions options;
  options.rank = rank;
  options.size = size;
  options.prefix = "test/";
  options.timeout = timeout;
  return options;
}

// Runs body(rank, transport) on `size` connected ranks, one thread each.
void RunRanks(int size, const std::function<void(int, Transport&)>& body,
              absl::Duration timeout = absl::Seconds(10)) {
  std::unique_ptr<KvStore> store = NewMemoryKvStore();
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      absl::StatusOr<std::unique_ptr<Transport>> t = ConnectGloo(*store, Options(r, size, timeout));
      ASSERT_TRUE(t.ok()) << t.status();
      body(r, **t);
    });
  }
  for (auto& t : threads) t.join();
}

TEST(MemoryKvStoreTest, GetWaitsForSetAndTimesOut) {
  std::unique_ptr<KvStore> store = NewMemoryKvStore();
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_TRUE(store->Set("k", "v").ok());
  });
  absl::StatusOr<std::string> value = store->Get("k", absl::Seconds(5));
  setter.join();
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, "v");
  absl::StatusOr<std::string> missing = store->Get("nope", absl::Milliseconds(20));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(missing.status().message().find("'nope'"), std::string::npos);
}

TEST(GlooTransportTest, MessagesMatchByTagWhateverThePostingOrder) {
  RunRanks(2, [](int rank, Transport& t) {
    EXPECT_EQ(t.rank(), rank);
    EXPECT_EQ(t.size(), 2);
    std::vector<float> a(1000), b(7);
    for (size_t i = 0; i < a.size(); ++i) a[i] = 0.5f * i;
    for (size_t i = 0; i < b.size(); ++i) b[i] = -1.0f * i;
    if (rank == 0) {
      // Sends tag 1 first; the receiver posts tag 2 first.
      absl::StatusOr<Handle> h1 = t.Isend(1, 0, 1, a.data(), a.size());
      absl::StatusOr<Handle> h2 = t.Isend(1, 0, 2, b.data(), b.size());
      ASSERT_TRUE(h1.ok() && h2.ok());
      EXPECT_TRUE(t.Wait(*h2).ok());
      EXPECT_TRUE(t.Wait(*h1).ok());
    } else {
      std::vector<float> got_a(a.size()), got_b(b.size());
      absl::StatusOr<Handle> h2 = t.Irecv(0, 0, 2, got_b.data(), got_b.size());
      absl::StatusOr<Handle> h1 = t.Irecv(0, 0, 1, got_a.data(), got_a.size());
      ASSERT_TRUE(h1.ok() && h2.ok());
      ASSERT_TRUE(t.Wait(*h1).ok());
      ASSERT_TRUE(t.Wait(*h2).ok());
      EXPECT_EQ(std::memcmp(got_a.data(), a.data(), a.size() * sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(got_b.data(), b.data(), b.size() * sizeof(float)), 0);
    }
  });
}

TEST(GlooTransportTest, CollectivesOverThreeRanks) {
  RunRanks(3, [](int rank, Transport& t) {
    std::string mine(rank * 5, static_cast<char>('a' + rank));  // rank 0 contributes nothing
    absl::StatusOr<std::vector<std::string>> all = t.AllGather(mine);
    ASSERT_TRUE(all.ok()) << all.status();
    ASSERT_EQ(all->size(), 3u);
    for (int r = 0; r < 3; ++r) EXPECT_EQ((*all)[r], std::string(r * 5, 'a' + r));
    EXPECT_TRUE(t.Barrier().ok());
    std::vector<float> x = {1.0f * rank, 2.0f, -0.5f};
    ASSERT_TRUE(t.AllReduceSum(x.data(), x.size()).ok());
    EXPECT_EQ(x, (std::vector<float>{3.0f, 6.0f, -1.5f}));
  });
}

TEST(GlooTransportTest, MissingPeerFailsWithinTheTimeout) {
  std::unique_ptr<KvStore> store = NewMemoryKvStore();
  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<Transport>> t =
      ConnectGloo(*store, Options(0, 2, absl::Milliseconds(500)));
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kDeadlineExceeded) << t.status();
  EXPECT_NE(t.status().message().find("rendezvous key"), std::string::npos) << t.status();
  EXPECT_LT(seconds, 5.0);
}

TEST(GlooTransportTest, SilentPeerTimesOutAndAbortWakesAWaiter) {
  std::latch rank1_done(1);  // keeps rank 0's connection open while rank 1 times out
  RunRanks(
      2,
      [&](int rank, Transport& t) {
        if (rank == 1) {
          struct CountDown {
            std::latch& latch;
            ~CountDown() { latch.count_down(); }
          } count_down{rank1_done};
          std::vector<float> x(4);
          absl::StatusOr<Handle> h = t.Irecv(0, 0, 9, x.data(), x.size());
          ASSERT_TRUE(h.ok());
          absl::Status status = t.Wait(*h);
          EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
          EXPECT_NE(status.message().find("recv from rank 0"), std::string::npos) << status;
        } else {
          std::vector<float> x(4);
          absl::StatusOr<Handle> h = t.Irecv(1, 0, 10, x.data(), x.size());
          ASSERT_TRUE(h.ok());
          std::thread aborter([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            t.Abort();
          });
          absl::Status status = t.Wait(*h);
          aborter.join();
          EXPECT_EQ(status.code(), absl::StatusCode::kAborted) << status;
          EXPECT_EQ(t.Isend(1, 0, 3, x.data(), x.size()).status().code(),
                    absl::StatusCode::kAborted);
          rank1_done.wait();
        }
      },
      absl::Milliseconds(700));
}

TEST(GlooTransportTest, BadPeerIsRefused) {
  RunRanks(2, [](int rank, Transport& t) {
    float x = 0;
    EXPECT_EQ(t.Isend(rank, 0, 1, &x, 1).status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(t.Irecv(5, 0, 1, &x, 1).status().code(), absl::StatusCode::kInvalidArgument);
  });
}

}  // namespace
}  // namespace pp::comm
