// One step's boundary messages on one rank, in boundary_message.h's format over a
// comm::Transport: each tensor goes out as its header then its payload, and comes in the same way.
//
// Posting order. A transport matches a channel's messages in posting order (comm/transport.h), so
// between two ranks a channel carries h1 p1 h2 p2 ... and the receiver posts h1 p1 h2 p2 too: Post
// posts a message's header and payload receives together, the payload's buffer sized from the
// shape the receiver expects. That shape is a pure function of the step's data on every rank
// (StageCompute::InputShape/OutputShape), the same function the sender's header is written from,
// so the two agree unless something is wrong; Receive reads the header before it hands out the
// payload and fails, naming both, when they do not. A receive is thus posted as early as without
// headers (lower.h's argument unchanged) and its transfer overlaps the compute before its RECV:
// reading each header first and only then posting the payload would expose every transfer (bench:
// bench/transport, 5-30% of a step on loopback).
//
// Memory: payload and header buffers are the compute's (StageCompute::AllocBuffer; device memory
// on NCCL), the header read through StageCompute::CopyToHost. A buffer a transfer may still write
// after a failure (Abort) is leaked, never freed under it.
//
// Thread-compatible: one step's executor thread.
#ifndef PP_WORKER_EXECUTOR_BOUNDARY_TRANSFERS_H_
#define PP_WORKER_EXECUTOR_BOUNDARY_TRANSFERS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/comm/transport.h"
#include "worker/executor/boundary_message.h"
#include "worker/executor/executor.h"

namespace pp::executor {

class BoundaryTransfers {
 public:
  // Both must outlive this.
  BoundaryTransfers(comm::Transport* transport, StageCompute* compute);
  ~BoundaryTransfers();
  BoundaryTransfers(const BoundaryTransfers&) = delete;
  BoundaryTransfers& operator=(const BoundaryTransfers&) = delete;

  // Posts the header of `shape` and then `data` (BoundaryFloats(shape) floats of AllocBuffer's
  // memory, owned from here on and freed once its send completed). On error `data` was freed.
  absl::Status Send(int peer, int channel, uint64_t tag, const BoundaryShape& shape, float* data);
  // Waits for every send posted so far and frees their buffers.
  absl::Status DrainSends();

  // Posts the header and payload receives of message `id`, any number unique in the step (the
  // executor uses its op index), a tensor of `expected` shape.
  absl::Status Post(size_t id, int peer, int channel, uint64_t tag, const BoundaryShape& expected);
  // Waits for message `id`'s header; checks that it names the tag and shape Post was given, then
  // waits for the payload, owned by the caller from here on. FailedPrecondition when `id` was not
  // posted; DataLoss for a message that is not a header; InvalidArgument for a header of another
  // tag or shape (both named); transport errors as they come.
  struct Received {
    float* data = nullptr;
    size_t n = 0;
  };
  absl::StatusOr<Received> Receive(size_t id);
  // Messages posted and not received yet.
  size_t unreceived() const { return receives_.size(); }

 private:
  struct Posted {
    comm::Handle handle;
    float* buffer;
  };
  struct Receipt {
    uint64_t tag;
    BoundaryShape shape;
    Posted header;
    Posted payload;
  };
  // A posted receive of n floats into a new buffer.
  absl::StatusOr<Posted> PostReceive(int peer, int channel, uint64_t tag, size_t n);
  // The header of a message, once its receive completed (frees its buffer).
  absl::StatusOr<BoundaryHeader> ReadHeader(const Posted& header);

  comm::Transport* transport_;
  StageCompute* compute_;
  std::vector<Posted> sends_;
  std::map<size_t, Receipt> receives_;  // posted, not received yet; by id
};

}  // namespace pp::executor

#endif  // PP_WORKER_EXECUTOR_BOUNDARY_TRANSFERS_H_
