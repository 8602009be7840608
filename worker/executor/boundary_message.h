// The wire format of a pipeline boundary tensor (an activation or its gradient): a fixed-size
// header stating the tensor's message tag and shape, then the tensor. Both travel on the tensor's
// channel (program/message.h), the header first, as two transport messages.
//
// Why a header: a receiver sizes its buffer from the shape the sender states, not from its own
// belief, so microbatches whose shapes differ need no separate shape exchange that could be posted
// in another order than the data (on NCCL a misordered exchange delivers the wrong bytes or
// hangs). A header is also checked: a stray message (another tag, a corrupt or hostile peer) fails
// the receive naming both, never a buffer overrun.
//
// Header: kHeaderWords 32-bit words, little-endian, sent as floats bit for bit (transports copy
// bytes; nothing does arithmetic on them):
//   0 magic 0x48535050 ("PPSH")  1 version (1)  2-3 tag (low, high)
//   4 batch  5 seq  6 width      7 check: the XOR of words 0..6 with 0x9E3779B9
// The shape is the tensor's (batch, seq, width) = (B, T, C) today; every dim is in [1, 2^31) and
// their product at most kMaxBoundaryFloats.
//
// Thread-safe: pure functions.
#ifndef PP_WORKER_EXECUTOR_BOUNDARY_MESSAGE_H_
#define PP_WORKER_EXECUTOR_BOUNDARY_MESSAGE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace pp::executor {

struct BoundaryShape {
  int64_t batch = 1;  // B
  int64_t seq = 1;    // T
  int64_t width = 1;  // C
  bool operator==(const BoundaryShape&) const = default;
};
std::string ToString(const BoundaryShape& shape);  // "(2,64,128)"

// 2^36 floats (256 GiB): far above any activation, far below what overflows a size_t product.
inline constexpr int64_t kMaxBoundaryFloats = int64_t{1} << 36;
// The payload's floats. InvalidArgument for a dim outside [1, 2^31) or a product above
// kMaxBoundaryFloats (computed without overflow).
absl::StatusOr<size_t> BoundaryFloats(const BoundaryShape& shape);

inline constexpr int kHeaderWords = 8;
// A header travels as this many floats (one float per word).
inline constexpr size_t kHeaderFloats = kHeaderWords;
static_assert(sizeof(float) == sizeof(uint32_t));

struct BoundaryHeader {
  uint64_t tag = 0;
  BoundaryShape shape;
};
// REQUIRES BoundaryFloats(header.shape).ok().
void EncodeHeader(const BoundaryHeader& header, float out[kHeaderFloats]);
// DataLoss for a wrong magic, version or check word, or a shape BoundaryFloats refuses: what a
// message that is not a header (or a corrupted one) gives.
absl::StatusOr<BoundaryHeader> DecodeHeader(const float in[kHeaderFloats]);

}  // namespace pp::executor

#endif  // PP_WORKER_EXECUTOR_BOUNDARY_MESSAGE_H_
