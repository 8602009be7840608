// The NCCL half of the CUDA plugin (C ABI: kernels/cuda/plugin_abi.h). It is built into
// libpp_cuda.so, never into a binary; nccl_transport.cc turns it into a comm::Transport and does
// the rendezvous, so this file knows nothing of the KvStore.
// NCCL has no tags and runs the operations of one communicator in issue order, so a receive
// posted ahead would block a later send on the same communicator. Each ordered pair of ranks
// therefore gets its own two-rank communicator (rank 0 of it sends, rank 1 receives) on its own
// stream: messages of one direction match in posting order, which is the program order on both
// sides. A world communicator carries the collectives.
// Every communicator is non-blocking (config.blocking = 0) so that waits can poll with a deadline
// and abort instead of hanging.
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "kernels/cuda/plugin.h"

static_assert(sizeof(ncclUniqueId) == PP_NCCL_ID_BYTES, "ncclUniqueId size changed");

namespace pp::comm {
namespace {

absl::Status CudaError(const std::string& what, cudaError_t error) {
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(error)));
}

absl::Status NcclError(const std::string& what, ncclResult_t result) {
  return absl::UnavailableError(absl::StrCat(what, ": ", ncclGetErrorString(result)));
}

// Polls a non-blocking communicator until its pending call finished, or aborts it.
absl::Status AwaitComm(ncclComm_t comm, absl::Time deadline, const std::string& what) {
  while (true) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t result = ncclCommGetAsyncError(comm, &state);
    if (result != ncclSuccess) return NcclError(what, result);
    if (state == ncclSuccess) return absl::OkStatus();
    if (state != ncclInProgress) return NcclError(what, state);
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(what, ": timed out"));
    }
    absl::SleepFor(absl::Microseconds(50));
  }
}

ncclUniqueId ToId(const char* bytes) {
  ncclUniqueId id;
  std::memcpy(id.internal, bytes, sizeof(id.internal));
  return id;
}

struct Channel {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
};

}  // namespace

// Outside the anonymous namespace: the C ABI's PpNccl derives from it.
class Nccl {
 public:
  explicit Nccl(const PpNcclConfig& config)
      : rank_(config.rank),
        size_(config.size),
        device_(config.device),
        timeout_(absl::Seconds(config.timeout_seconds)) {}

  ~Nccl() {
    auto release = [](Channel& c) {
      if (c.comm != nullptr) ncclCommAbort(c.comm);
      if (c.stream != nullptr) cudaStreamDestroy(c.stream);
    };
    absl::MutexLock lock(&mu_);
    for (auto& [handle, op] : pending_) cudaEventDestroy(op.event);
    for (auto& [peer, c] : send_) release(c);
    for (auto& [peer, c] : recv_) release(c);
    release(world_);
    if (scratch_ != nullptr) cudaFree(scratch_);
  }

  absl::Status Connect(const PpNcclConfig& config) {
    if (absl::Status s = UseDevice(); !s.ok()) return s;
    const absl::Time deadline = absl::Now() + timeout_;
    if (absl::Status s = InitComm("world", ToId(config.world_id), rank_, size_, &world_); !s.ok()) {
      return s;
    }
    const int pair_peers = config.send_ids != nullptr ? size_ : 0;
    for (int peer = 0; peer < pair_peers; ++peer) {
      if (peer == rank_) continue;
      if (absl::Status s = InitComm(absl::StrCat(rank_, "-", peer), ToId(config.send_ids[peer]),
                                    0, 2, &send_[peer]);
          !s.ok()) {
        return s;
      }
      if (absl::Status s = InitComm(absl::StrCat(peer, "-", rank_), ToId(config.recv_ids[peer]),
                                    1, 2, &recv_[peer]);
          !s.ok()) {
        return s;
      }
    }
    auto await = [&](Channel& c, const std::string& name) {
      return AwaitComm(c.comm, deadline,
                       absl::StrCat("rank ", rank_, " NCCL init of communicator ", name));
    };
    if (absl::Status s = await(world_, "world"); !s.ok()) return s;
    for (auto& [peer, c] : send_) {
      if (absl::Status s = await(c, absl::StrCat("to rank ", peer)); !s.ok()) return s;
    }
    for (auto& [peer, c] : recv_) {
      if (absl::Status s = await(c, absl::StrCat("from rank ", peer)); !s.ok()) return s;
    }
    cudaError_t error = cudaMalloc(&scratch_, kScratchBytes);
    if (error != cudaSuccess) return CudaError("NCCL scratch buffer", error);
    return absl::OkStatus();
  }

  absl::StatusOr<int64_t> Start(bool send, int peer, uint64_t tag, float* data, size_t n) {
    if (peer < 0 || peer >= size_ || peer == rank_) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", rank_, ": bad peer ", peer, " (world size ", size_, ")"));
    }
    if (absl::Status s = Enter(); !s.ok()) return s;
    std::map<int, Channel>& channels = send ? send_ : recv_;
    auto found = channels.find(peer);
    if (found == channels.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", rank_, ": this NCCL transport was connected for collectives only"));
    }
    Channel& channel = found->second;
    ncclResult_t result = send ? ncclSend(data, n, ncclFloat, 1, channel.comm, channel.stream)
                               : ncclRecv(data, n, ncclFloat, 0, channel.comm, channel.stream);
    if (result != ncclSuccess && result != ncclInProgress) {
      return NcclError(
          absl::StrCat("rank ", rank_, send ? " ncclSend to " : " ncclRecv from ", peer), result);
    }
    // A non-blocking communicator may still be enqueueing: the event must come after it.
    if (result == ncclInProgress) {
      if (absl::Status s = AwaitComm(channel.comm, absl::Now() + timeout_, "NCCL enqueue");
          !s.ok()) {
        return s;
      }
    }
    Pending op{send, peer, tag, nullptr};
    cudaError_t error = cudaEventCreateWithFlags(&op.event, cudaEventDisableTiming);
    if (error == cudaSuccess) error = cudaEventRecord(op.event, channel.stream);
    if (error != cudaSuccess) return CudaError("cudaEventRecord", error);
    absl::MutexLock lock(&mu_);
    const int64_t handle = next_handle_++;
    pending_.emplace(handle, op);
    return handle;
  }

  absl::Status Wait(int64_t handle) {
    if (absl::Status s = UseDevice(); !s.ok()) return s;
    Pending op;
    {
      absl::MutexLock lock(&mu_);
      auto it = pending_.find(handle);
      if (it == pending_.end()) {
        return absl::InvalidArgumentError(absl::StrCat("unknown transport handle ", handle));
      }
      op = it->second;
      pending_.erase(it);
    }
    const std::string what = absl::StrCat("rank ", rank_, op.send ? " send to" : " recv from",
                                          " rank ", op.peer, " (tag ", op.tag, ")");
    Channel& channel = op.send ? send_[op.peer] : recv_[op.peer];
    absl::Status status = AwaitEvent(op.event, channel.comm, what);
    cudaEventDestroy(op.event);
    return status;
  }

  // All-gather of `bytes` host bytes per rank into `out` (size_*bytes), via scratch memory.
  absl::Status Gather(const void* mine, size_t bytes, void* out) {
    if (absl::Status s = Enter(); !s.ok()) return s;
    if (bytes * (size_ + 1) > kScratchBytes) {
      return absl::InvalidArgumentError(absl::StrCat("NCCL all-gather of ", bytes,
                                                     " bytes per rank exceeds the scratch"));
    }
    char* send = static_cast<char*>(scratch_);
    char* recv = send + bytes;
    cudaMemcpyAsync(send, mine, bytes, cudaMemcpyHostToDevice, world_.stream);
    ncclResult_t result = ncclAllGather(send, recv, bytes, ncclChar, world_.comm, world_.stream);
    if (result != ncclSuccess && result != ncclInProgress) {
      return NcclError("NCCL all-gather", result);
    }
    if (result == ncclInProgress) {
      if (absl::Status s = AwaitComm(world_.comm, absl::Now() + timeout_, "NCCL enqueue");
          !s.ok()) {
        return s;
      }
    }
    cudaMemcpyAsync(out, recv, bytes * size_, cudaMemcpyDeviceToHost, world_.stream);
    return SyncWorld("all-gather", ncclSuccess);
  }

  absl::Status AllReduceSum(float* data, size_t n) {
    if (absl::Status s = Enter(); !s.ok()) return s;
    ncclResult_t result =
        ncclAllReduce(data, data, n, ncclFloat, ncclSum, world_.comm, world_.stream);
    if (result != ncclSuccess && result != ncclInProgress) {
      return NcclError("NCCL all-reduce", result);
    }
    return SyncWorld("all-reduce", result);
  }

  void Abort() { aborted_.store(true); }

 private:
  static constexpr size_t kScratchBytes = 1 << 20;

  struct Pending {
    bool send = false;
    int peer = 0;
    uint64_t tag = 0;
    cudaEvent_t event = nullptr;
  };

  absl::Status InitComm(const std::string& name, ncclUniqueId id, int rank, int nranks,
                        Channel* channel) {
    cudaError_t error = cudaStreamCreateWithFlags(&channel->stream, cudaStreamNonBlocking);
    if (error != cudaSuccess) return CudaError("cudaStreamCreate", error);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t result = ncclCommInitRankConfig(&channel->comm, nranks, id, rank, &config);
    if (result != ncclSuccess && result != ncclInProgress) {
      return NcclError(absl::StrCat("ncclCommInitRank ", name), result);
    }
    return absl::OkStatus();
  }

  // Calls come from any thread (a data-parallel bucket all-reduce runs on one of its own): each
  // makes the communicator's device current before touching streams or memory.
  absl::Status Enter() {
    if (absl::Status s = CheckAborted(); !s.ok()) return s;
    return UseDevice();
  }

  absl::Status UseDevice() {
    cudaError_t error = cudaSetDevice(device_);
    if (error != cudaSuccess) return CudaError(absl::StrCat("cuda:", device_), error);
    return absl::OkStatus();
  }

  absl::Status CheckAborted() {
    if (aborted_.load()) return absl::AbortedError("transport aborted");
    return absl::OkStatus();
  }

  // Polls until `event` completed, the communicator failed, the timeout passed, or Abort().
  absl::Status AwaitEvent(cudaEvent_t event, ncclComm_t comm, const std::string& what) {
    const absl::Time deadline = absl::Now() + timeout_;
    while (true) {
      cudaError_t error = cudaEventQuery(event);
      if (error == cudaSuccess) return absl::OkStatus();
      if (error != cudaErrorNotReady) return CudaError(what, error);
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comm, &state);
      if (state != ncclSuccess && state != ncclInProgress) return NcclError(what, state);
      if (aborted_.load()) {
        ncclCommAbort(comm);
        return absl::AbortedError(absl::StrCat(what, " aborted"));
      }
      if (absl::Now() > deadline) {
        ncclCommAbort(comm);
        return absl::DeadlineExceededError(
            absl::StrCat(what, ": timed out after ", absl::FormatDuration(timeout_)));
      }
      absl::SleepFor(absl::Microseconds(20));
    }
  }

  // Waits for the world stream; `issued` is what the last NCCL call on it returned.
  absl::Status SyncWorld(const std::string& what, ncclResult_t issued) {
    if (issued == ncclInProgress) {
      if (absl::Status s = AwaitComm(world_.comm, absl::Now() + timeout_, what); !s.ok()) {
        return s;
      }
    }
    cudaEvent_t event;
    cudaError_t error = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
    if (error == cudaSuccess) error = cudaEventRecord(event, world_.stream);
    if (error != cudaSuccess) return CudaError(what, error);
    absl::Status status = AwaitEvent(event, world_.comm, absl::StrCat("rank ", rank_, " ", what));
    cudaEventDestroy(event);
    return status;
  }

  const int rank_;
  const int size_;
  const int device_;
  const absl::Duration timeout_;
  Channel world_;
  std::map<int, Channel> send_;  // by peer; fixed after Connect
  std::map<int, Channel> recv_;
  void* scratch_ = nullptr;
  std::atomic<bool> aborted_{false};
  absl::Mutex mu_;
  int64_t next_handle_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<int64_t, Pending> pending_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pp::comm

// The opaque handle of the C ABI is the class itself.
struct PpNccl : pp::comm::Nccl {
  using Nccl::Nccl;
};

extern "C" {

int pp_nccl_unique_id(char* id, PpCudaError* error) {
  ncclUniqueId unique;
  const ncclResult_t result = ncclGetUniqueId(&unique);
  if (result != ncclSuccess) {
    return pp::kernels::ToPluginError(pp::comm::NcclError("ncclGetUniqueId", result), error);
  }
  std::memcpy(id, unique.internal, sizeof(unique.internal));
  return 0;
}

int pp_nccl_connect(const PpNcclConfig* config, PpNccl** nccl, PpCudaError* error) {
  auto made = std::make_unique<PpNccl>(*config);
  if (absl::Status s = made->Connect(*config); !s.ok()) {
    return pp::kernels::ToPluginError(s, error);
  }
  *nccl = made.release();
  return 0;
}

void pp_nccl_destroy(PpNccl* nccl) { delete nccl; }

int pp_nccl_send(PpNccl* nccl, int peer, uint64_t tag, const float* data, size_t n,
                 int64_t* handle, PpCudaError* error) {
  absl::StatusOr<int64_t> started =
      nccl->Start(/*send=*/true, peer, tag, const_cast<float*>(data), n);
  if (!started.ok()) return pp::kernels::ToPluginError(started.status(), error);
  *handle = *started;
  return 0;
}

int pp_nccl_recv(PpNccl* nccl, int peer, uint64_t tag, float* data, size_t n, int64_t* handle,
                 PpCudaError* error) {
  absl::StatusOr<int64_t> started = nccl->Start(/*send=*/false, peer, tag, data, n);
  if (!started.ok()) return pp::kernels::ToPluginError(started.status(), error);
  *handle = *started;
  return 0;
}

int pp_nccl_wait(PpNccl* nccl, int64_t handle, PpCudaError* error) {
  return pp::kernels::ToPluginError(nccl->Wait(handle), error);
}

int pp_nccl_all_gather(PpNccl* nccl, const void* mine, size_t bytes, void* out,
                       PpCudaError* error) {
  return pp::kernels::ToPluginError(nccl->Gather(mine, bytes, out), error);
}

int pp_nccl_all_reduce_sum(PpNccl* nccl, float* data, size_t n, PpCudaError* error) {
  return pp::kernels::ToPluginError(nccl->AllReduceSum(data, n), error);
}

void pp_nccl_abort(PpNccl* nccl) { nccl->Abort(); }

}  // extern "C"
