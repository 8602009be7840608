// ConnectNccl: the rendezvous of NCCL ids through the KvStore, and a Transport over the NCCL half
// of the CUDA plugin (nccl_plugin.cc, loaded by kernels/cuda/plugin.h). This file links no CUDA
// library: a binary that never asks for NCCL never maps one.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
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

  absl::StatusOr<Handle> Isend(int peer, uint64_t tag, const float* data, size_t n) override {
    Handle handle = 0;
    PpCudaError error{};
    if (int code = plugin_.nccl_send(nccl_, peer, tag, data, n, &handle, &error); code != 0) {
      return PluginStatus(code, error);
    }
    return handle;
  }

  absl::StatusOr<Handle> Irecv(int peer, uint64_t tag, float* data, size_t n) override {
    Handle handle = 0;
    PpCudaError error{};
    if (int code = plugin_.nccl_recv(nccl_, peer, tag, data, n, &handle, &error); code != 0) {
      return PluginStatus(code, error);
    }
    return handle;
  }

  absl::Status Wait(Handle handle) override {
    PpCudaError error{};
    return PluginStatus(plugin_.nccl_wait(nccl_, handle, &error), error);
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
  absl::Status Gather(const void* mine, size_t bytes, void* out) {
    PpCudaError error{};
    return PluginStatus(plugin_.nccl_all_gather(nccl_, mine, bytes, out, &error), error);
  }

  const CudaPlugin& plugin_;
  PpNccl* const nccl_;
  const int rank_;
  const int size_;
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

// The ncclUniqueIds of a rank's communicators: "world", and per peer the pair it sends on and the
// pair it receives on (point to point only; empty otherwise).
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

// Waits (bounded by options.timeout) for the id a peer published under `name`.
absl::Status FetchId(KvStore& store, const TransportOptions& options, const std::string& name,
                     std::string* id) {
  const std::string key = IdKey(options, name);
  absl::StatusOr<std::string> value = store.Get(key, options.timeout);
  if (!value.ok()) return value.status();
  if (value->size() != PP_NCCL_ID_BYTES) {
    return absl::DataLossError(absl::StrCat("rendezvous key ", key, " has ", value->size(),
                                            " bytes, not an ncclUniqueId"));
  }
  *id = *std::move(value);
  return absl::OkStatus();
}

// Communicator ids: "world" made by rank 0, "a-b" (a sends to b) made by a (point to point
// only). Every id this rank makes is published before any is fetched, so no rank waits on a
// peer that is itself waiting.
absl::StatusOr<NcclIds> ExchangeIds(KvStore& store, const CudaPlugin& plugin,
                                    const TransportOptions& options) {
  NcclIds ids{"", std::vector<std::string>(options.size), std::vector<std::string>(options.size)};
  if (options.rank == 0) {
    if (absl::Status s = MakeId(store, plugin, options, "world", &ids.world); !s.ok()) return s;
  }
  const int pair_peers = options.point_to_point ? options.size : 0;
  for (int peer = 0; peer < pair_peers; ++peer) {
    if (peer == options.rank) continue;
    const std::string name = absl::StrCat(options.rank, "-", peer);
    if (absl::Status s = MakeId(store, plugin, options, name, &ids.send[peer]); !s.ok()) return s;
  }
  if (options.rank != 0) {
    if (absl::Status s = FetchId(store, options, "world", &ids.world); !s.ok()) return s;
  }
  for (int peer = 0; peer < pair_peers; ++peer) {
    if (peer == options.rank) continue;
    const std::string name = absl::StrCat(peer, "-", options.rank);
    if (absl::Status s = FetchId(store, options, name, &ids.recv[peer]); !s.ok()) return s;
  }
  return ids;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> ConnectNccl(KvStore& store,
                                                       const TransportOptions& options) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad rank ", options.rank, " for world size ", options.size));
  }
  absl::StatusOr<const CudaPlugin*> loaded = PluginFor(options);
  if (!loaded.ok()) return loaded.status();
  const CudaPlugin& plugin = **loaded;
  absl::StatusOr<NcclIds> ids = ExchangeIds(store, plugin, options);
  if (!ids.ok()) return ids.status();
  std::vector<const char*> send_ids(options.size, nullptr), recv_ids(options.size, nullptr);
  for (int peer = 0; peer < options.size; ++peer) {
    send_ids[peer] = ids->send[peer].data();
    recv_ids[peer] = ids->recv[peer].data();
  }
  const PpNcclConfig config{options.rank,
                            options.size,
                            options.cuda_device,
                            absl::ToDoubleSeconds(options.timeout),
                            ids->world.data(),
                            options.point_to_point ? send_ids.data() : nullptr,
                            options.point_to_point ? recv_ids.data() : nullptr};
  PpNccl* nccl = nullptr;
  PpCudaError error{};
  if (int code = plugin.nccl_connect(&config, &nccl, &error); code != 0) {
    return PluginStatus(code, error);
  }
  return std::make_unique<NcclTransport>(plugin, nccl, options.rank, options.size);
}

}  // namespace pp::comm
