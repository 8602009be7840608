#include "program/message.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace pp::prog {
namespace {

constexpr int kFieldBits = 27;
constexpr uint64_t kFieldMask = (uint64_t{1} << kFieldBits) - 1;
constexpr uint64_t kGradientBit = uint64_t{1} << (2 * kFieldBits);
// Tags of boundary messages carry this bit, so DescribeTag can tell them from other callers'.
constexpr uint64_t kBoundaryBit = uint64_t{1} << (2 * kFieldBits + 1);

bool MineIsLo(Kind kind) { return kind == Kind::kSendActivation || kind == Kind::kRecvGrad; }

}  // namespace

Ends EndsOf(const std::vector<int>& stage_to_rank, int rank, const Action& a) {
  const int S = static_cast<int>(stage_to_rank.size());
  const bool named_mine = a.stage >= 0 && a.stage < S && stage_to_rank[a.stage] == rank;
  const int step = MineIsLo(a.kind) ? 1 : -1;  // from my stage to the other's
  if (named_mine) return {a.stage, a.stage + step};
  return {a.stage - step, a.stage};
}

Message MessageOf(const std::vector<int>& stage_to_rank, int rank, const Action& a) {
  const Ends ends = EndsOf(stage_to_rank, rank, a);
  const bool gradient = a.kind == Kind::kSendGrad || a.kind == Kind::kRecvGrad;
  return {gradient, std::min(ends.mine, ends.other), a.microbatch};
}

Message MessageOf(const Action& a) {
  const bool gradient = a.kind == Kind::kSendGrad || a.kind == Kind::kRecvGrad;
  const bool named_lo = MineIsLo(a.kind);
  return {gradient, named_lo ? a.stage : a.stage - 1, a.microbatch};
}

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

}  // namespace pp::prog
