// Calibration::MeasureLinks: ping-pong with the neighbouring pipeline ranks over the job's
// transport. The pinger leads: before each round it sends a 1-float control message saying
// what comes (kSmall: the control message itself is the ping and comes back; kStream + k: k
// message_bytes messages follow back to back and a 1-float echo answers the last; kStop: the
// link is done), so the ponger needs no agreed count and the pinger may stop whenever its share
// of the budget is spent.
//
// Why a stream: a shaped link (tbf) lets a burst through at line speed, and one activation fits
// in a typical burst, so a single message measured the burst; a step's activations follow each
// other and see the rate. At least kStreamBytes go one way per round (at most kMaxStream
// messages), past a 10 ms burst at up to 400 Mbit/s.
#include <algorithm>
#include <chrono>
#include <memory>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kernels/ops.h"
#include "worker/calibrate/calibrate.h"

namespace pp::calibrate {
namespace {

// Every message goes on one channel: each direction's messages are posted in the same order on
// both sides (control then stream one way, one echo back), as posting-order matching needs.
constexpr int kChannel = 0;
constexpr uint64_t kControlTag = 1, kEchoTag = 2, kLargeTag = 3, kLargeEchoTag = 4;
constexpr float kStop = 0, kSmall = 1, kStream = 1;  // a stream of k messages is kStream + k
constexpr int64_t kStreamBytes = 512 << 10;
constexpr int kMaxStream = 8;
// Round trips wanted of each kind; fewer when the link's share of the budget runs out.
constexpr int kSmallRounds = 10, kStreamRounds = 5;

// Messages of `bytes` in a stream round: enough for kStreamBytes, 1..kMaxStream.
int StreamMessages(int64_t bytes) {
  const int64_t k = bytes > 0 ? (kStreamBytes + bytes - 1) / bytes : kMaxStream;
  return static_cast<int>(std::clamp<int64_t>(k, 1, kMaxStream));
}

// Transport buffers (backend memory: device memory under NCCL) and the round trips over them. The
// transport must be gone before this is destroyed (a failed round leaves receives posted).
class PingPong {
 public:
  PingPong(comm::Transport& transport, kernels::Ops& ops, size_t large_floats)
      : transport_(transport), ops_(ops), n_(large_floats) {
    control_ = ops_.Alloc(1);
    echo_ = ops_.Alloc(1);
    large_ = ops_.Alloc(n_);
    second_ = ops_.Alloc(n_);
  }
  ~PingPong() {
    for (float* b : {control_, echo_, large_, second_}) ops_.Free(b);
  }

  // Answers `peer`'s rounds until its kStop.
  absl::Status Answer(int peer) {
    while (true) {
      if (absl::Status s = Receive(peer, kControlTag, control_, 1); !s.ok()) return s;
      float what = kStop;
      ops_.CopyToHost(&what, control_, 1);
      if (what == kSmall) {
        if (absl::Status s = Send(peer, kEchoTag, control_, 1); !s.ok()) return s;
      } else if (what > kStream && what <= kStream + kMaxStream) {
        if (absl::Status s = ReceiveStream(peer, static_cast<int>(what - kStream)); !s.ok()) {
          return s;
        }
        if (absl::Status s = Send(peer, kLargeEchoTag, control_, 1); !s.ok()) return s;
      } else {
        return absl::OkStatus();
      }
    }
  }

  // One round of `what` with `peer`; from the first byte sent to the echo, in seconds.
  absl::StatusOr<double> Round(int peer, float what) {
    ops_.CopyToDevice(control_, &what, 1);
    if (what != kSmall) {
      if (absl::Status s = Send(peer, kControlTag, control_, 1); !s.ok()) return s;
      if (what == kStop) return 0.0;
    }
    const bool small = what == kSmall;
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<comm::Handle> back =
        transport_.Irecv(peer, kChannel, small ? kEchoTag : kLargeEchoTag, echo_, 1);
    if (!back.ok()) return back.status();
    if (small) {
      if (absl::Status s = Send(peer, kControlTag, control_, 1); !s.ok()) return s;
    }
    // The stream's sends are all posted before any is waited for (they only read large_): the
    // link stays busy, as in a step, instead of idling a wake-up between messages.
    std::vector<comm::Handle> sends;
    for (int i = 0; !small && i < static_cast<int>(what - kStream); ++i) {
      absl::StatusOr<comm::Handle> h = transport_.Isend(peer, kChannel, kLargeTag, large_, n_);
      if (!h.ok()) return h.status();
      sends.push_back(*h);
    }
    for (comm::Handle h : sends) {
      if (absl::Status s = transport_.Wait(h); !s.ok()) return s;
    }
    if (absl::Status s = transport_.Wait(*back); !s.ok()) return s;
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

 private:
  // k messages of n_ floats, two receives posted at a time into alternate buffers, so the next
  // message has a place to land while this one is waited for.
  absl::Status ReceiveStream(int peer, int k) {
    float* into[2] = {large_, second_};
    std::vector<comm::Handle> posted;
    for (int i = 0; i < k; ++i) {
      absl::StatusOr<comm::Handle> h = transport_.Irecv(peer, kChannel, kLargeTag, into[i % 2], n_);
      if (!h.ok()) return h.status();
      posted.push_back(*h);
      if (i >= 1) {
        if (absl::Status s = transport_.Wait(posted[i - 1]); !s.ok()) return s;
      }
    }
    return transport_.Wait(posted.back());
  }
  absl::Status Send(int peer, uint64_t tag, const float* data, size_t n) {
    absl::StatusOr<comm::Handle> h = transport_.Isend(peer, kChannel, tag, data, n);
    return h.ok() ? transport_.Wait(*h) : h.status();
  }
  absl::Status Receive(int peer, uint64_t tag, float* data, size_t n) {
    absl::StatusOr<comm::Handle> h = transport_.Irecv(peer, kChannel, tag, data, n);
    return h.ok() ? transport_.Wait(*h) : h.status();
  }

  comm::Transport& transport_;
  kernels::Ops& ops_;
  const size_t n_;
  float* control_ = nullptr;
  float* echo_ = nullptr;
  float* large_ = nullptr;
  float* second_ = nullptr;  // the stream's other receive buffer
};

// Rank r's link to r+1, measured until `until` (at least one round trip of each kind).
absl::StatusOr<Link> Ping(Calibration& calibration, PingPong& pings, int peer,
                                 absl::Time until, int64_t bytes) {
  std::vector<double> small, large;
  const int k = StreamMessages(bytes);
  const float stream = kStream + static_cast<float>(k);
  // The first round trips pay for connection warm-up: not counted.
  for (float what : {kSmall, stream}) {
    if (absl::Status s = calibration.Check(); !s.ok()) return s;
    if (absl::StatusOr<double> rtt = pings.Round(peer, what); !rtt.ok()) return rtt.status();
  }
  while (small.empty() || large.empty() ||
         (absl::Now() < until && (small.size() < kSmallRounds || large.size() < kStreamRounds))) {
    for (auto [what, into, want] : {std::tuple{kSmall, &small, kSmallRounds},
                                    std::tuple{stream, &large, kStreamRounds}}) {
      if (static_cast<int>(into->size()) >= want && !into->empty()) continue;
      if (absl::Status s = calibration.Check(); !s.ok()) return s;
      absl::StatusOr<double> rtt = pings.Round(peer, what);
      if (!rtt.ok()) return rtt.status();
      into->push_back(*rtt);
    }
  }
  if (absl::StatusOr<double> stop = pings.Round(peer, kStop); !stop.ok()) return stop.status();
  return LinkFromRoundTrips(small, large, k * bytes);
}

// One channel with each neighbour, connected before the first ping: a ping's echo is received
// before the answering rank's first send on that channel.
comm::TransportOptions LinkOptions(const pp::v1::CalibrateRequest& request,
                                   const std::string& hostname, absl::Time deadline) {
  comm::TransportOptions options;
  options.rank = request.rank();
  options.size = request.world_size();
  options.prefix = request.rendezvous_prefix();
  options.hostname = hostname;
  options.timeout = std::max(deadline - absl::Now(), absl::Milliseconds(1));
  options.channels = 1;
  if (options.rank > 0) options.peers.push_back(options.rank - 1);
  if (options.rank + 1 < options.size) options.peers.push_back(options.rank + 1);
  return options;
}

}  // namespace

absl::Status Calibration::MeasureLinks(pp::v1::RankCalibration& out) {
  const int rank = request_.rank(), world = request_.world_size();
  if (world == 1) return absl::OkStatus();
  const bool has_link = rank + 1 < world;
  const auto failed = [&](absl::string_view what, const absl::Status& s) {
    // The transport's own timeout is the deadline too: a wait that gave up at about the
    // deadline ran out of budget, whatever code the transport chose.
    const bool late = absl::Now() + absl::Milliseconds(100) >= deadline_;
    const absl::Status aborted = Check();
    const absl::StatusCode code = aborted.code() == absl::StatusCode::kAborted ? aborted.code()
                                  : late ? absl::StatusCode::kDeadlineExceeded
                                         : s.code();
    return absl::Status(code, absl::StrCat("calibration of rank ", rank, ": ", what, ": ",
                                           s.message()));
  };
  if (absl::Status s = Check(); !s.ok()) {
    return has_link ? failed("the link to the next rank", s) : absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<comm::Transport>> transport =
      comm::ConnectForDevice(*env_.kv, LinkOptions(request_, env_.hostname, deadline_),
                             env_.device);
  if (!transport.ok()) {
    return has_link ? failed("connecting to the other ranks", transport.status())
                    : absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<kernels::Ops>> ops = kernels::MakeOps(env_.device);
  if (!ops.ok()) return ops.status();
  SetTransport(transport->get());
  absl::Status status;
  {
    const int64_t floats = (MessageBytes(request_) + 3) / 4;  // what is sent: whole floats
    PingPong pings(**transport, **ops, static_cast<size_t>(floats));
    if (rank > 0) status = pings.Answer(rank - 1);
    if (status.ok() && has_link) {
      const absl::Time now = absl::Now();
      // What is left is shared by this link and the ones after it, measured one after another.
      const absl::Time until = now + (deadline_ - now) / (world - 1 - rank);
      absl::StatusOr<Link> link =
          Ping(*this, pings, rank + 1, until, floats * static_cast<int64_t>(sizeof(float)));
      if (link.ok()) {
        out.set_link_latency_seconds(link->latency_seconds);
        out.set_link_bytes_per_second(link->bytes_per_second);
      }
      status = link.status();
    }
    // Nobody leaves the mesh while a neighbour may still use it; the deadline bounds the wait.
    if (status.ok()) (void)(*transport)->Barrier();
    // A failed round can leave a receive posted into pings' buffers (an echo the peer may still
    // send): the transport goes before they are freed, so nothing writes them afterwards.
    SetTransport(nullptr);
    transport->reset();
  }
  if (!status.ok() && has_link) return failed("the link to the next rank", status);
  return absl::OkStatus();
}

}  // namespace pp::calibrate
