// The NCCL transport on the GPUs of this machine; exits 77 (skipped) when there is none.
// One GPU: a world of one (collectives). Two or more: two ranks in threads, one GPU each, and
// every scenario on a transport of its own (its own rendezvous keys):
// - collectives (all-gather, barrier, all-reduce);
// - every receive, on both channels, posted before any send: the pattern that deadlocked while
//   pairs connected lazily (NCCL connects a pair at its first transfer);
// - two channels whose messages interleave in another order on each side, in the same order
//   per channel (NCCL's matching rule: per ordered pair and channel, in posting order), with one
//   large message in stream-ordered pool memory (read across GPUs within one process);
// - refusals: a collectives-only group, a channel that was not connected, a bad peer;
// - a receive that is never sent: DeadlineExceeded naming it, and the transport unusable after;
// - Abort() from another thread while a receive waits: Aborted, now and for every later call.
// Test code calls CUDA functions that may wait for the device (cudaMemcpy) only while no NCCL
// operation of its device is in flight: they could wait for it.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "worker/comm/transport.h"

namespace {

using pp::comm::BoundaryTag;
using pp::comm::Transport;

std::atomic<int> failures{0};

void Check(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "FAILED: %s\n", what.c_str());
    ++failures;
  }
}

void CheckStatus(const absl::Status& status, const std::string& what) {
  Check(status.ok(), absl::StrCat(what, ": ", status.ToString()));
}

pp::comm::TransportOptions Options(int rank, int size, const std::string& scenario) {
  pp::comm::TransportOptions options;
  options.rank = rank;
  options.size = size;
  options.prefix = absl::StrCat("nccl-test/", scenario, "/");
  options.timeout = absl::Seconds(30);
  options.cuda_device = rank;
  return options;
}

std::unique_ptr<Transport> Connect(pp::comm::KvStore& kv, const pp::comm::TransportOptions& o) {
  auto transport = pp::comm::ConnectNccl(kv, o);
  CheckStatus(transport.status(), absl::StrCat("rank ", o.rank, " connect ", o.prefix));
  return transport.ok() ? *std::move(transport) : nullptr;
}

// A device buffer of n floats holding value(i), from the stream-ordered pool as the CUDA Ops
// allocate (the peer GPU in this process reads and writes it directly); FreeBuffer frees it.
float* DeviceBuffer(size_t n, const std::function<float(size_t)>& value) {
  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = value(i);
  void* device = nullptr;
  cudaMallocAsync(&device, n * sizeof(float), /*stream=*/0);
  cudaMemcpy(device, host.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  return static_cast<float*>(device);
}

void FreeBuffer(float* device) { cudaFreeAsync(device, /*stream=*/0); }

// True when the n floats at `device` hold value(i).
bool Holds(const float* device, size_t n, const std::function<float(size_t)>& value) {
  std::vector<float> host(n);
  cudaMemcpy(host.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost);
  for (size_t i = 0; i < n; ++i) {
    if (host[i] != value(i)) return false;
  }
  return true;
}

void Collectives(pp::comm::KvStore& kv, int rank, int size) {
  std::unique_ptr<Transport> t = Connect(kv, Options(rank, size, "collectives"));
  if (t == nullptr) return;
  auto all = t->AllGather(std::string(rank + 1, 'a' + rank));
  Check(all.ok() && static_cast<int>(all->size()) == size, "all-gather size");
  for (int r = 0; all.ok() && r < size; ++r) {
    Check((*all)[r] == std::string(r + 1, 'a' + r), "all-gather payload");
  }
  CheckStatus(t->Barrier(), "barrier");
  const size_t n = 1000;
  float* data = DeviceBuffer(n, [&](size_t i) { return rank + 0.5f * i; });
  CheckStatus(t->AllReduceSum(data, n), "all-reduce");
  Check(Holds(data, n, [&](size_t i) { return size * (size - 1) / 2.0f + size * 0.5f * i; }),
        "all-reduce value");
  FreeBuffer(data);
}

// One message of a scenario: its channel, microbatch (in the tag) and length.
struct Message {
  int channel;
  int mb;
  size_t n;
};

float Payload(int from, const Message& m, size_t i) {
  return from * 1000.0f + m.channel * 100.0f + m.mb + 0.001f * static_cast<float>(i % 997);
}

// Posts every receive of `inbox` (in its order), then every send of `outbox` (in its order),
// then waits for all, and checks each received payload.
void Exchange(Transport& t, int peer, const std::vector<Message>& outbox,
              const std::vector<Message>& inbox, const std::string& what) {
  const int me = t.rank();
  std::vector<float*> out, in;
  for (const Message& m : outbox) {
    out.push_back(DeviceBuffer(m.n, [&](size_t i) { return Payload(me, m, i); }));
  }
  for (const Message& m : inbox) in.push_back(DeviceBuffer(m.n, [](size_t) { return -1.0f; }));
  std::vector<pp::comm::Handle> handles;
  for (size_t k = 0; k < inbox.size(); ++k) {
    const Message& m = inbox[k];
    auto h = t.Irecv(peer, m.channel, BoundaryTag(m.channel == 1, 0, m.mb), in[k], m.n);
    CheckStatus(h.status(), absl::StrCat(what, ": post receive ", k));
    if (h.ok()) handles.push_back(*h);
  }
  for (size_t k = 0; k < outbox.size(); ++k) {
    const Message& m = outbox[k];
    auto h = t.Isend(peer, m.channel, BoundaryTag(m.channel == 1, 0, m.mb), out[k], m.n);
    CheckStatus(h.status(), absl::StrCat(what, ": post send ", k));
    if (h.ok()) handles.push_back(*h);
  }
  for (pp::comm::Handle h : handles) CheckStatus(t.Wait(h), absl::StrCat(what, ": wait"));
  for (size_t k = 0; k < inbox.size(); ++k) {
    Check(Holds(in[k], inbox[k].n, [&](size_t i) { return Payload(peer, inbox[k], i); }),
          absl::StrCat(what, ": payload of received message ", k));
  }
  for (float* p : out) FreeBuffer(p);
  for (float* p : in) FreeBuffer(p);
}

// Both channels, both directions; all receives are posted before any send.
void ReceivesFirst(pp::comm::KvStore& kv, int rank) {
  pp::comm::TransportOptions options = Options(rank, 2, "receives-first");
  options.peers = {1 - rank};
  std::unique_ptr<Transport> t = Connect(kv, options);
  if (t == nullptr) return;
  const std::vector<Message> both = {{0, 0, 1000}, {1, 0, 1000}, {0, 1, 3000}, {1, 1, 10}};
  Exchange(*t, 1 - rank, both, both, "receives first");
}

// The sender posts in one order, the receiver in another that agrees per channel only; the
// sizes differ, so a message matched in the wrong place shows in its payload or its size.
void ChannelOrders(pp::comm::KvStore& kv, int rank) {
  pp::comm::TransportOptions options = Options(rank, 2, "channel-orders");
  options.peers = {1 - rank};
  std::unique_ptr<Transport> t = Connect(kv, options);
  if (t == nullptr) return;
  const std::vector<Message> a = {{0, 0, 100}, {1, 0, 200}, {0, 1, 1 << 22}, {1, 1, 400},
                                  {0, 2, 500}};
  const std::vector<Message> b = {{1, 0, 200}, {1, 1, 400}, {0, 0, 100}, {0, 1, 1 << 22},
                                  {0, 2, 500}};
  Exchange(*t, 1 - rank, /*outbox=*/a, /*inbox=*/b, "channel orders");
}

void Refusals(pp::comm::KvStore& kv, int rank) {
  pp::comm::TransportOptions options = Options(rank, 2, "refusals");
  options.point_to_point = false;
  std::unique_ptr<Transport> group = Connect(kv, options);
  float* data = DeviceBuffer(10, [](size_t) { return 1.0f; });
  if (group != nullptr) {
    auto send = group->Isend(1 - rank, 0, 1, data, 10);
    Check(send.status().code() == absl::StatusCode::kFailedPrecondition,
          absl::StrCat("a collectives-only group refuses sends: ", send.status().ToString()));
    CheckStatus(group->AllReduceSum(data, 10), "group all-reduce after a refused send");
  }
  options = Options(rank, 2, "one-channel");
  options.channels = 1;
  std::unique_ptr<Transport> one = Connect(kv, options);
  if (one != nullptr) {
    auto send = one->Isend(1 - rank, 1, 1, data, 10);
    Check(send.status().code() == absl::StatusCode::kFailedPrecondition &&
              send.status().message().find("channel 1") != std::string::npos,
          absl::StrCat("a channel not connected is refused by name: ", send.status().ToString()));
    auto self = one->Irecv(rank, 0, 1, data, 10);
    Check(self.status().code() == absl::StatusCode::kInvalidArgument,
          absl::StrCat("a receive from itself is refused: ", self.status().ToString()));
  }
  FreeBuffer(data);
}

// Rank 0 waits for a message rank 1 never sends. `done` tells rank 1 when rank 0 is through.
void NeverSent(pp::comm::KvStore& kv, int rank, absl::Notification& done) {
  pp::comm::TransportOptions options = Options(rank, 2, "never-sent");
  options.peers = {1 - rank};
  options.timeout = absl::Seconds(5);  // connecting included
  std::unique_ptr<Transport> t = Connect(kv, options);
  float* data = DeviceBuffer(10, [](size_t) { return 1.0f; });
  if (rank == 0 && t != nullptr) {
    auto h = t->Irecv(1, 1, BoundaryTag(true, 0, 7), data, 10);
    CheckStatus(h.status(), "post a receive never sent");
    const absl::Status waited = h.ok() ? t->Wait(*h) : absl::OkStatus();
    Check(waited.code() == absl::StatusCode::kDeadlineExceeded &&
              waited.message().find("gradient 0->1 mb 7") != std::string::npos &&
              waited.message().find("receive from rank 1 on channel 1") != std::string::npos,
          absl::StrCat("a receive never sent times out, named: ", waited.ToString()));
    const absl::Status after = t->Isend(1, 0, 1, data, 10).status();
    Check(after.code() == absl::StatusCode::kDeadlineExceeded,
          absl::StrCat("the transport is unusable after a timeout: ", after.ToString()));
  }
  if (rank == 0) done.Notify();
  done.WaitForNotification();
  t.reset();  // with its aborted communicators: no second abort
  FreeBuffer(data);
}

// Rank 0 waits for a message while another thread aborts the transport.
void AbortWhileWaiting(pp::comm::KvStore& kv, int rank, absl::Notification& done) {
  pp::comm::TransportOptions options = Options(rank, 2, "abort");
  options.peers = {1 - rank};
  std::unique_ptr<Transport> t = Connect(kv, options);
  float* data = DeviceBuffer(10, [](size_t) { return 1.0f; });
  if (rank == 0 && t != nullptr) {
    auto h = t->Irecv(1, 0, 1, data, 10);
    CheckStatus(h.status(), "post a receive to abort");
    std::thread aborter([&] {
      absl::SleepFor(absl::Milliseconds(200));
      t->Abort();
    });
    const absl::Status waited = h.ok() ? t->Wait(*h) : absl::OkStatus();
    aborter.join();
    Check(waited.code() == absl::StatusCode::kAborted,
          absl::StrCat("Abort() fails the pending wait: ", waited.ToString()));
    const absl::Status after = t->Barrier();
    Check(after.code() == absl::StatusCode::kAborted,
          absl::StrCat("and every later call: ", after.ToString()));
    t->Abort();  // again: the communicators were aborted once and stay so
  }
  if (rank == 0) done.Notify();
  done.WaitForNotification();
  t.reset();
  FreeBuffer(data);
}

void Rank(pp::comm::KvStore& kv, int rank, int size, absl::Notification* done) {
  if (cudaSetDevice(rank) != cudaSuccess) {
    Check(false, absl::StrCat("cudaSetDevice ", rank));
    return;
  }
  Collectives(kv, rank, size);
  if (size < 2) return;
  ReceivesFirst(kv, rank);
  ChannelOrders(kv, rank);
  Refusals(kv, rank);
  NeverSent(kv, rank, done[0]);
  AbortWhileWaiting(kv, rank, done[1]);
}

}  // namespace

int main() {
  // This binary calls CUDA before the plugin is loaded, so it sets what the plugin's loader
  // would (kernels/cuda/plugin.cc): eager module loading, a hardware queue per stream.
  setenv("CUDA_MODULE_LOADING", "EAGER", 1);
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  int devices = 0;  // untouched without a driver
  cudaGetDeviceCount(&devices);
  if (devices < 1) {
    std::printf("no CUDA device: skipped\n");
    return 77;
  }
  const int size = devices >= 2 ? 2 : 1;
  std::unique_ptr<pp::comm::KvStore> kv = pp::comm::NewMemoryKvStore();
  absl::Notification done[2];
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) threads.emplace_back([&, r] { Rank(*kv, r, size, done); });
  for (auto& t : threads) t.join();
  std::printf("%d ranks on %d devices: %s\n", size, devices, failures == 0 ? "ok" : "FAILED");
  return failures == 0 ? 0 : 1;
}
