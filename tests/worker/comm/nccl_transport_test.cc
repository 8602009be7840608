// The NCCL transport on the GPUs of this machine; exits 77 (skipped) when there is none.
// One GPU: a world of one (collectives). Two or more: two ranks in threads, tagged P2P both ways.
// Then the same ranks as a collectives-only group (how data- and tensor-parallel groups connect).
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "worker/comm/transport.h"

namespace {

int failures = 0;

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "FAILED: %s\n", what);
    ++failures;
  }
}

pp::comm::TransportOptions Options(int rank, int size) {
  pp::comm::TransportOptions options;
  options.rank = rank;
  options.size = size;
  options.prefix = "nccl-test/";
  options.timeout = absl::Seconds(30);
  options.cuda_device = rank;
  return options;
}

void Rank(pp::comm::KvStore& kv, int rank, int size) {
  auto transport = pp::comm::ConnectNccl(kv, Options(rank, size));
  if (!transport.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, std::string(transport.status().message()).c_str());
    Check(false, "connect");
    return;
  }
  pp::comm::Transport& t = **transport;
  auto all = t.AllGather(std::string(rank + 1, 'a' + rank));
  Check(all.ok() && static_cast<int>(all->size()) == size, "all-gather size");
  for (int r = 0; all.ok() && r < size; ++r) {
    Check((*all)[r] == std::string(r + 1, 'a' + r), "all-gather payload");
  }
  Check(t.Barrier().ok(), "barrier");
  const size_t n = 1000;
  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = rank + 0.5f * i;
  float* device = nullptr;
  cudaMalloc(&device, n * sizeof(float));
  cudaMemcpy(device, host.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  Check(t.AllReduceSum(device, n).ok(), "all-reduce");
  std::vector<float> sum(n);
  cudaMemcpy(sum.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost);
  for (size_t i = 0; i < n; ++i) {
    float want = 0;
    for (int r = 0; r < size; ++r) want += r + 0.5f * i;
    Check(sum[i] == want, "all-reduce value");
    if (sum[i] != want) break;
  }
  if (size >= 2 && rank < 2) {
    // Ranks 0 and 1 exchange: each posts its receive before its send.
    const int peer = 1 - rank;
    float* inbox = nullptr;
    cudaMalloc(&inbox, n * sizeof(float));
    cudaMemcpy(device, host.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    auto recv = t.Irecv(peer, 7, inbox, n);
    auto send = t.Isend(peer, 7, device, n);
    Check(recv.ok() && send.ok(), "post");
    Check(recv.ok() && t.Wait(*recv).ok(), "recv");
    Check(send.ok() && t.Wait(*send).ok(), "send");
    std::vector<float> got(n);
    cudaMemcpy(got.data(), inbox, n * sizeof(float), cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < n; ++i) {
      Check(got[i] == peer + 0.5f * i, "p2p payload");
      if (got[i] != peer + 0.5f * i) break;
    }
    cudaFree(inbox);
  }
  // A data- or tensor-parallel group: collectives only, on keys of its own.
  pp::comm::TransportOptions group_options = Options(rank, size);
  group_options.prefix = "nccl-test/group/";
  group_options.point_to_point = false;
  auto group = pp::comm::ConnectNccl(kv, group_options);
  Check(group.ok(), "connect a collectives-only group");
  if (group.ok()) {
    cudaMemcpy(device, host.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    Check((*group)->AllReduceSum(device, n).ok(), "group all-reduce");
    cudaMemcpy(sum.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost);
    float want = 0;
    for (int r = 0; r < size; ++r) want += r + 0.5f * (n - 1);
    Check(sum[n - 1] == want, "group all-reduce value");
    if (size >= 2) {
      auto send = (*group)->Isend(1 - rank % 2, 1, device, n);
      Check(send.status().code() == absl::StatusCode::kFailedPrecondition,
            "a collectives-only group refuses sends");
    }
  }
  cudaFree(device);
}

}  // namespace

int main() {
  int devices = 0;  // untouched without a driver
  cudaGetDeviceCount(&devices);
  if (devices < 1) {
    std::printf("no CUDA device: skipped\n");
    return 77;
  }
  const int size = devices >= 2 ? 2 : 1;
  std::unique_ptr<pp::comm::KvStore> kv = pp::comm::NewMemoryKvStore();
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) threads.emplace_back([&, r] { Rank(*kv, r, size); });
  for (auto& t : threads) t.join();
  std::printf("%d ranks on %d devices: %s\n", size, devices, failures == 0 ? "ok" : "FAILED");
  return failures == 0 ? 0 : 1;
}
