// Transport over Gloo's TCP device: one unbound buffer per message, a full mesh of pairs
// connected through a gloo::rendezvous::Store that forwards to our KvStore.
#include <chrono>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gloo/allgather.h"
#include "gloo/allgatherv.h"
#include "gloo/allreduce.h"
#include "gloo/barrier.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/unbound_buffer.h"
#include "worker/comm/transport.h"

namespace pp::comm {
namespace {

// Gloo's collectives build slots with a small prefix in the top byte; ours set the top bit, the
// channel below it, then the tag: Gloo matches (peer, slot), so by tag within a channel.
constexpr uint64_t kP2pSlotBit = uint64_t{1} << 63;
constexpr int kChannelShift = 56;
constexpr uint64_t kTagMask = (uint64_t{1} << kChannelShift) - 1;

// Gloo reports store failures as exceptions; connectFullMesh lets them through to us.
class GlooStore : public gloo::rendezvous::Store {
 public:
  GlooStore(KvStore& kv, std::string prefix, absl::Duration timeout)
      : kv_(kv), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    absl::Status status = kv_.Set(prefix_ + key, std::string(data.begin(), data.end()));
    if (!status.ok()) throw std::runtime_error(status.ToString());
  }

  std::vector<char> get(const std::string& key) override {
    absl::StatusOr<std::string> value = kv_.Get(prefix_ + key, timeout_);
    if (!value.ok()) throw std::runtime_error(value.status().ToString());
    return std::vector<char>(value->begin(), value->end());
  }

  void wait(const std::vector<std::string>& keys) override { wait(keys, ToChrono(timeout_)); }

  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    for (const std::string& key : keys) {
      absl::StatusOr<std::string> value = kv_.Get(prefix_ + key, absl::FromChrono(timeout));
      if (!value.ok()) throw std::runtime_error(value.status().ToString());
    }
  }

  static std::chrono::milliseconds ToChrono(absl::Duration d) {
    return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
  }

 private:
  KvStore& kv_;
  std::string prefix_;
  absl::Duration timeout_;
};

absl::Status FromException(const std::string& what, const std::exception& e) {
  std::string message = absl::StrCat(what, ": ", e.what());
  if (absl::StrContains(e.what(), "imed out") || absl::StrContains(e.what(), "not set within")) {
    return absl::DeadlineExceededError(message);
  }
  return absl::UnavailableError(message);
}

class GlooTransport : public Transport {
 public:
  GlooTransport(std::shared_ptr<gloo::rendezvous::Context> context, absl::Duration timeout)
      : context_(std::move(context)), timeout_(GlooStore::ToChrono(timeout)) {}

  ~GlooTransport() override {
    // Unbound buffers must die before the context that owns their pairs.
    absl::MutexLock lock(&mu_);
    pending_.clear();
  }

  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }

  absl::StatusOr<Handle> Isend(int peer, int channel, uint64_t tag, const float* data,
                               size_t n) override {
    return Start(/*send=*/true, peer, channel, tag, const_cast<float*>(data), n);
  }

  absl::StatusOr<Handle> Irecv(int peer, int channel, uint64_t tag, float* data,
                               size_t n) override {
    return Start(/*send=*/false, peer, channel, tag, data, n);
  }

  absl::Status Wait(Handle handle) override {
    Pending* op;
    {
      absl::MutexLock lock(&mu_);
      auto it = pending_.find(handle);
      if (it == pending_.end()) {
        return absl::InvalidArgumentError(absl::StrCat("unknown transport handle ", handle));
      }
      op = &it->second;
    }
    absl::Status status = WaitOne(*op);
    absl::MutexLock lock(&mu_);
    pending_.erase(handle);
    return status;
  }

  absl::StatusOr<std::vector<std::string>> AllGather(const std::string& mine) override {
    if (absl::Status s = CheckAborted("all-gather"); !s.ok()) return s;
    // One leading byte per rank keeps every contribution non-empty.
    std::vector<char> input(1 + mine.size(), 0);
    std::memcpy(input.data() + 1, mine.data(), mine.size());
    try {
      std::vector<int64_t> lengths(size());
      int64_t my_length = static_cast<int64_t>(input.size());
      gloo::AllgatherOptions length_options(context_);
      length_options.setInput(&my_length, 1);
      length_options.setOutput(lengths.data(), lengths.size());
      length_options.setTimeout(timeout_);
      gloo::allgather(length_options);

      std::vector<size_t> counts(lengths.begin(), lengths.end());
      size_t total = 0;
      for (size_t c : counts) total += c;
      std::vector<char> output(total);
      gloo::AllgathervOptions options(context_);
      options.setInput(input.data(), input.size());
      options.setOutput(output.data(), counts);
      options.setTimeout(timeout_);
      gloo::allgatherv(options);

      std::vector<std::string> all;
      size_t offset = 0;
      for (size_t c : counts) {
        all.emplace_back(output.data() + offset + 1, c - 1);
        offset += c;
      }
      return all;
    } catch (const std::exception& e) {
      return FromException(absl::StrCat("rank ", rank(), " all-gather"), e);
    }
  }

  absl::Status Barrier() override {
    if (absl::Status s = CheckAborted("barrier"); !s.ok()) return s;
    try {
      gloo::BarrierOptions options(context_);
      options.setTimeout(timeout_);
      gloo::barrier(options);
      return absl::OkStatus();
    } catch (const std::exception& e) {
      return FromException(absl::StrCat("rank ", rank(), " barrier"), e);
    }
  }

  absl::Status AllReduceSum(float* data, size_t n) override {
    if (absl::Status s = CheckAborted("all-reduce"); !s.ok()) return s;
    try {
      gloo::AllreduceOptions options(context_);
      options.setOutput(data, n);
      options.setTimeout(timeout_);
      void (*sum)(void*, const void*, const void*, size_t) = &gloo::sum<float>;
      options.setReduceFunction(sum);
      gloo::allreduce(options);
      return absl::OkStatus();
    } catch (const std::exception& e) {
      return FromException(absl::StrCat("rank ", rank(), " all-reduce"), e);
    }
  }

  void Abort() override {
    absl::MutexLock lock(&mu_);
    aborted_ = true;
    for (auto& [handle, op] : pending_) {
      if (op.send) {
        op.buffer->abortWaitSend();
      } else {
        op.buffer->abortWaitRecv();
      }
    }
  }

 private:
  struct Pending {
    bool send;
    int peer;
    uint64_t tag;
    std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
  };

  absl::Status CheckAborted(const std::string& what) {
    absl::MutexLock lock(&mu_);
    if (aborted_) return absl::AbortedError(absl::StrCat(what, " aborted"));
    return absl::OkStatus();
  }

  std::string Describe(const Pending& op) const {
    return absl::StrCat("rank ", rank(), op.send ? " send to" : " recv from", " rank ", op.peer,
                        " (tag ", op.tag, ")");
  }

  absl::StatusOr<Handle> Start(bool send, int peer, int channel, uint64_t tag, float* data,
                               size_t n) {
    if (peer < 0 || peer >= size() || peer == rank()) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", rank(), ": bad peer ", peer, " (world size ", size(), ")"));
    }
    if (channel < 0 || channel >= kMaxChannels) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", rank(), ": bad channel ", channel));
    }
    if (n == 0) return absl::InvalidArgumentError("empty message");
    absl::MutexLock lock(&mu_);
    if (aborted_) return absl::AbortedError("transport aborted");
    Pending op{send, peer, tag, nullptr};
    try {
      op.buffer = context_->createUnboundBuffer(data, n * sizeof(float));
      const uint64_t slot =
          kP2pSlotBit | (static_cast<uint64_t>(channel) << kChannelShift) | (tag & kTagMask);
      if (send) {
        op.buffer->send(peer, slot);
      } else {
        op.buffer->recv(peer, slot);
      }
    } catch (const std::exception& e) {
      return FromException(Describe(op), e);
    }
    Handle handle = next_handle_++;
    pending_.emplace(handle, std::move(op));
    return handle;
  }

  absl::Status WaitOne(Pending& op) {
    try {
      bool done = op.send ? op.buffer->waitSend(timeout_) : op.buffer->waitRecv(timeout_);
      if (!done) return absl::AbortedError(absl::StrCat(Describe(op), " aborted"));
      return absl::OkStatus();
    } catch (const std::exception& e) {
      return FromException(Describe(op), e);
    }
  }

  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::chrono::milliseconds timeout_;
  absl::Mutex mu_;
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  Handle next_handle_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<Handle, Pending> pending_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> ConnectGloo(KvStore& store,
                                                       const TransportOptions& options) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad rank ", options.rank, " for world size ", options.size));
  }
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname;
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
    context->setTimeout(GlooStore::ToChrono(options.timeout));
    GlooStore gloo_store(store, options.prefix + "gloo/", options.timeout);
    context->connectFullMesh(gloo_store, device);
    // A rank may finish connecting before its peers do; closing early would break their
    // handshake, so nobody leaves until everybody is connected.
    gloo::BarrierOptions barrier(context);
    barrier.setTimeout(GlooStore::ToChrono(options.timeout));
    gloo::barrier(barrier);
    return std::make_unique<GlooTransport>(std::move(context), options.timeout);
  } catch (const std::exception& e) {
    return FromException(absl::StrCat("rank ", options.rank, " connecting to ", options.size - 1,
                                      " peers through the rendezvous"),
                         e);
  }
}

}  // namespace pp::comm
