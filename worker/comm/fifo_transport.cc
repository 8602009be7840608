// The fifo transport (transport.h, ConnectFifo): NCCL's matching rules over Gloo, so that CPU
// tests see what only a GPU would otherwise show.
//
// Every message of the caller becomes two Gloo messages whose tags are not the caller's but its
// place in the channel: (HEADER, channel, k) with the caller's tag and size, and (PAYLOAD,
// channel, k) with the bytes, where k counts the sends of that ordered pair and channel (on the
// sender) and its receives (on the receiver). Gloo matches (peer, tag) exactly, so the k-th send
// meets the k-th receive whatever tags the caller gave: posting order, as in NCCL. A receive
// posts its header's receive at once and its payload's only once the header was checked, so a
// message of another size never lands in the caller's buffer.
//
// A channel of an ordered pair plays the part of one NCCL communicator: before its first
// operation each side sends a HELLO to the other and waits for the other's. Eagerly connected
// channels did that in ConnectFifo; the others do it in the first Isend/Irecv, which therefore
// blocks until the peer's first operation on that channel, as ncclSend/ncclRecv do on a fresh
// communicator.
#include <array>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "worker/comm/transport.h"

namespace pp::comm {
namespace {

// The Gloo tag of a fifo message: its part, the channel, the direction (HELLO only) and k.
enum class Part : uint64_t { kPayload = 0, kHeader = 1, kHello = 2 };
constexpr int kPartShift = 52, kChannelShift = 48, kDirectionShift = 47;

uint64_t InnerTag(Part part, int channel, uint64_t k) {
  return (static_cast<uint64_t>(part) << kPartShift) |
         (static_cast<uint64_t>(channel) << kChannelShift) | k;
}

// What the sender says of its message, read by the receiver before the bytes.
struct Header {
  uint64_t tag = 0;
  uint64_t floats = 0;
};
constexpr size_t kHeaderFloats = sizeof(Header) / sizeof(float);
static_assert(sizeof(Header) % sizeof(float) == 0);

const char* ChannelName(int channel) {
  switch (channel) {
    case kActivationChannel: return "activation channel";
    case kGradientChannel: return "gradient channel";
    default: return "channel";
  }
}

class FifoTransport : public Transport {
 public:
  FifoTransport(std::unique_ptr<Transport> gloo, int channels, absl::Duration timeout)
      : gloo_(std::move(gloo)), channels_(channels), timeout_(timeout) {}

  int rank() const override { return gloo_->rank(); }
  int size() const override { return gloo_->size(); }

  // Connects the channels of `peers` (both directions): every HELLO is posted before any is
  // waited for, so the ranks may come in any order.
  absl::Status ConnectEagerly(const std::vector<int>& peers) {
    std::vector<std::pair<Comm, std::vector<Handle>>> started;
    for (int peer : peers) {
      for (int channel = 0; channel < channels_; ++channel) {
        for (bool sender : {true, false}) {
          const Comm comm{sender ? rank() : peer, sender ? peer : rank(), channel};
          absl::StatusOr<std::vector<Handle>> hello = PostHello(comm);
          if (!hello.ok()) return hello.status();
          started.emplace_back(comm, *std::move(hello));
        }
      }
    }
    for (auto& [comm, handles] : started) {
      if (absl::Status s = AwaitHello(comm, handles, "connecting at start"); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Handle> Isend(int peer, int channel, uint64_t tag, const float* data,
                               size_t n) override {
    if (absl::Status s = Check(peer, channel, n); !s.ok()) return s;
    const Comm comm{rank(), peer, channel};
    if (absl::Status s = ConnectLazily(comm, tag); !s.ok()) return s;
    Op op = NewOp(/*send=*/true, comm, tag, n, const_cast<float*>(data));
    const uint64_t k = op.k = Next(send_count_, comm);
    op.header = std::make_unique<Header>(Header{tag, n});
    absl::StatusOr<Handle> header = gloo_->Isend(peer, 0, InnerTag(Part::kHeader, channel, k),
                                                 HeaderFloats(op), kHeaderFloats);
    if (!header.ok()) return header.status();
    op.inner.push_back(*header);
    absl::StatusOr<Handle> payload =
        gloo_->Isend(peer, 0, InnerTag(Part::kPayload, channel, k), data, n);
    if (!payload.ok()) return payload.status();
    op.inner.push_back(*payload);
    return Keep(std::move(op));
  }

  absl::StatusOr<Handle> Irecv(int peer, int channel, uint64_t tag, float* data,
                               size_t n) override {
    if (absl::Status s = Check(peer, channel, n); !s.ok()) return s;
    const Comm comm{peer, rank(), channel};
    if (absl::Status s = ConnectLazily(comm, tag); !s.ok()) return s;
    Op op = NewOp(/*send=*/false, comm, tag, n, data);
    op.k = Next(recv_count_, comm);
    op.header = std::make_unique<Header>();
    absl::StatusOr<Handle> header = gloo_->Irecv(peer, 0, InnerTag(Part::kHeader, channel, op.k),
                                                 HeaderFloats(op), kHeaderFloats);
    if (!header.ok()) return header.status();
    op.inner.push_back(*header);
    return Keep(std::move(op));
  }

  absl::Status Wait(Handle handle) override {
    Op op;
    {
      absl::MutexLock lock(&mu_);
      auto it = pending_.find(handle);
      if (it == pending_.end()) {
        return absl::InvalidArgumentError(absl::StrCat("unknown transport handle ", handle));
      }
      op = std::move(it->second);
      pending_.erase(it);
    }
    for (Handle inner : op.inner) {
      if (absl::Status s = gloo_->Wait(inner); !s.ok()) return Annotated(op, s);
    }
    if (op.send) return absl::OkStatus();
    if (absl::Status s = CheckHeader(op); !s.ok()) return s;
    absl::StatusOr<Handle> payload = gloo_->Irecv(
        op.comm.from, 0, InnerTag(Part::kPayload, op.comm.channel, op.k), op.data, op.floats);
    if (!payload.ok()) return Annotated(op, payload.status());
    if (absl::Status s = gloo_->Wait(*payload); !s.ok()) return Annotated(op, s);
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<std::string>> AllGather(const std::string& mine) override {
    return gloo_->AllGather(mine);
  }
  absl::Status Barrier() override { return gloo_->Barrier(); }
  absl::Status AllReduceSum(float* data, size_t n) override {
    return gloo_->AllReduceSum(data, n);
  }
  void Abort() override { gloo_->Abort(); }

 private:
  // One ordered pair's channel: NCCL's two-rank communicator.
  struct Comm {
    int from = 0, to = 0, channel = 0;
    auto Key() const { return std::tuple(from, to, channel); }
    bool operator<(const Comm& other) const { return Key() < other.Key(); }
  };
  struct Op {
    bool send = false;
    Comm comm;
    uint64_t tag = 0;
    size_t floats = 0;
    float* data = nullptr;
    uint64_t k = 0;
    std::unique_ptr<Header> header;  // stable address: Gloo reads or writes it until Wait
    std::vector<Handle> inner;
  };

  static Op NewOp(bool send, const Comm& comm, uint64_t tag, size_t floats, float* data) {
    Op op;
    op.send = send;
    op.comm = comm;
    op.tag = tag;
    op.floats = floats;
    op.data = data;
    return op;
  }

  static float* HeaderFloats(Op& op) { return reinterpret_cast<float*>(op.header.get()); }

  absl::Status Check(int peer, int channel, size_t n) const {
    if (peer < 0 || peer >= size() || peer == rank()) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", rank(), ": bad peer ", peer, " (world size ", size(), ")"));
    }
    if (channel < 0 || channel >= channels_) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", rank(), ": bad channel ", channel,
                                                     " (this transport has ", channels_, ")"));
    }
    if (n == 0) return absl::InvalidArgumentError("empty message");
    return absl::OkStatus();
  }

  uint64_t Next(std::map<Comm, uint64_t>& counts, const Comm& comm) {
    absl::MutexLock lock(&mu_);
    return counts[comm]++;
  }

  Handle Keep(Op op) {
    absl::MutexLock lock(&mu_);
    const Handle handle = next_handle_++;
    pending_.emplace(handle, std::move(op));
    return handle;
  }

  int Peer(const Comm& comm) const { return comm.from == rank() ? comm.to : comm.from; }

  std::string Describe(const Comm& comm) const {
    return absl::StrCat("rank ", comm.from, " -> rank ", comm.to, " ", ChannelName(comm.channel),
                        " ", comm.channel);
  }

  std::string Describe(const Op& op) const {
    return absl::StrCat("rank ", rank(), op.send ? " send of " : " receive of ",
                        DescribeTag(op.tag), " (message ", op.k, " of ", Describe(op.comm), ")");
  }

  absl::Status Annotated(const Op& op, const absl::Status& status) const {
    return absl::Status(status.code(), absl::StrCat(Describe(op), ": ", status.message()));
  }

  // Both sides of `comm` send each other a HELLO on the same Gloo tag (the direction bit keeps
  // a pair's two communicators of one channel apart).
  absl::StatusOr<std::vector<Handle>> PostHello(const Comm& comm) {
    const uint64_t direction = comm.from < comm.to ? 0 : 1;
    const uint64_t tag = InnerTag(Part::kHello, comm.channel, direction << kDirectionShift);
    float* slots;
    {
      absl::MutexLock lock(&mu_);
      slots = hello_slots_[comm].data();
    }
    absl::StatusOr<Handle> out = gloo_->Isend(Peer(comm), 0, tag, &slots[0], 1);
    if (!out.ok()) return out.status();
    absl::StatusOr<Handle> in = gloo_->Irecv(Peer(comm), 0, tag, &slots[1], 1);
    if (!in.ok()) return in.status();
    return std::vector<Handle>{*out, *in};
  }

  absl::Status AwaitHello(const Comm& comm, const std::vector<Handle>& handles,
                          const std::string& when) {
    for (Handle h : handles) {
      if (absl::Status s = gloo_->Wait(h); !s.ok()) {
        return absl::Status(
            s.code(), absl::StrCat("rank ", rank(), " ", when, ": rank ", Peer(comm),
                                   " made no operation on ", Describe(comm), " within ",
                                   absl::FormatDuration(timeout_),
                                   " (a channel connects when both ranks first use it, as an "
                                   "NCCL communicator does): ",
                                   s.message()));
      }
    }
    absl::MutexLock lock(&mu_);
    connected_.insert(comm);
    return absl::OkStatus();
  }

  absl::Status ConnectLazily(const Comm& comm, uint64_t tag) {
    {
      absl::MutexLock lock(&mu_);
      if (connected_.count(comm) > 0) return absl::OkStatus();
    }
    absl::StatusOr<std::vector<Handle>> hello = PostHello(comm);
    if (!hello.ok()) return hello.status();
    return AwaitHello(comm, *hello,
                      absl::StrCat(comm.from == rank() ? "first send (" : "first receive (",
                                   DescribeTag(tag), ")"));
  }

  // The sender's tag and size must be those this receive expects: NCCL would deliver the bytes
  // of whatever came k-th, silently when the sizes agree.
  absl::Status CheckHeader(const Op& op) const {
    const Header& got = *op.header;
    if (got.tag == op.tag && got.floats == op.floats) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        Describe(op), " expecting ", op.floats, " floats: rank ", op.comm.from,
        " posted its send of ", DescribeTag(got.tag), " (", got.floats,
        " floats) in that place; the two ranks disagree on the order of messages on this "
        "channel, which NCCL matches by posting order alone (it would deliver the wrong tensor)"));
  }

  std::unique_ptr<Transport> gloo_;
  const int channels_;
  const absl::Duration timeout_;
  absl::Mutex mu_;
  Handle next_handle_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<Handle, Op> pending_ ABSL_GUARDED_BY(mu_);
  std::map<Comm, uint64_t> send_count_ ABSL_GUARDED_BY(mu_);
  std::map<Comm, uint64_t> recv_count_ ABSL_GUARDED_BY(mu_);
  std::set<Comm> connected_ ABSL_GUARDED_BY(mu_);
  // The floats a HELLO is sent from and received into; never read.
  std::map<Comm, std::array<float, 2>> hello_slots_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> ConnectFifo(KvStore& store,
                                                       const TransportOptions& options) {
  absl::StatusOr<std::vector<int>> peers = PointToPointPeers(options);
  if (!peers.ok()) return peers.status();
  absl::StatusOr<std::unique_ptr<Transport>> gloo = ConnectGloo(store, options);
  if (!gloo.ok()) return gloo.status();
  auto fifo = std::make_unique<FifoTransport>(*std::move(gloo), options.channels, options.timeout);
  if (options.eager) {
    if (absl::Status s = fifo->ConnectEagerly(*peers); !s.ok()) return s;
  }
  return fifo;
}

}  // namespace pp::comm
