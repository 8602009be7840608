// ConnectNccl: the rendezvous of NCCL ids through the KvStore, and a Transport over the NCCL half
// of the CUDA plugin (nccl_plugin.cc, loaded by kernels/cuda/plugin.h; its rules:
// kernels/cuda/plugin_abi.h). This file links no CUDA library: a binary that never asks for NCCL
// never maps one.
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "kernels/cuda/plugin.h"
#include "worker/comm/transport.h"

namespace pp::comm {
namespace {

using kernels::CudaPlugin;
using kernels::PluginStatus;

class NcclTransport : public Transport {
 public:
  NcclTransport(const CudaPlugin& plugin, PpNccl* nccl, int rank, int size)
      : plugin_(plugin), nccl_(nccl), rank_(rank), size_(size) {}
  ~NcclTransport() override { plugin_.nccl_destroy(nccl_); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  absl::StatusOr<Handle> Isend(int peer, int channel, uint64_t tag, const float* data,
                               size_t n) override {
    Handle handle = 0;
    PpCudaError error{};
    const int code = plugin_.nccl_send(nccl_, peer, channel, tag, data, n, &handle, &error);
    return Started(code, error, {true, peer, tag}, handle);
  }

  absl::StatusOr<Handle> Irecv(int peer, int channel, uint64_t tag, float* data,
                               size_t n) override {
    Handle handle = 0;
    PpCudaError error{};
    const int code = plugin_.nccl_recv(nccl_, peer, channel, tag, data, n, &handle, &error);
    return Started(code, error, {false, peer, tag}, handle);
  }

  absl::Status Wait(Handle handle) override {
    Op op;
    {
      absl::MutexLock lock(&mu_);
      auto it = ops_.find(handle);
      if (it != ops_.end()) {
        op = it->second;
        ops_.erase(it);
      }
    }
    PpCudaError error{};
    return Named(PluginStatus(plugin_.nccl_wait(nccl_, handle, &error), error), op);
  }

  absl::StatusOr<std::vector<std::string>> AllGather(const std::string& mine) override {
    // Lengths first, then every payload padded to the longest.
    std::vector<int64_t> lengths(size_);
    int64_t my_length = static_cast<int64_t>(mine.size());
    if (absl::Status s = Gather(&my_length, sizeof(my_length), lengths.data()); !s.ok()) return s;
    const size_t longest = static_cast<size_t>(*std::max_element(lengths.begin(), lengths.end()));
    std::string padded = mine;
    padded.resize(std::max<size_t>(longest, 1));
    std::vector<char> all(padded.size() * size_);
    if (absl::Status s = Gather(padded.data(), padded.size(), all.data()); !s.ok()) return s;
    std::vector<std::string> result;
    for (int r = 0; r < size_; ++r) result.emplace_back(&all[r * padded.size()], lengths[r]);
    return result;
  }

  absl::Status Barrier() override {
    char one = 1;
    std::vector<char> ignored(size_);
    return Gather(&one, 1, ignored.data());
  }

  absl::Status AllReduceSum(float* data, size_t n) override {
    PpCudaError error{};
    return PluginStatus(plugin_.nccl_all_reduce_sum(nccl_, data, n, &error), error);
  }

  void Abort() override { plugin_.nccl_abort(nccl_); }

 private:
  // What a handle stands for, to name it in errors (the plugin knows tags only as numbers).
  struct Op {
    bool send = false;
    int peer = -1;  // -1: an unknown handle
    uint64_t tag = 0;
  };

  absl::StatusOr<Handle> Started(int code, const PpCudaError& error, const Op& op,
                                 Handle handle) {
    if (code != 0) return Named(PluginStatus(code, error), op);
    absl::MutexLock lock(&mu_);
    ops_[handle] = op;
    return handle;
  }

  // "receive of gradient 2->3 mb 5: <the plugin's message, which names ranks and channel>"
  static absl::Status Named(const absl::Status& status, const Op& op) {
    if (status.ok() || op.peer < 0) return status;
    return absl::Status(status.code(), absl::StrCat(op.send ? "send of " : "receive of ",
                                                    DescribeTag(op.tag), ": ", status.message()));
  }

  absl::Status Gather(const void* mine, size_t bytes, void* out) {
    PpCudaError error{};
    return PluginStatus(plugin_.nccl_all_gather(nccl_, mine, bytes, out, &error), error);
  }

  const CudaPlugin& plugin_;
  PpNccl* const nccl_;
  const int rank_;
  const int size_;
  absl::Mutex mu_;
  std::map<Handle, Op> ops_ ABSL_GUARDED_BY(mu_);  // started, not yet waited for
};

// Loads the plugin and checks that it has NCCL and that options.cuda_device exists.
absl::StatusOr<const CudaPlugin*> PluginFor(const TransportOptions& options) {
  const std::string device = absl::StrCat("cuda:", options.cuda_device);
  absl::StatusOr<const CudaPlugin*> plugin = kernels::LoadCudaPlugin();
  if (!plugin.ok()) {
    return absl::Status(plugin.status().code(),
                        absl::StrCat("NCCL transport on ", device, ": ", plugin.status().message()));
  }
  if ((*plugin)->nccl_connect == nullptr) {
    return absl::UnimplementedError(absl::StrCat("NCCL transport on ", device, ": CUDA plugin ",
                                                 (*plugin)->path, " was built without NCCL"));
  }
  int devices = 0;
  PpCudaError error{};
  const int code = (*plugin)->device_count(&devices, &error);
  if (code != 0 || options.cuda_device < 0 || options.cuda_device >= devices) {
    return absl::FailedPreconditionError(
        absl::StrCat(device, " not available (", devices, " CUDA devices found",
                     code != 0 ? absl::StrCat(": ", error.message) : "", ")"));
  }
  return plugin;
}

// The ncclUniqueIds of a rank's communicators: "world", and per peer i and channel c (at
// i * channels + c) the pair it sends on and the pair it receives on.
struct NcclIds {
  std::string world;
  std::vector<std::string> send, recv;
};

std::string IdKey(const TransportOptions& options, const std::string& name) {
  return absl::StrCat(options.prefix, "nccl/", name);
}

// Makes a fresh id and publishes it under `name`.
absl::Status MakeId(KvStore& store, const CudaPlugin& plugin, const TransportOptions& options,
                    const std::string& name, std::string* id) {
  id->resize(PP_NCCL_ID_BYTES);
  PpCudaError error{};
  if (int code = plugin.nccl_unique_id(id->data(), &error); code != 0) {
    return PluginStatus(code, error);
  }
  return store.Set(IdKey(options, name), *id);
}

// Waits (until `deadline`) for the id a peer published under `name`.
absl::Status FetchId(KvStore& store, const TransportOptions& options, const std::string& name,
                     absl::Time deadline, std::string* id) {
  const std::string key = IdKey(options, name);
  absl::StatusOr<std::string> value =
      store.Get(key, std::max(deadline - absl::Now(), absl::ZeroDuration()));
  if (!value.ok()) return value.status();
  if (value->size() != PP_NCCL_ID_BYTES) {
    return absl::DataLossError(absl::StrCat("rendezvous key ", key, " has ", value->size(),
                                            " bytes, not an ncclUniqueId"));
  }
  *id = *std::move(value);
  return absl::OkStatus();
}

// Communicator ids: "world" made by rank 0, "a-b-c" (a sends to b on channel c) made by a. Every
// id this rank makes is published before any is fetched, so no rank waits on a peer that is
// itself waiting.
absl::StatusOr<NcclIds> ExchangeIds(KvStore& store, const CudaPlugin& plugin,
                                    const TransportOptions& options,
                                    const std::vector<int>& peers) {
  const size_t channels = static_cast<size_t>(options.channels);
  const size_t pairs = peers.size() * channels;
  NcclIds ids{"", std::vector<std::string>(pairs), std::vector<std::string>(pairs)};
  const int me = options.rank;
  if (me == 0) {
    if (absl::Status s = MakeId(store, plugin, options, "world", &ids.world); !s.ok()) return s;
  }
  for (size_t at = 0; at < pairs; ++at) {
    const std::string name = absl::StrCat(me, "-", peers[at / channels], "-", at % channels);
    if (absl::Status s = MakeId(store, plugin, options, name, &ids.send[at]); !s.ok()) return s;
  }
  const absl::Time deadline = absl::Now() + options.timeout;
  if (me != 0) {
    if (absl::Status s = FetchId(store, options, "world", deadline, &ids.world); !s.ok()) {
      return s;
    }
  }
  for (size_t at = 0; at < pairs; ++at) {
    const std::string name = absl::StrCat(peers[at / channels], "-", me, "-", at % channels);
    if (absl::Status s = FetchId(store, options, name, deadline, &ids.recv[at]); !s.ok()) {
      return s;
    }
  }
  return ids;
}

// Pointers into `strings`, which must outlive them.
std::vector<const char*> Pointers(const std::vector<std::string>& strings) {
  std::vector<const char*> pointers;
  for (const std::string& s : strings) pointers.push_back(s.data());
  return pointers;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> ConnectNccl(KvStore& store,
                                                       const TransportOptions& options) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad rank ", options.rank, " for world size ", options.size));
  }
  absl::StatusOr<std::vector<int>> peers = PointToPointPeers(options);
  if (!peers.ok()) return peers.status();
  absl::StatusOr<const CudaPlugin*> loaded = PluginFor(options);
  if (!loaded.ok()) return loaded.status();
  const CudaPlugin& plugin = **loaded;
  absl::StatusOr<NcclIds> ids = ExchangeIds(store, plugin, options, *peers);
  if (!ids.ok()) return ids.status();
  const std::vector<const char*> send_ids = Pointers(ids->send), recv_ids = Pointers(ids->recv);
  PpNcclConfig config{};
  config.rank = options.rank;
  config.size = options.size;
  config.device = options.cuda_device;
  config.timeout_seconds = absl::ToDoubleSeconds(options.timeout);
  config.world_id = ids->world.data();
  config.channels = options.channels;
  config.num_peers = static_cast<int>(peers->size());
  config.peers = peers->data();
  config.send_ids = send_ids.data();
  config.recv_ids = recv_ids.data();
  config.eager = options.eager ? 1 : 0;
  PpNccl* nccl = nullptr;
  PpCudaError error{};
  if (int code = plugin.nccl_connect(&config, &nccl, &error); code != 0) {
    return PluginStatus(code, error);
  }
  return std::make_unique<NcclTransport>(plugin, nccl, options.rank, options.size);
}

}  // namespace pp::comm
