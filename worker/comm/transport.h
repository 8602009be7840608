// Point-to-point float messages between the ranks of one job, plus the few collectives the
// runtime needs, behind one interface with two implementations: Gloo over TCP (CPU) and NCCL (GPU).
//
// Contract:
// - Isend/Irecv start an operation and return at once; Wait completes it. Memory passed to them
//   must stay valid and untouched until Wait returns. Messages between two ranks match by `tag`
//   (only the low 62 bits are used); two messages with the same (peer, tag) match in order.
// - Every blocking call (Wait, collectives, connecting) gives up after the transport's timeout
//   with DeadlineExceeded or Unavailable naming the peer/operation; Abort() makes pending and
//   future waits fail with Aborted. After any error the transport is unusable: drop it.
// - Peers find each other through a KvStore (the coordinator's KvSet/KvGet RPCs in the daemon,
//   an in-memory map in tests); every key is prefixed by TransportOptions::prefix.
// - Gloo buffers are host memory; NCCL buffers are device memory of the transport's device.
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

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  virtual absl::StatusOr<Handle> Isend(int peer, uint64_t tag, const float* data, size_t n) = 0;
  virtual absl::StatusOr<Handle> Irecv(int peer, uint64_t tag, float* data, size_t n) = 0;
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
};

// Connects a full mesh of Gloo TCP pairs through `store`. Fails within options.timeout when a
// peer never shows up.
absl::StatusOr<std::unique_ptr<Transport>> ConnectGloo(KvStore& store,
                                                       const TransportOptions& options);

// NCCL communicators over options.cuda_device, from the CUDA plugin libpp_cuda.so (loaded here,
// on first use; see kernels/cuda/plugin.h). The ncclUniqueIds travel through `store`. A missing
// plugin gives Unavailable, a plugin without NCCL Unimplemented, a missing device
// FailedPrecondition.
absl::StatusOr<std::unique_ptr<Transport>> ConnectNccl(KvStore& store,
                                                       const TransportOptions& options);

// One mesh group's parallel::Collectives over a transport connected for that group alone (its
// own rendezvous keys): AllReduceSum is the transport's, AllGather goes through host memory.
// `transport` must outlive the result.
std::unique_ptr<parallel::Collectives> GroupCollectives(Transport* transport);

}  // namespace pp::comm

#endif  // PP_WORKER_COMM_TRANSPORT_H_
