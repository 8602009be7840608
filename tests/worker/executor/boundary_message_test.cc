// Boundary messages (worker/executor/boundary_message.h, boundary_transfers.h): the header codec
// against corrupt and hostile words, and the header-then-payload exchange between two fifo ranks
// (NCCL's matching rules): tensors of different shapes on one channel, all posted at once, a
// header that disagrees with the receiver named, unknown receives refused.
#include "worker/executor/boundary_message.h"

#include <cstdint>
#include <cstring>
#include <functional>
#include <latch>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/host_compute.h"
#include "worker/comm/transport.h"
#include "worker/executor/boundary_transfers.h"

namespace pp::executor {
namespace {

TEST(BoundaryHeaderTest, RoundTripsTagAndShape) {
  const BoundaryHeader in{prog::BoundaryTag(true, 3, 77), {2, 1000, 768}};
  float words[kHeaderFloats];
  EncodeHeader(in, words);
  absl::StatusOr<BoundaryHeader> out = DecodeHeader(words);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->tag, in.tag);
  EXPECT_EQ(out->shape, in.shape);
  EXPECT_EQ(*BoundaryFloats(out->shape), 2u * 1000 * 768);
}

TEST(BoundaryHeaderTest, EveryFlippedBitIsRefused) {
  float words[kHeaderFloats];
  EncodeHeader({prog::BoundaryTag(false, 1, 5), {4, 64, 128}}, words);
  for (int bit = 0; bit < 32 * kHeaderWords; ++bit) {
    float flipped[kHeaderFloats];
    std::memcpy(flipped, words, sizeof(words));
    reinterpret_cast<uint32_t*>(flipped)[bit / 32] ^= uint32_t{1} << (bit % 32);
    absl::StatusOr<BoundaryHeader> got = DecodeHeader(flipped);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << "bit " << bit;
  }
}

TEST(BoundaryHeaderTest, RandomWordsNeverDecode) {
  std::mt19937 rng(7);
  for (int i = 0; i < 10000; ++i) {
    uint32_t words[kHeaderWords];
    for (uint32_t& w : words) w = rng();
    float as_floats[kHeaderFloats];
    std::memcpy(as_floats, words, sizeof(words));
    EXPECT_FALSE(DecodeHeader(as_floats).ok());
  }
}

TEST(BoundaryHeaderTest, ShapesOutOfBoundsAreRefused) {
  EXPECT_FALSE(BoundaryFloats({0, 1, 1}).ok());
  EXPECT_FALSE(BoundaryFloats({1, -1, 1}).ok());
  EXPECT_FALSE(BoundaryFloats({1, 1, int64_t{1} << 31}).ok());
  // Each dim fits, the product does not: 2^30 * 2^30 * 2^30 would overflow 64 bits unchecked.
  EXPECT_FALSE(BoundaryFloats({int64_t{1} << 30, int64_t{1} << 30, int64_t{1} << 30}).ok());
  EXPECT_FALSE(BoundaryFloats({int64_t{1} << 18, int64_t{1} << 18, 2}).ok());  // 2^37
  EXPECT_EQ(*BoundaryFloats({int64_t{1} << 18, int64_t{1} << 18, 1}), size_t{1} << 36);
  // A hostile header with a valid check word but an oversized shape is not a header either.
  uint32_t words[kHeaderWords] = {0x48535050, 1, 0, 0, 1u << 30, 1u << 30, 1u << 30, 0};
  uint32_t check = 0x9E3779B9;
  for (int i = 0; i < kHeaderWords - 1; ++i) check ^= words[i];
  words[kHeaderWords - 1] = check;
  float as_floats[kHeaderFloats];
  std::memcpy(as_floats, words, sizeof(words));
  EXPECT_EQ(DecodeHeader(as_floats).status().code(), absl::StatusCode::kDataLoss);
}

using testing::HostCompute;

using Side = std::function<void(BoundaryTransfers&, comm::Transport&)>;

// Rank 0 runs `send` (then waits for its sends when `drain`), rank 1 `receive`, each with
// BoundaryTransfers over a fifo transport.
void RunPair(const Side& send, const Side& receive, bool drain = true) {
  std::unique_ptr<comm::KvStore> store = comm::NewMemoryKvStore();
  std::latch done(2);  // neither transport goes away before both sides finished
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      comm::TransportOptions options;
      options.rank = r;
      options.size = 2;
      options.prefix = "boundary/";
      options.timeout = absl::Seconds(10);
      absl::StatusOr<std::unique_ptr<comm::Transport>> t = comm::ConnectFifo(*store, options);
      if (!t.ok()) {
        done.count_down();
        ADD_FAILURE() << t.status();
        return;
      }
      HostCompute compute;
      BoundaryTransfers transfers(t->get(), &compute);
      struct Arrive {  // destroyed first, however the body returns
        std::latch& latch;
        ~Arrive() { latch.arrive_and_wait(); }
      } arrive{done};
      (r == 0 ? send : receive)(transfers, **t);
      if (r == 0 && drain) {
        EXPECT_TRUE(transfers.DrainSends().ok());
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

float* Filled(size_t n, float base) {
  float* data = new float[n];
  for (size_t i = 0; i < n; ++i) data[i] = base + static_cast<float>(i);
  return data;
}

const BoundaryShape kShapes[] = {{1, 17, 8}, {3, 5, 8}, {2, 64, 8}};

TEST(BoundaryTransfersTest, TensorsOfDifferentShapesArriveInBuffersSizedFromTheirHeaders) {
  RunPair(
      [](BoundaryTransfers& t, comm::Transport&) {
        for (int k = 0; k < 3; ++k) {
          const size_t n = *BoundaryFloats(kShapes[k]);
          ASSERT_TRUE(
              t.Send(1, 0, prog::BoundaryTag(false, 0, k), kShapes[k], Filled(n, 1000.0f * k))
                  .ok());
        }
      },
      [](BoundaryTransfers& t, comm::Transport&) {
        for (int k = 0; k < 3; ++k) {
          ASSERT_TRUE(t.Post(k, 0, 0, prog::BoundaryTag(false, 0, k), kShapes[k]).ok());
        }
        EXPECT_EQ(t.unreceived(), 3u);
        for (int k = 0; k < 3; ++k) {
          absl::StatusOr<BoundaryTransfers::Received> got = t.Receive(k);
          ASSERT_TRUE(got.ok()) << got.status();
          ASSERT_EQ(got->n, *BoundaryFloats(kShapes[k]));
          for (size_t i = 0; i < got->n; ++i) {
            ASSERT_EQ(got->data[i], 1000.0f * k + static_cast<float>(i)) << k << " " << i;
          }
          delete[] got->data;
        }
        EXPECT_EQ(t.unreceived(), 0u);
      });
}

TEST(BoundaryTransfersTest, AHeaderOfAnotherShapeFailsNamingBoth) {
  RunPair(
      [](BoundaryTransfers& t, comm::Transport&) {
        ASSERT_TRUE(t.Send(1, 0, prog::BoundaryTag(false, 0, 0), {2, 8, 4}, Filled(64, 0)).ok());
      },
      [](BoundaryTransfers& t, comm::Transport& transport) {
        // Expects 2*16*4 = 128 floats where 64 come: the header tells before the payload is used.
        ASSERT_TRUE(t.Post(0, 0, 0, prog::BoundaryTag(false, 0, 0), {2, 16, 4}).ok());
        absl::StatusOr<BoundaryTransfers::Received> got = t.Receive(0);
        ASSERT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
        const std::string text(got.status().message());
        EXPECT_NE(text.find("(2,8,4)"), std::string::npos) << text;
        EXPECT_NE(text.find("(2,16,4)"), std::string::npos) << text;
        EXPECT_NE(text.find("activation 0->1 mb 0"), std::string::npos) << text;
        // What the executor does after a failed step (the payload's receive stays posted).
        transport.Abort();
      },
      /*drain=*/false);
}

TEST(BoundaryTransfersTest, UnknownAndRepeatedMessagesAreRefused) {
  RunPair(
      [](BoundaryTransfers& t, comm::Transport&) {
        for (int k = 0; k < 2; ++k) {
          ASSERT_TRUE(t.Send(1, 0, prog::BoundaryTag(false, 0, k), {1, 1, 4}, Filled(4, k)).ok());
        }
      },
      [](BoundaryTransfers& t, comm::Transport&) {
        for (int k = 0; k < 2; ++k) {
          ASSERT_TRUE(t.Post(k, 0, 0, prog::BoundaryTag(false, 0, k), {1, 1, 4}).ok());
        }
        EXPECT_EQ(t.Receive(7).status().code(), absl::StatusCode::kFailedPrecondition);
        EXPECT_EQ(t.Post(1, 0, 0, prog::BoundaryTag(false, 0, 1), {1, 1, 4}).code(),
                  absl::StatusCode::kInvalidArgument);
        EXPECT_EQ(t.Post(2, 0, 0, prog::BoundaryTag(false, 0, 2), {0, 1, 4}).code(),
                  absl::StatusCode::kInvalidArgument);
        for (int k = 0; k < 2; ++k) {
          absl::StatusOr<BoundaryTransfers::Received> got = t.Receive(k);
          ASSERT_TRUE(got.ok()) << got.status();
          EXPECT_EQ(got->data[0], static_cast<float>(k));
          delete[] got->data;
        }
      });
}

}  // namespace
}  // namespace pp::executor
