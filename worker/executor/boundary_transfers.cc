#include "worker/executor/boundary_transfers.h"

#include "absl/strings/str_cat.h"

namespace pp::executor {

BoundaryTransfers::BoundaryTransfers(comm::Transport* transport, StageCompute* compute)
    : transport_(transport), compute_(compute) {}

// Whatever is still posted here is a transfer a failed step left behind: the transport may write
// it after Abort, so it is leaked (the contract), and nothing else is owned.
BoundaryTransfers::~BoundaryTransfers() = default;

absl::Status BoundaryTransfers::Send(int peer, int channel, uint64_t tag,
                                     const BoundaryShape& shape, float* data) {
  absl::StatusOr<size_t> n = BoundaryFloats(shape);
  float* header = n.ok() ? compute_->AllocBuffer(kHeaderFloats) : nullptr;
  if (header == nullptr) {
    compute_->FreeBuffer(data);
    return n.ok() ? absl::ResourceExhaustedError("cannot allocate a boundary header") : n.status();
  }
  float words[kHeaderFloats];
  EncodeHeader({tag, shape}, words);
  compute_->CopyFromHost(header, words, kHeaderFloats);
  absl::StatusOr<comm::Handle> sent = transport_->Isend(peer, channel, tag, header, kHeaderFloats);
  if (!sent.ok()) {
    compute_->FreeBuffer(header);
    compute_->FreeBuffer(data);
    return sent.status();
  }
  sends_.push_back({*sent, header});
  sent = transport_->Isend(peer, channel, tag, data, *n);
  if (!sent.ok()) {
    compute_->FreeBuffer(data);  // the header's send may be in flight: it stays in sends_
    return sent.status();
  }
  sends_.push_back({*sent, data});
  return absl::OkStatus();
}

absl::Status BoundaryTransfers::DrainSends() {
  while (!sends_.empty()) {
    if (absl::Status s = transport_->Wait(sends_.back().handle); !s.ok()) return s;
    compute_->FreeBuffer(sends_.back().buffer);
    sends_.pop_back();
  }
  return absl::OkStatus();
}

absl::StatusOr<BoundaryTransfers::Posted> BoundaryTransfers::PostReceive(int peer, int channel,
                                                                         uint64_t tag, size_t n) {
  float* buffer = compute_->AllocBuffer(n);
  if (buffer == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", n, " floats"));
  }
  absl::StatusOr<comm::Handle> handle = transport_->Irecv(peer, channel, tag, buffer, n);
  if (!handle.ok()) {
    compute_->FreeBuffer(buffer);
    return handle.status();
  }
  return Posted{*handle, buffer};
}

absl::Status BoundaryTransfers::Post(size_t id, int peer, int channel, uint64_t tag,
                                     const BoundaryShape& expected) {
  absl::StatusOr<size_t> n = BoundaryFloats(expected);
  if (!n.ok()) return n.status();
  if (receives_.contains(id)) {
    return absl::InvalidArgumentError(absl::StrCat("message ", id, " is posted twice"));
  }
  absl::StatusOr<Posted> header = PostReceive(peer, channel, tag, kHeaderFloats);
  if (!header.ok()) return header.status();
  absl::StatusOr<Posted> payload = PostReceive(peer, channel, tag, *n);
  // A failed payload post leaves the header's receive in flight: its buffer is leaked.
  if (!payload.ok()) return payload.status();
  receives_[id] = {tag, expected, *header, *payload};
  return absl::OkStatus();
}

absl::StatusOr<BoundaryHeader> BoundaryTransfers::ReadHeader(const Posted& header) {
  if (absl::Status s = transport_->Wait(header.handle); !s.ok()) return s;  // buffer leaked
  float words[kHeaderFloats];
  compute_->CopyToHost(words, header.buffer, kHeaderFloats);
  compute_->FreeBuffer(header.buffer);
  return DecodeHeader(words);
}

absl::StatusOr<BoundaryTransfers::Received> BoundaryTransfers::Receive(size_t id) {
  auto it = receives_.find(id);
  if (it == receives_.end()) {
    return absl::FailedPreconditionError(absl::StrCat("message ", id, " was never posted"));
  }
  const Receipt receipt = it->second;
  receives_.erase(it);
  // On any error below the payload's receive may still be in flight: its buffer is leaked.
  absl::StatusOr<BoundaryHeader> got = ReadHeader(receipt.header);
  if (!got.ok()) return got.status();
  if (got->tag != receipt.tag || !(got->shape == receipt.shape)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the sender's header states ", comm::DescribeTag(got->tag), " of shape ",
                     ToString(got->shape), " where this rank expects ",
                     comm::DescribeTag(receipt.tag), " of shape ", ToString(receipt.shape)));
  }
  if (absl::Status s = transport_->Wait(receipt.payload.handle); !s.ok()) return s;
  return Received{receipt.payload.buffer, *BoundaryFloats(receipt.shape)};
}

}  // namespace pp::executor
