#include <string>

#include "absl/strings/str_cat.h"
#include "worker/comm/transport.h"

namespace pp::comm {
namespace {

constexpr int kFieldBits = 27;
constexpr uint64_t kFieldMask = (uint64_t{1} << kFieldBits) - 1;
constexpr uint64_t kGradientBit = uint64_t{1} << (2 * kFieldBits);
// Tags of boundary messages carry this bit, so DescribeTag can tell them from other callers'.
constexpr uint64_t kBoundaryBit = uint64_t{1} << (2 * kFieldBits + 1);

}  // namespace

uint64_t BoundaryTag(bool gradient, int lo_stage, int microbatch) {
  return kBoundaryBit | (gradient ? kGradientBit : 0) |
         ((static_cast<uint64_t>(lo_stage) & kFieldMask) << kFieldBits) |
         (static_cast<uint64_t>(microbatch) & kFieldMask);
}

std::string DescribeTag(uint64_t tag) {
  if ((tag & kBoundaryBit) == 0) return absl::StrCat("tag ", tag);
  const uint64_t lo = (tag >> kFieldBits) & kFieldMask;
  return absl::StrCat((tag & kGradientBit) != 0 ? "gradient " : "activation ", lo, "->", lo + 1,
                      " mb ", tag & kFieldMask);
}

}  // namespace pp::comm
