// Event polling, the registry of compute streams and the pinned-buffer pool (sync.h).
#include "kernels/cuda/sync.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"

namespace pp::kernels::cuda {
namespace {

// Polls spin (yielding) this many times before sleeping between polls: most waits are short
// (a copy, a small message) and a sleep would add its granularity to each.
constexpr int kSpinPolls = 200;
constexpr absl::Duration kPollSleep = absl::Microseconds(20);

struct ComputeStream {
  int device;
  cudaStream_t stream;
  cudaEvent_t event;  // re-recorded by each OrderAfterCompute (the wait captures it at once)
};

std::mutex& RegistryMutex() {
  static std::mutex* mu = new std::mutex;  // never destroyed: used until the process ends
  return *mu;
}

std::vector<ComputeStream>& Registry() {
  static auto* streams = new std::vector<ComputeStream>;
  return *streams;
}

struct PinnedPool {
  std::mutex mu;
  std::vector<std::pair<void*, size_t>> free;  // (buffer, bytes)
  std::vector<std::pair<void*, size_t>> all;
};

PinnedPool& Pinned() {
  static auto* pool = new PinnedPool;
  return *pool;
}

absl::Status PoolFailure(int device, absl::string_view what, cudaError_t error) {
  return absl::UnavailableError(
      absl::StrCat("cuda:", device, ": ", what, ": ", cudaGetErrorString(error)));
}

}  // namespace

absl::Status PrepareDevicePool(int device) {
  cudaMemPool_t pool;
  cudaError_t error = cudaDeviceGetDefaultMemPool(&pool, device);
  if (error != cudaSuccess) return PoolFailure(device, "cudaDeviceGetDefaultMemPool", error);
  uint64_t keep_all = std::numeric_limits<uint64_t>::max();
  error = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all);
  if (error != cudaSuccess) return PoolFailure(device, "the pool's release threshold", error);
  int count = 0;
  error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) return PoolFailure(device, "cudaGetDeviceCount", error);
  for (int peer = 0; peer < count; ++peer) {
    int can = 0;
    if (peer == device || cudaDeviceCanAccessPeer(&can, peer, device) != cudaSuccess || !can) {
      continue;
    }
    cudaMemAccessDesc access{};
    access.location.type = cudaMemLocationTypeDevice;
    access.location.id = peer;
    access.flags = cudaMemAccessFlagsProtReadWrite;
    error = cudaMemPoolSetAccess(pool, &access, 1);
    if (error != cudaSuccess) {
      return PoolFailure(device, absl::StrCat("pool access for cuda:", peer), error);
    }
  }
  return absl::OkStatus();
}

absl::Status AwaitEvent(cudaEvent_t event, absl::Time deadline,
                        const std::function<absl::Status()>& check) {
  for (int polls = 0;; ++polls) {
    const cudaError_t error = cudaEventQuery(event);
    if (error == cudaSuccess) return absl::OkStatus();
    if (error != cudaErrorNotReady) return absl::InternalError(cudaGetErrorString(error));
    if (check) {
      if (absl::Status s = check(); !s.ok()) return s;
    }
    if (absl::Now() > deadline) return absl::DeadlineExceededError("timed out");
    if (polls < kSpinPolls) {
      std::this_thread::yield();
    } else {
      absl::SleepFor(kPollSleep);
    }
  }
}

absl::Status AwaitStream(cudaStream_t stream, cudaEvent_t event, absl::Time deadline,
                         const std::function<absl::Status()>& check) {
  const cudaError_t error = cudaEventRecord(event, stream);
  if (error != cudaSuccess) {
    return absl::InternalError(absl::StrCat("cudaEventRecord: ", cudaGetErrorString(error)));
  }
  return AwaitEvent(event, deadline, check);
}

cudaError_t RegisterCompute(int device, cudaStream_t stream) {
  cudaEvent_t event = nullptr;
  const cudaError_t error = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
  if (error != cudaSuccess) return error;
  std::lock_guard<std::mutex> lock(RegistryMutex());
  Registry().push_back({device, stream, event});
  return cudaSuccess;
}

void UnregisterCompute(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  std::vector<ComputeStream>& streams = Registry();
  for (auto it = streams.begin(); it != streams.end(); ++it) {
    if (it->stream != stream) continue;
    cudaEventDestroy(it->event);  // does not wait: released once its work completed
    streams.erase(it);
    return;
  }
}

cudaError_t OrderAfterCompute(int device, cudaStream_t stream) {
  // Under the lock: the event is re-recorded by every caller, and a stream may not be
  // destroyed while it is being recorded on.
  std::lock_guard<std::mutex> lock(RegistryMutex());
  for (const ComputeStream& compute : Registry()) {
    if (compute.device != device) continue;
    cudaError_t error = cudaEventRecord(compute.event, compute.stream);
    if (error == cudaSuccess) error = cudaStreamWaitEvent(stream, compute.event, 0);
    if (error != cudaSuccess) return error;
  }
  return cudaSuccess;
}

cudaError_t TakePinned(size_t bytes, void** buffer) {
  PinnedPool& pool = Pinned();
  std::lock_guard<std::mutex> lock(pool.mu);
  // The smallest free buffer that is large enough.
  auto best = pool.free.end();
  for (auto it = pool.free.begin(); it != pool.free.end(); ++it) {
    if (it->second >= bytes && (best == pool.free.end() || it->second < best->second)) best = it;
  }
  if (best != pool.free.end()) {
    *buffer = best->first;
    pool.free.erase(best);
    return cudaSuccess;
  }
  const cudaError_t error = cudaHostAlloc(buffer, std::max<size_t>(bytes, 1), cudaHostAllocPortable);
  if (error == cudaSuccess) pool.all.emplace_back(*buffer, std::max<size_t>(bytes, 1));
  return error;
}

void ReturnPinned(void* buffer) {
  if (buffer == nullptr) return;
  PinnedPool& pool = Pinned();
  std::lock_guard<std::mutex> lock(pool.mu);
  for (const auto& [p, bytes] : pool.all) {
    if (p == buffer) {
      pool.free.emplace_back(p, bytes);
      return;
    }
  }
}

}  // namespace pp::kernels::cuda
