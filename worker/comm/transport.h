// Point-to-point float messages between the ranks of one job, plus the few collectives the
// runtime needs, behind one interface with two implementations: Gloo over TCP (CPU) and NCCL (GPU).
//
// Contract:
// - Isend/Irecv start an operation and return at once (but see "connecting"); Wait completes it.
//   Memory passed to them must stay valid and untouched until Wait returns.
// - Matching is by posting order, per channel: between an ordered pair of ranks (sender,
//   receiver), the k-th Isend to the receiver on channel c meets the receiver's k-th Irecv from
//   the sender on channel c. This is NCCL's rule (the operations of one communicator run in issue
//   order and carry no tag), and every caller must post so that it alone pairs the right
//   messages. `tag` names the message for checks and errors only: Gloo also matches by it, the
//   fifo transport fails a Wait whose sender posted another tag or size in that place (naming
//   both messages), NCCL ignores it. Channels are [0, options.channels); tags use 56 bits.
// - Connecting: a channel with a peer listed in TransportOptions::peers (every rank when empty)
//   is connected by Connect*, before it returns, unless options.eager is false. Any other pair
//   connects lazily, as NCCL does: the first operation on a
//   channel blocks until the peer's first operation on that channel (NCCL, fifo), or fails
//   (NCCL, a peer it made no communicator for).
// - Every blocking call (Wait, collectives, connecting) gives up after the transport's timeout
//   with DeadlineExceeded or Unavailable naming the peer/operation; Abort() makes pending and
//   future waits fail with Aborted. After any error the transport is unusable: drop it.
// - Peers find each other through a KvStore (the coordinator's KvSet/KvGet RPCs in the daemon,
//   an in-memory map in tests); every key is prefixed by TransportOptions::prefix.
// - Gloo and fifo buffers are host memory; NCCL buffers are device memory of the transport's
//   device.
#ifndef PP_WORKER_COMM_TRANSPORT_H_
#define PP_WORKER_COMM_TRANSPORT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pp/v1/coordinator.grpc.pb.h"
#include "program/message.h"
#include "worker/parallel/parallel.h"

namespace pp::comm {

// A rendezvous key-value store. Get waits up to `timeout` for the key to appear.
class KvStore {
 public:
  virtual ~KvStore() = default;
  virtual absl::Status Set(const std::string& key, const std::string& value) = 0;
  virtual absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) = 0;
};

// Thread-safe, in-process: one instance shared by the ranks of a test (threads).
std::unique_ptr<KvStore> NewMemoryKvStore();
// Over the coordinator's WorkerRegistry KvSet/KvGet RPCs. `registry` must outlive the store. Get
// asks again while ppcoord answers DEADLINE_EXCEEDED before `timeout` (ppcoord caps each KvGet's
// wait), so a rendezvous may last longer than one server wait.
std::unique_ptr<KvStore> NewCoordinatorKvStore(pp::v1::WorkerRegistry::StubInterface* registry);

using Handle = int64_t;

// The pipeline's channels and boundary tags are the program's (program/message.h: activations
// on one channel, gradients on the other, each kind in its own posting order); the transports
// name them with these.
using prog::BoundaryTag;
using prog::DescribeTag;
using prog::kActivationChannel;
using prog::kGradientChannel;
inline constexpr int kPipelineChannels = 2;
inline constexpr int kMaxChannels = 8;

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  virtual absl::StatusOr<Handle> Isend(int peer, int channel, uint64_t tag, const float* data,
                                       size_t n) = 0;
  virtual absl::StatusOr<Handle> Irecv(int peer, int channel, uint64_t tag, float* data,
                                       size_t n) = 0;
  virtual absl::Status Wait(Handle handle) = 0;

  // Every rank's `mine`, indexed by rank (lengths may differ). Host memory for both backends.
  virtual absl::StatusOr<std::vector<std::string>> AllGather(const std::string& mine) = 0;
  virtual absl::Status Barrier() = 0;
  // data (n) summed over ranks in place (data parallelism); backend memory.
  virtual absl::Status AllReduceSum(float* data, size_t n) = 0;

  // Callable from any thread: fails every pending and future wait with Aborted.
  virtual void Abort() = 0;
};

struct TransportOptions {
  int rank = 0;
  int size = 1;
  std::string prefix;               // rendezvous key prefix (TaskPlan.rendezvous_prefix)
  std::string hostname = "127.0.0.1";  // address this rank listens on (Gloo TCP device)
  absl::Duration timeout = absl::Seconds(30);
  int cuda_device = 0;              // NCCL only
  // False: collectives only (a data- or tensor-parallel group). NCCL then makes no two-rank
  // communicators, and Isend/Irecv fail with FailedPrecondition; Gloo ignores it.
  bool point_to_point = true;
  // Point-to-point channels per ordered pair, [1, kMaxChannels].
  int channels = kPipelineChannels;
  // The ranks this one exchanges point-to-point messages with, connected eagerly (see the
  // contract); empty: every other rank. Must be symmetric: p lists this rank when it is listed.
  // NCCL makes communicators for these peers alone (2 x channels each: a bounded number).
  std::vector<int> peers;
  // False: no channel connects at start, every one lazily (tests of NCCL's lazy connect).
  bool eager = true;
};

// The point-to-point peers `options` asks for: options.peers, or every other rank when it is
// empty; none when !options.point_to_point. InvalidArgument for a peer out of range, this rank or
// a repeat, and for channels outside [1, kMaxChannels].
absl::StatusOr<std::vector<int>> PointToPointPeers(const TransportOptions& options);

// Connects a full mesh of Gloo TCP pairs through `store`. Fails within options.timeout when a
// peer never shows up.
absl::StatusOr<std::unique_ptr<Transport>> ConnectGloo(KvStore& store,
                                                       const TransportOptions& options);

// Gloo underneath, NCCL's rules on top (test builds and PP_TEST_TRANSPORT=fifo): per ordered pair
// and channel, messages match strictly in posting order whatever their tags; a channel with a
// peer not in options.peers connects lazily (its first operation blocks until the peer's first
// one, bounded by the timeout); a receive completes only after the matching send was posted; a
// hidden header carries the sender's tag and size, so a message that NCCL would silently deliver
// into the wrong receive fails the Wait with both messages named.
absl::StatusOr<std::unique_ptr<Transport>> ConnectFifo(KvStore& store,
                                                       const TransportOptions& options);

// NCCL communicators over options.cuda_device, from the CUDA plugin libpp_cuda.so (loaded here,
// on first use; see kernels/cuda/plugin.h). The ncclUniqueIds travel through `store`. A missing
// plugin gives Unavailable, a plugin without NCCL Unimplemented, a missing device
// FailedPrecondition.
absl::StatusOr<std::unique_ptr<Transport>> ConnectNccl(KvStore& store,
                                                       const TransportOptions& options);

// The transport a worker uses on `device` (common/device.h): NCCL on cuda:N (options.cuda_device
// set from it); on the CPU fifo when the environment variable PP_TEST_TRANSPORT is "fifo", Gloo
// when it is unset, empty or "gloo" (anything else: InvalidArgument).
absl::StatusOr<std::unique_ptr<Transport>> ConnectForDevice(KvStore& store,
                                                            TransportOptions options,
                                                            const std::string& device);

// One mesh group's parallel::Collectives over a transport connected for that group alone (its
// own rendezvous keys): AllReduceSum is the transport's, AllGather goes through host memory.
// `transport` must outlive the result.
std::unique_ptr<parallel::Collectives> GroupCollectives(Transport* transport);

}  // namespace pp::comm

#endif  // PP_WORKER_COMM_TRANSPORT_H_
