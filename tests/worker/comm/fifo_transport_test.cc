// The fifo transport (NCCL's rules over Gloo) between ranks in threads of this process: posting
// order per channel whatever the tags, both messages named when the order disagrees, NCCL's lazy
// connect (and the deadlock it makes when receives go first), eager connect, and the choice of
// transport by PP_TEST_TRANSPORT.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <latch>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/comm/transport.h"

namespace pp::comm {
namespace {

struct Setup {
  bool eager = true;
  absl::Duration timeout = absl::Seconds(10);
};

// Runs body(rank, transport) on `size` fifo ranks, one thread each.
void RunRanks(int size, const Setup& setup, const std::function<void(int, Transport&)>& body) {
  std::unique_ptr<KvStore> store = NewMemoryKvStore();
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      TransportOptions options;
      options.rank = r;
      options.size = size;
      options.prefix = "fifo/";
      options.timeout = setup.timeout;
      options.eager = setup.eager;
      absl::StatusOr<std::unique_ptr<Transport>> t = ConnectFifo(*store, options);
      ASSERT_TRUE(t.ok()) << t.status();
      body(r, **t);
    });
  }
  for (auto& t : threads) t.join();
}

// Counts a latch down when the scope ends, however it ends (an ASSERT returns early).
struct LatchGuard {
  std::latch& latch;
  ~LatchGuard() { latch.count_down(); }
};

std::vector<float> Ramp(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(i);
  return v;
}

TEST(BoundaryTagTest, NamesTheMessage) {
  EXPECT_EQ(DescribeTag(BoundaryTag(false, 2, 5)), "activation 2->3 mb 5");
  EXPECT_EQ(DescribeTag(BoundaryTag(true, 0, 0)), "gradient 0->1 mb 0");
  EXPECT_NE(BoundaryTag(true, 1, 2), BoundaryTag(false, 1, 2));
  EXPECT_NE(BoundaryTag(false, 2, 1), BoundaryTag(false, 1, 2));
  EXPECT_EQ(DescribeTag(7), "tag 7");
}

// Each channel keeps its own order: the receiver posts channel 1's message before channel 0's
// two, the sender sends them interleaved.
TEST(FifoTransportTest, EachChannelMatchesInPostingOrder) {
  const std::vector<float> a = Ramp(100, 0.5f), b = Ramp(7, -1.0f), c = Ramp(100, 2.0f);
  RunRanks(2, {}, [&](int rank, Transport& t) {
    if (rank == 0) {
      std::vector<Handle> sent;
      for (auto [channel, tag, data] : {std::tuple{0, 10, &a}, std::tuple{1, 20, &b},
                                        std::tuple{0, 11, &c}}) {
        absl::StatusOr<Handle> h = t.Isend(1, channel, tag, data->data(), data->size());
        ASSERT_TRUE(h.ok()) << h.status();
        sent.push_back(*h);
      }
      for (Handle h : sent) EXPECT_TRUE(t.Wait(h).ok());
      return;
    }
    std::vector<float> got_a(a.size()), got_b(b.size()), got_c(c.size());
    absl::StatusOr<Handle> hb = t.Irecv(0, 1, 20, got_b.data(), got_b.size());
    absl::StatusOr<Handle> ha = t.Irecv(0, 0, 10, got_a.data(), got_a.size());
    absl::StatusOr<Handle> hc = t.Irecv(0, 0, 11, got_c.data(), got_c.size());
    ASSERT_TRUE(ha.ok() && hb.ok() && hc.ok());
    for (Handle h : {*hc, *ha, *hb}) ASSERT_TRUE(t.Wait(h).ok());
    EXPECT_EQ(got_a, a);
    EXPECT_EQ(got_b, b);
    EXPECT_EQ(got_c, c);
  });
}

// What NCCL would deliver silently (same size, another microbatch) fails the receive, naming
// both messages; the receive buffer is left as it was.
TEST(FifoTransportTest, AReceiveOfAnotherMessageFailsNamingBoth) {
  const std::vector<float> first = Ramp(16, 1.0f), second = Ramp(16, 3.0f);
  std::latch receiver_done(1);
  RunRanks(2, {}, [&](int rank, Transport& t) {
    if (rank == 0) {
      absl::StatusOr<Handle> h0 =
          t.Isend(1, kActivationChannel, BoundaryTag(false, 0, 0), first.data(), first.size());
      absl::StatusOr<Handle> h1 =
          t.Isend(1, kActivationChannel, BoundaryTag(false, 0, 1), second.data(), second.size());
      ASSERT_TRUE(h0.ok() && h1.ok());
      receiver_done.wait();  // the sends stay posted until the receiver has looked
      return;
    }
    LatchGuard guard{receiver_done};
    std::vector<float> got(16, -7.0f);
    absl::StatusOr<Handle> h =
        t.Irecv(0, kActivationChannel, BoundaryTag(false, 0, 1), got.data(), got.size());
    ASSERT_TRUE(h.ok()) << h.status();
    const absl::Status status = t.Wait(*h);
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
    EXPECT_NE(status.message().find("receive of activation 0->1 mb 1"), std::string::npos)
        << status;
    EXPECT_NE(status.message().find("send of activation 0->1 mb 0"), std::string::npos) << status;
    EXPECT_EQ(got, std::vector<float>(16, -7.0f));
  });
}

TEST(FifoTransportTest, AMessageOfAnotherSizeFails) {
  const std::vector<float> sent = Ramp(4, 1.0f);
  std::latch receiver_done(1);
  RunRanks(2, {}, [&](int rank, Transport& t) {
    if (rank == 0) {
      ASSERT_TRUE(t.Isend(1, 0, 5, sent.data(), sent.size()).ok());
      receiver_done.wait();
      return;
    }
    LatchGuard guard{receiver_done};
    std::vector<float> got(8, 0.0f);
    absl::StatusOr<Handle> h = t.Irecv(0, 0, 5, got.data(), got.size());
    ASSERT_TRUE(h.ok());
    const absl::Status status = t.Wait(*h);
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
    EXPECT_NE(status.message().find("(4 floats)"), std::string::npos) << status;
    EXPECT_NE(status.message().find("expecting 8 floats"), std::string::npos) << status;
  });
}

// The executor's old pattern: every receive posted before the first send. Each rank's first
// operation is a receive on a channel whose peer will first use it only after receiving: with
// lazily connected channels (NCCL's communicators) neither returns, and the wait ends at the
// timeout with the channel named. The rank whose wait times out first gives up its transport
// (Gloo closes the pair on a timeout), so the other may see the closed connection instead of
// its own timeout; both name the channel they waited on.
TEST(FifoTransportTest, ReceivesBeforeSendsDeadlockOnLazyChannels) {
  absl::Status status[2];
  RunRanks(2, {.eager = false, .timeout = absl::Milliseconds(400)}, [&](int rank, Transport& t) {
    std::vector<float> x(4);
    const int channel = rank == 0 ? kGradientChannel : kActivationChannel;
    status[rank] = t.Irecv(1 - rank, channel, 1, x.data(), x.size()).status();
  });
  EXPECT_TRUE(status[0].code() == absl::StatusCode::kDeadlineExceeded ||
              status[1].code() == absl::StatusCode::kDeadlineExceeded)
      << status[0] << "\n" << status[1];
  for (int rank : {0, 1}) {
    ASSERT_FALSE(status[rank].ok()) << "rank " << rank;
    EXPECT_NE(status[rank].message().find("made no operation on"), std::string::npos)
        << status[rank];
    EXPECT_NE(status[rank].message().find(rank == 0 ? "rank 1 -> rank 0 gradient channel"
                                                    : "rank 0 -> rank 1 activation channel"),
              std::string::npos)
        << status[rank];
  }
}

TEST(FifoTransportTest, EagerChannelsLetReceivesGoFirst) {
  const std::vector<float> act = Ramp(10, 1.0f), grad = Ramp(10, -1.0f);
  RunRanks(2, {}, [&](int rank, Transport& t) {
    std::vector<float> got(10);
    if (rank == 0) {
      absl::StatusOr<Handle> in = t.Irecv(1, kGradientChannel, 2, got.data(), got.size());
      ASSERT_TRUE(in.ok()) << in.status();
      absl::StatusOr<Handle> out = t.Isend(1, kActivationChannel, 1, act.data(), act.size());
      ASSERT_TRUE(out.ok()) << out.status();
      ASSERT_TRUE(t.Wait(*in).ok());
      EXPECT_EQ(got, grad);
      EXPECT_TRUE(t.Wait(*out).ok());
      return;
    }
    absl::StatusOr<Handle> in = t.Irecv(0, kActivationChannel, 1, got.data(), got.size());
    ASSERT_TRUE(in.ok()) << in.status();
    ASSERT_TRUE(t.Wait(*in).ok());
    EXPECT_EQ(got, act);
    absl::StatusOr<Handle> out = t.Isend(0, kGradientChannel, 2, grad.data(), grad.size());
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_TRUE(t.Wait(*out).ok());
  });
}

// A receive completes only after its send was posted: the sender posts 200 ms late.
TEST(FifoTransportTest, AReceiveWaitsForItsSendToBePosted) {
  RunRanks(2, {}, [](int rank, Transport& t) {
    std::vector<float> x = Ramp(3, 1.0f);
    if (rank == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      absl::StatusOr<Handle> h = t.Isend(1, 0, 3, x.data(), x.size());
      ASSERT_TRUE(h.ok());
      EXPECT_TRUE(t.Wait(*h).ok());
      return;
    }
    std::vector<float> got(3);
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<Handle> h = t.Irecv(0, 0, 3, got.data(), got.size());
    ASSERT_TRUE(h.ok());
    ASSERT_TRUE(t.Wait(*h).ok());
    EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(190));
    EXPECT_EQ(got, x);
  });
}

TEST(FifoTransportTest, BadChannelOrPeerIsRefused) {
  RunRanks(2, {}, [](int rank, Transport& t) {
    float x = 0;
    EXPECT_EQ(t.Isend(1 - rank, kPipelineChannels, 1, &x, 1).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(t.Irecv(rank, 0, 1, &x, 1).status().code(), absl::StatusCode::kInvalidArgument);
  });
}

TEST(ConnectForDeviceTest, PpTestTransportChoosesTheCpuTransport) {
  std::unique_ptr<KvStore> store = NewMemoryKvStore();
  TransportOptions options;  // one rank: connects at once
  ASSERT_EQ(setenv("PP_TEST_TRANSPORT", "carrier-pigeon", 1), 0);
  absl::StatusOr<std::unique_ptr<Transport>> bad = ConnectForDevice(*store, options, "cpu");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
  EXPECT_NE(bad.status().message().find("carrier-pigeon"), std::string::npos);
  for (const char* kind : {"fifo", "gloo", ""}) {
    ASSERT_EQ(setenv("PP_TEST_TRANSPORT", kind, 1), 0);
    options.prefix = absl::StrCat("choose-", kind, "/");
    absl::StatusOr<std::unique_ptr<Transport>> t = ConnectForDevice(*store, options, "cpu");
    EXPECT_TRUE(t.ok()) << kind << ": " << t.status();
  }
  unsetenv("PP_TEST_TRANSPORT");
  EXPECT_EQ(ConnectForDevice(*store, options, "tpu:0").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pp::comm
