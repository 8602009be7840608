// What the boundary headers (worker/executor/boundary_message.h) cost: two ranks in threads of
// this process over the real CPU transport (Gloo on loopback) exchange a pipeline step's boundary
// tensors, once as bare messages (as the executor did before headers) and once framed
// (BoundaryTransfers: a header, then the payload), alternating, same shapes and counts; both post
// every receive at the start of the step.
//
// One step, per shape (B,T,C): rank 0 sends M activations; rank 1 takes each in order, "computes"
// for --compute_us (the stage's forward, during which a posted receive can already land) and sends
// its gradient back; rank 0 takes the M gradients, each followed by the same compute. The compute
// sleeps rather than spins: on 2 cores two spinning ranks would starve Gloo's I/O threads and
// measure that contention instead of the protocol. The figure
// is rank 0's wall time of the step. Each repeat runs one bare and one framed step, in alternating
// order (neither side always runs second); the overhead is the median of the repeats' framed -
// bare differences, with their quartiles, per step and as a share of the bare median.
//
// build/bin/boundary_bench [--shapes=4x64x128,8x128x256,2x256x768] [--microbatches=8]
//   [--compute_us=2000] [--repeats=9]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "tests/support/host_compute.h"
#include "worker/comm/transport.h"
#include "worker/executor/boundary_transfers.h"

ABSL_FLAG(std::string, shapes, "4x64x128,8x128x256,2x256x768", "B x T x C per case, commas");
ABSL_FLAG(int, microbatches, 8, "M: activations (and gradients) per step");
ABSL_FLAG(int, compute_us, 2000, "spin per consumed tensor, microseconds (a stage's compute)");
ABSL_FLAG(int, repeats, 9, "steps per side, alternating");

namespace pp::executor {
namespace {

using Clock = std::chrono::steady_clock;

void Compute(int us) { std::this_thread::sleep_for(std::chrono::microseconds(us)); }

using testing::HostCompute;

void Check(const absl::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "boundary_bench: %s\n", s.ToString().c_str());
    std::exit(1);
  }
}

// One direction of a step: `from` sends M tensors of `shape` on `channel`, `to` takes each in
// order and spins after it. Bare or framed.
struct Side {
  comm::Transport* transport;
  HostCompute compute;
};

void SendAll(Side& me, int peer, int channel, const BoundaryShape& shape, int M, bool framed,
             BoundaryTransfers& transfers) {
  const size_t n = *BoundaryFloats(shape);
  std::vector<std::pair<comm::Handle, float*>> bare;
  for (int j = 0; j < M; ++j) {
    float* data = me.compute.AllocBuffer(n);
    const uint64_t tag = prog::BoundaryTag(channel == 1, 0, j);
    if (framed) {
      Check(transfers.Send(peer, channel, tag, shape, data));
    } else {
      absl::StatusOr<comm::Handle> h = me.transport->Isend(peer, channel, tag, data, n);
      Check(h.status());
      bare.push_back({*h, data});
    }
  }
  if (framed) return;  // drained at the end of the step, as the executor does
  for (auto& [h, data] : bare) {
    Check(me.transport->Wait(h));
    me.compute.FreeBuffer(data);
  }
}

void ReceiveAll(Side& me, int peer, int channel, const BoundaryShape& shape, int M, bool framed,
                BoundaryTransfers& transfers, int compute_us) {
  const size_t n = *BoundaryFloats(shape);
  std::vector<std::pair<comm::Handle, float*>> bare;
  for (int j = 0; j < M; ++j) {
    const uint64_t tag = prog::BoundaryTag(channel == 1, 0, j);
    if (framed) {
      Check(transfers.Post(j, peer, channel, tag, shape));
    } else {
      float* data = me.compute.AllocBuffer(n);
      absl::StatusOr<comm::Handle> h = me.transport->Irecv(peer, channel, tag, data, n);
      Check(h.status());
      bare.push_back({*h, data});
    }
  }
  for (int j = 0; j < M; ++j) {
    if (framed) {
      absl::StatusOr<BoundaryTransfers::Received> got = transfers.Receive(j);
      Check(got.status());
      me.compute.FreeBuffer(got->data);
    } else {
      Check(me.transport->Wait(bare[j].first));
      me.compute.FreeBuffer(bare[j].second);
    }
    Compute(compute_us);
  }
}

// Rank 0's seconds for one step.
double Step(Side sides[2], const BoundaryShape& shape, int M, bool framed, int compute_us) {
  double seconds = 0;
  std::thread other([&] {
    BoundaryTransfers transfers(sides[1].transport, &sides[1].compute);
    ReceiveAll(sides[1], 0, 0, shape, M, framed, transfers, compute_us);
    SendAll(sides[1], 0, 1, shape, M, framed, transfers);
    Check(transfers.DrainSends());
  });
  const Clock::time_point start = Clock::now();
  BoundaryTransfers transfers(sides[0].transport, &sides[0].compute);
  SendAll(sides[0], 1, 0, shape, M, framed, transfers);
  ReceiveAll(sides[0], 1, 1, shape, M, framed, transfers, compute_us);
  Check(transfers.DrainSends());
  seconds = std::chrono::duration<double>(Clock::now() - start).count();
  other.join();
  return seconds;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

BoundaryShape ParseShape(const std::string& text) {
  std::vector<std::string> parts = absl::StrSplit(text, 'x');
  BoundaryShape shape;
  int64_t* dims[] = {&shape.batch, &shape.seq, &shape.width};
  if (parts.size() != 3) Check(absl::InvalidArgumentError("--shapes: want BxTxC, got " + text));
  for (int i = 0; i < 3; ++i) {
    if (!absl::SimpleAtoi(parts[i], dims[i])) {
      Check(absl::InvalidArgumentError("--shapes: not a number in " + text));
    }
  }
  Check(BoundaryFloats(shape).status());
  return shape;
}

int Main() {
  const int M = absl::GetFlag(FLAGS_microbatches);
  const int compute_us = absl::GetFlag(FLAGS_compute_us);
  const int repeats = std::max(1, absl::GetFlag(FLAGS_repeats));
  std::unique_ptr<comm::KvStore> store = comm::NewMemoryKvStore();
  std::unique_ptr<comm::Transport> transports[2];
  std::thread connect[2];
  for (int r = 0; r < 2; ++r) {
    connect[r] = std::thread([&, r] {
      comm::TransportOptions options;
      options.rank = r;
      options.size = 2;
      options.prefix = "bench/";
      absl::StatusOr<std::unique_ptr<comm::Transport>> t = comm::ConnectGloo(*store, options);
      Check(t.status());
      transports[r] = *std::move(t);
    });
  }
  for (std::thread& t : connect) t.join();
  Side sides[2] = {{transports[0].get(), {}}, {transports[1].get(), {}}};
  std::printf("boundary headers over Gloo (loopback), M=%d, compute %d us per tensor, %d repeats\n",
              M, compute_us, repeats);
  std::printf("%-14s %10s %10s %10s %26s %9s\n", "shape", "KiB/tensor", "bare ms", "framed ms",
              "framed-bare us (quartiles)", "share");
  const std::vector<std::string> cases = absl::StrSplit(absl::GetFlag(FLAGS_shapes), ',');
  for (const std::string& text : cases) {
    const BoundaryShape shape = ParseShape(text);
    Step(sides, shape, M, false, compute_us);  // warm both paths
    Step(sides, shape, M, true, compute_us);
    std::vector<double> bare, framed, diff;
    for (int i = 0; i < repeats; ++i) {
      const bool framed_first = i % 2 == 1;
      const double first = Step(sides, shape, M, framed_first, compute_us);
      const double second = Step(sides, shape, M, !framed_first, compute_us);
      bare.push_back(framed_first ? second : first);
      framed.push_back(framed_first ? first : second);
      diff.push_back(framed.back() - bare.back());
    }
    const double b = Median(bare), f = Median(framed);
    std::sort(diff.begin(), diff.end());
    const double d = Median(diff), q1 = diff[diff.size() / 4], q3 = diff[diff.size() * 3 / 4];
    std::printf("%-14s %10.1f %10.3f %10.3f %10.1f (%.0f..%.0f) %8.2f%%\n", ToString(shape).c_str(),
                *BoundaryFloats(shape) * 4.0 / 1024, b * 1e3, f * 1e3, d * 1e6, q1 * 1e6, q3 * 1e6,
                100.0 * d / b);
  }
  return 0;
}

}  // namespace
}  // namespace pp::executor

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return pp::executor::Main();
}
