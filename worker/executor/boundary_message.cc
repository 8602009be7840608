#include "worker/executor/boundary_message.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pp::executor {
namespace {

constexpr uint32_t kMagic = 0x48535050;  // "PPSH" read as little-endian bytes
constexpr uint32_t kVersion = 1;
constexpr uint32_t kCheckSeed = 0x9E3779B9;
constexpr int64_t kMaxDim = int64_t{1} << 31;

uint32_t Check(const uint32_t words[kHeaderWords]) {
  uint32_t x = kCheckSeed;
  for (int i = 0; i < kHeaderWords - 1; ++i) x ^= words[i];
  return x;
}

}  // namespace

std::string ToString(const BoundaryShape& shape) {
  return absl::StrCat("(", shape.batch, ",", shape.seq, ",", shape.width, ")");
}

absl::StatusOr<size_t> BoundaryFloats(const BoundaryShape& shape) {
  int64_t product = 1;
  for (const int64_t dim : {shape.batch, shape.seq, shape.width}) {
    if (dim < 1 || dim >= kMaxDim) {
      return absl::InvalidArgumentError(
          absl::StrCat("boundary shape ", ToString(shape), ": a dim outside [1, 2^31)"));
    }
    // product <= 2^36 and dim < 2^31: the product fits in int64 before the bound is checked.
    product *= dim;
    if (product > kMaxBoundaryFloats) {
      return absl::InvalidArgumentError(
          absl::StrCat("boundary shape ", ToString(shape), ": more than 2^36 floats"));
    }
  }
  return static_cast<size_t>(product);
}

void EncodeHeader(const BoundaryHeader& header, float out[kHeaderFloats]) {
  uint32_t words[kHeaderWords] = {kMagic,
                                  kVersion,
                                  static_cast<uint32_t>(header.tag),
                                  static_cast<uint32_t>(header.tag >> 32),
                                  static_cast<uint32_t>(header.shape.batch),
                                  static_cast<uint32_t>(header.shape.seq),
                                  static_cast<uint32_t>(header.shape.width),
                                  0};
  words[kHeaderWords - 1] = Check(words);
  std::memcpy(out, words, sizeof(words));
}

absl::StatusOr<BoundaryHeader> DecodeHeader(const float in[kHeaderFloats]) {
  uint32_t words[kHeaderWords];
  std::memcpy(words, in, sizeof(words));
  if (words[0] != kMagic || words[1] != kVersion || words[kHeaderWords - 1] != Check(words)) {
    return absl::DataLossError(absl::StrCat("not a boundary header (magic ", words[0], ", version ",
                                            words[1], ", check ", words[kHeaderWords - 1], ")"));
  }
  BoundaryHeader header;
  header.tag = uint64_t{words[2]} | uint64_t{words[3]} << 32;
  header.shape = {words[4], words[5], words[6]};
  if (absl::StatusOr<size_t> n = BoundaryFloats(header.shape); !n.ok()) {
    return absl::DataLossError(n.status().message());
  }
  return header;
}

}  // namespace pp::executor
