// The NCCL half of the CUDA plugin (C ABI and its rules: kernels/cuda/plugin_abi.h). It is built
// into libpp_cuda.so, never into a binary; nccl_transport.cc turns it into a comm::Transport and
// does the rendezvous, so this file knows nothing of the KvStore.
// NCCL has no tags and runs the operations of one communicator in issue order, so a receive
// posted ahead would block a later send on the same communicator. Each (ordered pair, channel)
// therefore gets its own two-rank communicator (rank 0 of it sends, rank 1 receives) on its own
// stream: the messages of one direction and channel match in posting order, which is the
// program order on both sides. A world communicator carries the collectives.
// Every communicator is non-blocking (config.blocking = 0): every call returns at once (maybe
// with ncclInProgress), so waits poll with a deadline and can give up instead of hanging.
// One mutex serialises every call with Abort and the destructor, so a communicator is aborted
// exactly once and never used afterwards.
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "kernels/cuda/plugin.h"
#include "kernels/cuda/sync.h"

static_assert(sizeof(ncclUniqueId) == PP_NCCL_ID_BYTES, "ncclUniqueId size changed");

namespace pp::comm {
namespace {

namespace cuda = kernels::cuda;

absl::Status CudaError(const std::string& what, cudaError_t error) {
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(error)));
}

absl::Status NcclError(const std::string& what, ncclResult_t result) {
  return absl::UnavailableError(absl::StrCat(what, ": ", ncclGetErrorString(result)));
}

ncclUniqueId ToId(const char* bytes) {
  ncclUniqueId id;
  std::memcpy(id.internal, bytes, sizeof(id.internal));
  return id;
}

// One communicator and the stream its operations run on.
struct Comm {
  std::string name;  // in errors: "world", "send to rank 1 on channel 0"
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  bool aborted = false;  // ncclCommAbort ran: the handle is gone
};

using PairKey = std::pair<int, int>;  // (peer, channel)

// Errors that leave every communicator as it was: the call was refused before NCCL saw it.
bool LeavesCommsIntact(const absl::Status& status) {
  return status.code() == absl::StatusCode::kInvalidArgument ||
         status.code() == absl::StatusCode::kFailedPrecondition;
}

}  // namespace

// Outside the anonymous namespace: the C ABI's PpNccl derives from it.
class Nccl {
 public:
  explicit Nccl(const PpNcclConfig& config)
      : rank_(config.rank),
        size_(config.size),
        device_(config.device),
        timeout_(absl::Seconds(config.timeout_seconds)) {}

  // Aborts what is left (a kernel spinning for a peer dies with it), then releases without
  // synchronising the device: stream-ordered free, stream and event destruction do not wait.
  ~Nccl() {
    absl::MutexLock lock(&mu_);
    cudaSetDevice(device_);
    AbortComms();
    for (auto& [handle, op] : pending_) cudaEventDestroy(op.event);
    if (scratch_ != nullptr) cudaFreeAsync(scratch_, world_.stream);
    ForEachComm([](Comm& c) {
      if (c.stream != nullptr) cudaStreamDestroy(c.stream);
    });
    if (event_ != nullptr) cudaEventDestroy(event_);
    // After a failure a copy into it may still be queued: such a buffer stays out of the pool.
    if (broken_.ok() && !aborted_.load()) cuda::ReturnPinned(pinned_);
  }

  absl::Status Connect(const PpNcclConfig& config) {
    absl::MutexLock lock(&mu_);
    absl::Status status = ConnectLocked(config);
    if (!status.ok()) Break(status);
    return status;
  }

  // On success, *handle names the operation for Wait.
  absl::Status Start(bool send, int peer, int channel, float* data, size_t n, int64_t* handle) {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = Usable(); !s.ok()) return s;
    return Checked(StartLocked(send, peer, channel, data, n, handle));
  }

  absl::Status Wait(int64_t handle) {
    absl::MutexLock lock(&mu_);
    auto it = pending_.find(handle);
    if (it == pending_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", rank_, ": unknown transport handle ", handle));
    }
    const Pending op = it->second;
    pending_.erase(it);
    absl::Status status = Usable();
    if (status.ok()) status = Checked(WaitLocked(op));
    cudaEventDestroy(op.event);
    return status;
  }

  absl::Status Gather(const void* mine, size_t bytes, void* out) {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = Usable(); !s.ok()) return s;
    return Checked(GatherLocked(mine, bytes, out));
  }

  absl::Status AllReduceSum(float* data, size_t n) {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = Usable(); !s.ok()) return s;
    return Checked(AllReduceLocked(data, n));
  }

  // The flag makes a wait in progress give up at its next poll (within microseconds) and let go
  // of the mutex; then the communicators are aborted here, unless that call did it already.
  void Abort() {
    aborted_.store(true);
    absl::MutexLock lock(&mu_);
    AbortComms();
  }

 private:
  static constexpr size_t kScratchBytes = 1 << 20;  // all-gather staging, warm-up messages

  struct Pending {
    Comm* comm = nullptr;
    cudaEvent_t event = nullptr;
  };

  // ---- connecting ------------------------------------------------------------------------------

  absl::Status ConnectLocked(const PpNcclConfig& config) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (absl::Status s = UseDevice(); !s.ok()) return s;
    if (absl::Status s = cuda::PrepareDevicePool(device_); !s.ok()) return s;
    const absl::Time deadline = absl::Now() + timeout_;
    cudaError_t error = cudaEventCreateWithFlags(&event_, cudaEventDisableTiming);
    if (error == cudaSuccess) error = cuda::TakePinned(kScratchBytes, &pinned_);
    if (error != cudaSuccess) return CudaError("NCCL set-up", error);
    if (absl::Status s = InitComm("world", ToId(config.world_id), rank_, size_, &world_);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = InitPairs(config); !s.ok()) return s;
    // Stream-ordered (cudaMalloc would synchronise the device); the host waits for it below.
    error = cudaMallocAsync(&scratch_, kScratchBytes, world_.stream);
    if (error != cudaSuccess) return CudaError("NCCL scratch buffer", error);
    absl::Status status = absl::OkStatus();
    ForEachComm([&](Comm& c) {
      if (status.ok()) status = AwaitComm(c, deadline, "initialisation");
    });
    if (status.ok()) status = AwaitOn(world_, deadline, "scratch allocation");
    if (status.ok() && config.eager != 0) status = WarmUp(deadline);
    return status;
  }

  absl::Status InitPairs(const PpNcclConfig& config) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (config.num_peers > 0 && config.channels < 1) {
      return absl::InvalidArgumentError(absl::StrCat("bad channel count ", config.channels));
    }
    for (int i = 0; i < config.num_peers; ++i) {
      const int peer = config.peers[i];
      if (peer < 0 || peer >= size_ || peer == rank_ || send_.count({peer, 0}) > 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("rank ", rank_, ": bad or repeated peer ", peer, " (world size ", size_,
                         ")"));
      }
      for (int c = 0; c < config.channels; ++c) {
        const int at = i * config.channels + c;
        const std::string on = absl::StrCat("rank ", peer, " on channel ", c);
        if (absl::Status s = InitComm(absl::StrCat("send to ", on), ToId(config.send_ids[at]),
                                      0, 2, &send_[{peer, c}]);
            !s.ok()) {
          return s;
        }
        if (absl::Status s = InitComm(absl::StrCat("receive from ", on),
                                      ToId(config.recv_ids[at]), 1, 2, &recv_[{peer, c}]);
            !s.ok()) {
          return s;
        }
      }
    }
    return absl::OkStatus();
  }

  // Starts the initialisation of `comm` on a stream of its own; AwaitComm completes it. All of
  // them run at once (each in NCCL's own thread), so their order does not matter to the peers.
  absl::Status InitComm(const std::string& name, ncclUniqueId id, int rank, int nranks,
                        Comm* comm) {
    comm->name = name;
    cudaError_t error = cudaStreamCreateWithFlags(&comm->stream, cudaStreamNonBlocking);
    if (error != cudaSuccess) return CudaError(absl::StrCat("stream for ", name), error);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t result = ncclCommInitRankConfig(&comm->comm, nranks, id, rank, &config);
    if (result != ncclSuccess && result != ncclInProgress) {
      return NcclError(absl::StrCat("rank ", rank_, " ncclCommInitRank ", name), result);
    }
    return absl::OkStatus();
  }

  // NCCL connects a pair at its first transfer, and that needs the peer inside NCCL too. One
  // float each way on every pair communicator, all posted before any is waited for (each pair
  // has its own stream), connects them all now, whatever order the peers post them in.
  absl::Status WarmUp(absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    float* slots = static_cast<float*>(scratch_);  // 0: what is sent; 1..: one per receive
    if (recv_.size() + 1 > kScratchBytes / sizeof(float)) {
      return absl::InvalidArgumentError("too many NCCL communicators for the warm-up");
    }
    size_t slot = 1;
    absl::Status status = absl::OkStatus();
    for (auto& [key, c] : send_) {
      if (status.ok()) status = Posted(c, ncclSend(slots, 1, ncclFloat, 1, c.comm, c.stream));
    }
    for (auto& [key, c] : recv_) {
      if (status.ok()) {
        status = Posted(c, ncclRecv(slots + slot++, 1, ncclFloat, 0, c.comm, c.stream));
      }
    }
    auto await = [&](Comm& c) {
      if (status.ok()) status = AwaitComm(c, deadline, "warm-up enqueue");
      if (status.ok()) status = AwaitOn(c, deadline, "warm-up transfer");
    };
    for (auto& [key, c] : send_) await(c);
    for (auto& [key, c] : recv_) await(c);
    return status;
  }

  // ---- operations ------------------------------------------------------------------------------

  absl::Status StartLocked(bool send, int peer, int channel, float* data, size_t n,
                           int64_t* handle) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (peer < 0 || peer >= size_ || peer == rank_) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", rank_, ": bad peer ", peer, " (world size ", size_, ")"));
    }
    std::map<PairKey, Comm>& comms = send ? send_ : recv_;
    auto found = comms.find({peer, channel});
    if (found == comms.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", rank_, " has no NCCL communicator to ", send ? "send to" : "receive from",
          " rank ", peer, " on channel ", channel,
          comms.empty() ? " (connected for collectives only)"
                        : " (not a listed peer, or no such channel)"));
    }
    Comm& c = found->second;
    if (absl::Status s = UseDevice(); !s.ok()) return s;
    if (absl::Status s = OrderAfterCompute(c); !s.ok()) return s;
    const ncclResult_t result = send ? ncclSend(data, n, ncclFloat, 1, c.comm, c.stream)
                                     : ncclRecv(data, n, ncclFloat, 0, c.comm, c.stream);
    if (absl::Status s = Posted(c, result); !s.ok()) return s;
    // A non-blocking communicator may still be enqueueing: the event must come after it.
    if (absl::Status s = AwaitComm(c, absl::Now() + timeout_, "enqueue"); !s.ok()) return s;
    Pending op{&c, nullptr};
    cudaError_t error = cudaEventCreateWithFlags(&op.event, cudaEventDisableTiming);
    if (error == cudaSuccess) error = cudaEventRecord(op.event, c.stream);
    if (error != cudaSuccess) {
      if (op.event != nullptr) cudaEventDestroy(op.event);
      return CudaError(absl::StrCat("rank ", rank_, " ", c.name, ": cudaEventRecord"), error);
    }
    *handle = next_handle_++;
    pending_.emplace(*handle, op);
    return absl::OkStatus();
  }

  absl::Status WaitLocked(const Pending& op) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (absl::Status s = UseDevice(); !s.ok()) return s;
    return Awaited(*op.comm, "waiting",
                   cuda::AwaitEvent(op.event, absl::Now() + timeout_,
                                    [&] { return Health(*op.comm); }));
  }

  // All-gather of `bytes` host bytes per rank into `out` (size_ * bytes): through page-locked
  // memory (a copy from or to pageable memory may block without a deadline) and the scratch.
  absl::Status GatherLocked(const void* mine, size_t bytes, void* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (bytes * (size_ + 1) > kScratchBytes) {
      return absl::InvalidArgumentError(absl::StrCat("NCCL all-gather of ", bytes,
                                                     " bytes per rank exceeds the scratch"));
    }
    if (absl::Status s = UseDevice(); !s.ok()) return s;
    char* host = static_cast<char*>(pinned_);
    char* device = static_cast<char*>(scratch_);
    std::memcpy(host, mine, bytes);
    cudaError_t error =
        cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, world_.stream);
    if (error != cudaSuccess) return CudaError("all-gather copy to the device", error);
    ncclResult_t result =
        ncclAllGather(device, device + bytes, bytes, ncclChar, world_.comm, world_.stream);
    if (absl::Status s = Posted(world_, result); !s.ok()) return s;
    const absl::Time deadline = absl::Now() + timeout_;
    if (absl::Status s = AwaitComm(world_, deadline, "all-gather enqueue"); !s.ok()) return s;
    error = cudaMemcpyAsync(host + bytes, device + bytes, bytes * size_, cudaMemcpyDeviceToHost,
                            world_.stream);
    if (error != cudaSuccess) return CudaError("all-gather copy to the host", error);
    if (absl::Status s = AwaitOn(world_, deadline, "all-gather"); !s.ok()) return s;
    std::memcpy(out, host + bytes, bytes * size_);
    return absl::OkStatus();
  }

  absl::Status AllReduceLocked(float* data, size_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (absl::Status s = UseDevice(); !s.ok()) return s;
    if (absl::Status s = OrderAfterCompute(world_); !s.ok()) return s;
    const ncclResult_t result =
        ncclAllReduce(data, data, n, ncclFloat, ncclSum, world_.comm, world_.stream);
    if (absl::Status s = Posted(world_, result); !s.ok()) return s;
    const absl::Time deadline = absl::Now() + timeout_;
    if (absl::Status s = AwaitComm(world_, deadline, "all-reduce enqueue"); !s.ok()) return s;
    return AwaitOn(world_, deadline, "all-reduce");
  }

  // ---- waiting and failing -------------------------------------------------------------------

  // `c`'s stream waits (on the GPU) for the compute queued so far on this device: buffers
  // zeroed or produced there are complete before NCCL touches them (plugin_abi.h).
  absl::Status OrderAfterCompute(Comm& c) {
    const cudaError_t error = cuda::OrderAfterCompute(device_, c.stream);
    if (error != cudaSuccess) {
      return CudaError(absl::StrCat("rank ", rank_, " ", c.name, ": ordering after compute"),
                       error);
    }
    return absl::OkStatus();
  }

  // What a NCCL call on `c` returned: ncclInProgress is fine (AwaitComm completes it).
  absl::Status Posted(const Comm& c, ncclResult_t result) {
    if (result == ncclSuccess || result == ncclInProgress) return absl::OkStatus();
    return NcclError(absl::StrCat("rank ", rank_, " ", c.name), result);
  }

  // Aborted once Abort() was called, else NCCL's asynchronous error of `c` if it has one; its
  // state (ncclSuccess or ncclInProgress) in *state when given.
  absl::Status Health(const Comm& c, ncclResult_t* state = nullptr) {
    if (aborted_.load()) return absl::AbortedError("transport aborted");
    ncclResult_t ignored = ncclSuccess;
    if (state == nullptr) state = &ignored;
    const ncclResult_t result = ncclCommGetAsyncError(c.comm, state);
    if (result != ncclSuccess) return NcclError("ncclCommGetAsyncError", result);
    if (*state != ncclSuccess && *state != ncclInProgress) return NcclError("NCCL", *state);
    return absl::OkStatus();
  }

  // Polls `c` until its pending call (initialisation, enqueue) finished.
  absl::Status AwaitComm(Comm& c, absl::Time deadline, const std::string& what) {
    while (true) {
      ncclResult_t state = ncclSuccess;
      absl::Status status = Health(c, &state);
      if (status.ok() && state == ncclSuccess) return status;
      if (status.ok() && absl::Now() > deadline) status = absl::DeadlineExceededError("timed out");
      if (!status.ok()) return Awaited(c, what, status);
      absl::SleepFor(absl::Microseconds(20));
    }
  }

  // Waits for the work queued so far on `c`'s stream.
  absl::Status AwaitOn(Comm& c, absl::Time deadline, const std::string& what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return Awaited(c, what,
                   cuda::AwaitStream(c.stream, event_, deadline, [&] { return Health(c); }));
  }

  // `status` of a wait on `c`, named: "rank 0 receive from rank 1 on channel 1: waiting: timed
  // out after 30s".
  absl::Status Awaited(const Comm& c, const std::string& what, const absl::Status& status) {
    if (status.ok()) return status;
    std::string message = absl::StrCat("rank ", rank_, " ", c.name, ": ", what, ": ",
                                       status.message());
    if (status.code() == absl::StatusCode::kDeadlineExceeded) {
      absl::StrAppend(&message, " after ", absl::FormatDuration(timeout_));
    }
    return absl::Status(status.code(), message);
  }

  // Refuses every call once aborted or broken, so no communicator is used after its abort.
  absl::Status Usable() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (aborted_.load()) {
      AbortComms();
      return absl::AbortedError(absl::StrCat("rank ", rank_, ": NCCL transport aborted"));
    }
    if (!broken_.ok()) {
      return absl::Status(broken_.code(), absl::StrCat("NCCL transport unusable after: ",
                                                       broken_.message()));
    }
    return absl::OkStatus();
  }

  // After a call: a failure of NCCL, CUDA or a deadline (anything but a refused argument)
  // leaves the communicators in an unknown state, so all of them are aborted, as is everything
  // once Abort() was called.
  absl::Status Checked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!status.ok() && !LeavesCommsIntact(status)) Break(status);
    if (aborted_.load()) AbortComms();
    return status;
  }

  void Break(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (broken_.ok()) broken_ = status;
    AbortComms();
  }

  // Each communicator exactly once: the handle is freed by the abort.
  // ncclCommAbort raises the communicator's abort flag, which makes its kernels return, and then
  // frees its memory; one of those frees (cuMemFreeHost) waits until every kernel of the process
  // has finished. Aborted one after another, the first communicator's free waits for the kernels
  // of those not flagged yet, which spin for peers that may never come: a hang, seen on an H200
  // when a peer stalled. So every communicator is aborted at once, from a thread each: all flags
  // are up before any free can wait.
  void AbortComms() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<std::thread> aborts;
    ForEachComm([&](Comm& c) {
      if (c.comm == nullptr || c.aborted) return;
      aborts.emplace_back([comm = c.comm, device = device_] {
        cudaSetDevice(device);
        ncclCommAbort(comm);
      });
      c.aborted = true;
    });
    for (std::thread& abort : aborts) abort.join();
  }

  void ForEachComm(const std::function<void(Comm&)>& fn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    fn(world_);
    for (auto& [key, c] : send_) fn(c);
    for (auto& [key, c] : recv_) fn(c);
  }

  // Calls come from any thread: each makes the transport's device current first.
  absl::Status UseDevice() {
    const cudaError_t error = cudaSetDevice(device_);
    if (error != cudaSuccess) return CudaError(absl::StrCat("cuda:", device_), error);
    return absl::OkStatus();
  }

  const int rank_;
  const int size_;
  const int device_;
  const absl::Duration timeout_;
  std::atomic<bool> aborted_{false};  // set by Abort() without the mutex; read by every poll
  absl::Mutex mu_;                    // held by every call, Abort and the destructor
  Comm world_ ABSL_GUARDED_BY(mu_);
  std::map<PairKey, Comm> send_ ABSL_GUARDED_BY(mu_);  // fixed after Connect
  std::map<PairKey, Comm> recv_ ABSL_GUARDED_BY(mu_);
  void* scratch_ ABSL_GUARDED_BY(mu_) = nullptr;  // kScratchBytes of device memory
  void* pinned_ ABSL_GUARDED_BY(mu_) = nullptr;   // kScratchBytes page-locked, from the pool
  cudaEvent_t event_ ABSL_GUARDED_BY(mu_) = nullptr;  // for waits on a whole stream
  absl::Status broken_ ABSL_GUARDED_BY(mu_);          // the first failure
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

int pp_nccl_send(PpNccl* nccl, int peer, int channel, uint64_t tag, const float* data, size_t n,
                 int64_t* handle, PpCudaError* error) {
  return pp::kernels::ToPluginError(
      nccl->Start(/*send=*/true, peer, channel, const_cast<float*>(data), n, handle), error);
}

int pp_nccl_recv(PpNccl* nccl, int peer, int channel, uint64_t tag, float* data, size_t n,
                 int64_t* handle, PpCudaError* error) {
  return pp::kernels::ToPluginError(
      nccl->Start(/*send=*/false, peer, channel, data, n, handle), error);
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
