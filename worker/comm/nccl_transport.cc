// Transport over NCCL. NCCL has no tags and runs the operations of one communicator in issue
// order, so a receive posted ahead would block a later send on the same communicator. Each
// ordered pair of ranks therefore gets its own two-rank communicator (rank 0 of it sends, rank 1
// receives) on its own stream: messages of one direction match in posting order, which is the
// program order on both sides. A world communicator carries the collectives.
// Every communicator is non-blocking (config.blocking = 0) so that waits can poll with a deadline
// and abort instead of hanging.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "worker/comm/transport.h"

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

struct Channel {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
};

class NcclTransport : public Transport {
 public:
  NcclTransport(const TransportOptions& options) : options_(options) {}

  ~NcclTransport() override {
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

  absl::Status Connect(KvStore& store) {
    cudaError_t error = cudaSetDevice(options_.cuda_device);
    if (error != cudaSuccess) {
      return CudaError(absl::StrCat("cuda:", options_.cuda_device), error);
    }
    absl::Time deadline = absl::Now() + options_.timeout;
    // Every id this rank creates is published before any is fetched, so no rank waits on a
    // peer that is itself waiting.
    std::map<std::string, ncclUniqueId> ids;
    std::vector<std::string> created;
    if (options_.rank == 0) created.push_back("world");
    for (int peer = 0; peer < options_.size; ++peer) {
      if (peer != options_.rank) created.push_back(absl::StrCat(options_.rank, "-", peer));
    }
    for (const std::string& name : created) {
      if (absl::Status s = PublishId(store, name, &ids[name]); !s.ok()) return s;
    }
    auto init = [&](const std::string& name, int rank, int nranks, Channel* channel) {
      if (ids.count(name) == 0) {
        if (absl::Status s = FetchId(store, name, &ids[name]); !s.ok()) return s;
      }
      return InitComm(name, ids[name], rank, nranks, channel);
    };
    if (absl::Status s = init("world", options_.rank, options_.size, &world_); !s.ok()) return s;
    for (int peer = 0; peer < options_.size; ++peer) {
      if (peer == options_.rank) continue;
      std::string out = absl::StrCat(options_.rank, "-", peer);
      std::string in = absl::StrCat(peer, "-", options_.rank);
      if (absl::Status s = init(out, 0, 2, &send_[peer]); !s.ok()) return s;
      if (absl::Status s = init(in, 1, 2, &recv_[peer]); !s.ok()) return s;
    }
    auto await = [&](Channel& c, const std::string& name) {
      return AwaitComm(c.comm, deadline,
                       absl::StrCat("rank ", options_.rank, " NCCL init of communicator ", name));
    };
    if (absl::Status s = await(world_, "world"); !s.ok()) return s;
    for (auto& [peer, c] : send_) {
      if (absl::Status s = await(c, absl::StrCat("to rank ", peer)); !s.ok()) return s;
    }
    for (auto& [peer, c] : recv_) {
      if (absl::Status s = await(c, absl::StrCat("from rank ", peer)); !s.ok()) return s;
    }
    error = cudaMalloc(&scratch_, kScratchBytes);
    if (error != cudaSuccess) return CudaError("NCCL scratch buffer", error);
    return absl::OkStatus();
  }

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }

  absl::StatusOr<Handle> Isend(int peer, uint64_t tag, const float* data, size_t n) override {
    return Start(/*send=*/true, peer, tag, const_cast<float*>(data), n);
  }

  absl::StatusOr<Handle> Irecv(int peer, uint64_t tag, float* data, size_t n) override {
    return Start(/*send=*/false, peer, tag, data, n);
  }

  absl::Status Wait(Handle handle) override {
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
    std::string what = absl::StrCat("rank ", rank(), op.send ? " send to" : " recv from",
                                    " rank ", op.peer, " (tag ", op.tag, ")");
    Channel& channel = op.send ? send_[op.peer] : recv_[op.peer];
    absl::Status status = AwaitEvent(op.event, channel.comm, what);
    cudaEventDestroy(op.event);
    return status;
  }

  absl::StatusOr<std::vector<std::string>> AllGather(const std::string& mine) override {
    // Lengths first, then every payload padded to the longest, through device scratch memory.
    std::vector<int64_t> lengths(size());
    int64_t my_length = static_cast<int64_t>(mine.size());
    if (absl::Status s = Gather(&my_length, sizeof(my_length), lengths.data()); !s.ok()) return s;
    size_t longest = static_cast<size_t>(*std::max_element(lengths.begin(), lengths.end()));
    std::string padded = mine;
    padded.resize(std::max<size_t>(longest, 1));
    std::vector<char> all(padded.size() * size());
    if (absl::Status s = Gather(padded.data(), padded.size(), all.data()); !s.ok()) return s;
    std::vector<std::string> result;
    for (int r = 0; r < size(); ++r) result.emplace_back(&all[r * padded.size()], lengths[r]);
    return result;
  }

  absl::Status Barrier() override {
    float one = 1.0f;
    std::vector<char> ignored(sizeof(one) * size());
    return Gather(&one, sizeof(one), ignored.data());
  }

  absl::Status AllReduceSum(float* data, size_t n) override {
    if (absl::Status s = CheckAborted(); !s.ok()) return s;
    ncclResult_t result = ncclAllReduce(data, data, n, ncclFloat, ncclSum, world_.comm,
                                        world_.stream);
    if (result != ncclSuccess && result != ncclInProgress) {
      return NcclError("NCCL all-reduce", result);
    }
    return SyncWorld("all-reduce", result);
  }

  void Abort() override {
    absl::MutexLock lock(&mu_);
    aborted_ = true;
  }

 private:
  static constexpr size_t kScratchBytes = 1 << 20;

  struct Pending {
    bool send = false;
    int peer = 0;
    uint64_t tag = 0;
    cudaEvent_t event = nullptr;
  };

  absl::Status PublishId(KvStore& store, const std::string& name, ncclUniqueId* id) {
    ncclResult_t result = ncclGetUniqueId(id);
    if (result != ncclSuccess) return NcclError("ncclGetUniqueId", result);
    return store.Set(absl::StrCat(options_.prefix, "nccl/", name),
                     std::string(id->internal, sizeof(id->internal)));
  }

  absl::Status FetchId(KvStore& store, const std::string& name, ncclUniqueId* id) {
    std::string key = absl::StrCat(options_.prefix, "nccl/", name);
    absl::StatusOr<std::string> value = store.Get(key, options_.timeout);
    if (!value.ok()) return value.status();
    if (value->size() != sizeof(id->internal)) {
      return absl::DataLossError(absl::StrCat("rendezvous key ", key, " has ", value->size(),
                                              " bytes, not an ncclUniqueId"));
    }
    std::memcpy(id->internal, value->data(), sizeof(id->internal));
    return absl::OkStatus();
  }

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

  absl::Status CheckAborted() {
    absl::MutexLock lock(&mu_);
    if (aborted_) return absl::AbortedError("transport aborted");
    return absl::OkStatus();
  }

  // Polls until `event` completed, the communicator failed, the timeout passed, or Abort().
  absl::Status AwaitEvent(cudaEvent_t event, ncclComm_t comm, const std::string& what) {
    absl::Time deadline = absl::Now() + options_.timeout;
    while (true) {
      cudaError_t error = cudaEventQuery(event);
      if (error == cudaSuccess) return absl::OkStatus();
      if (error != cudaErrorNotReady) return CudaError(what, error);
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comm, &state);
      if (state != ncclSuccess && state != ncclInProgress) return NcclError(what, state);
      if (absl::Status s = CheckAborted(); !s.ok()) {
        ncclCommAbort(comm);
        return absl::AbortedError(absl::StrCat(what, " aborted"));
      }
      if (absl::Now() > deadline) {
        ncclCommAbort(comm);
        return absl::DeadlineExceededError(absl::StrCat(
            what, ": timed out after ", absl::FormatDuration(options_.timeout)));
      }
      absl::SleepFor(absl::Microseconds(20));
    }
  }

  absl::StatusOr<Handle> Start(bool send, int peer, uint64_t tag, float* data, size_t n) {
    if (peer < 0 || peer >= size() || peer == rank()) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", rank(), ": bad peer ", peer, " (world size ", size(), ")"));
    }
    if (absl::Status s = CheckAborted(); !s.ok()) return s;
    Channel& channel = send ? send_[peer] : recv_[peer];
    ncclResult_t result = send ? ncclSend(data, n, ncclFloat, 1, channel.comm, channel.stream)
                               : ncclRecv(data, n, ncclFloat, 0, channel.comm, channel.stream);
    if (result != ncclSuccess && result != ncclInProgress) {
      return NcclError(absl::StrCat("rank ", rank(), send ? " ncclSend to " : " ncclRecv from ",
                                    peer),
                       result);
    }
    // A non-blocking communicator may still be enqueueing: the event must come after it.
    if (result == ncclInProgress) {
      if (absl::Status s = AwaitComm(channel.comm, absl::Now() + options_.timeout, "NCCL enqueue");
          !s.ok()) {
        return s;
      }
    }
    Pending op{send, peer, tag, nullptr};
    cudaError_t error = cudaEventCreateWithFlags(&op.event, cudaEventDisableTiming);
    if (error == cudaSuccess) error = cudaEventRecord(op.event, channel.stream);
    if (error != cudaSuccess) return CudaError("cudaEventRecord", error);
    absl::MutexLock lock(&mu_);
    Handle handle = next_handle_++;
    pending_.emplace(handle, op);
    return handle;
  }

  // All-gather of `bytes` host bytes per rank into `out` (size()*bytes), via scratch memory.
  absl::Status Gather(const void* mine, size_t bytes, void* out) {
    if (absl::Status s = CheckAborted(); !s.ok()) return s;
    if (bytes * (size() + 1) > kScratchBytes) {
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
      if (absl::Status s = AwaitComm(world_.comm, absl::Now() + options_.timeout, "NCCL enqueue");
          !s.ok()) {
        return s;
      }
    }
    cudaMemcpyAsync(out, recv, bytes * size(), cudaMemcpyDeviceToHost, world_.stream);
    return SyncWorld("all-gather", ncclSuccess);
  }

  // Waits for the world stream; `issued` is what the last NCCL call on it returned.
  absl::Status SyncWorld(const std::string& what, ncclResult_t issued) {
    if (issued == ncclInProgress) {
      if (absl::Status s = AwaitComm(world_.comm, absl::Now() + options_.timeout, what); !s.ok()) {
        return s;
      }
    }
    cudaEvent_t event;
    cudaError_t error = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
    if (error == cudaSuccess) error = cudaEventRecord(event, world_.stream);
    if (error != cudaSuccess) return CudaError(what, error);
    absl::Status status = AwaitEvent(event, world_.comm, absl::StrCat("rank ", rank(), " ", what));
    cudaEventDestroy(event);
    return status;
  }

  TransportOptions options_;
  Channel world_;
  std::map<int, Channel> send_;  // by peer; fixed after Connect
  std::map<int, Channel> recv_;
  void* scratch_ = nullptr;
  absl::Mutex mu_;
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  Handle next_handle_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<Handle, Pending> pending_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> ConnectNccl(KvStore& store,
                                                       const TransportOptions& options) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad rank ", options.rank, " for world size ", options.size));
  }
  int devices = 0;  // left untouched when no driver is present
  cudaGetDeviceCount(&devices);
  if (options.cuda_device < 0 || options.cuda_device >= devices) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cuda:", options.cuda_device, " not available (", devices, " CUDA devices found)"));
  }
  auto transport = std::make_unique<NcclTransport>(options);
  if (absl::Status s = transport->Connect(store); !s.ok()) return s;
  return transport;
}

}  // namespace pp::comm
