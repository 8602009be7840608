#include "worker/executor/sum_squares.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pp::executor {
namespace {

void AppendEntry(const std::string& name, double value, std::string& out) {
  uint32_t length = static_cast<uint32_t>(name.size());
  out.append(reinterpret_cast<const char*>(&length), sizeof(length));
  out.append(name);
  out.append(reinterpret_cast<const char*>(&value), sizeof(value));
}

}  // namespace

std::string EncodeSumSquares(const RankSums& part) {
  std::string out;
  if (part.loss) AppendEntry("", *part.loss, out);
  for (const TensorSumSq& t : part.sums) AppendEntry(t.name, t.sum_sq, out);
  return out;
}

absl::StatusOr<RankSums> DecodeSumSquares(const std::string& bytes, int from_rank) {
  RankSums part;
  size_t at = 0;
  while (at < bytes.size()) {
    uint32_t length = 0;
    if (bytes.size() - at < sizeof(length)) break;
    std::memcpy(&length, bytes.data() + at, sizeof(length));
    at += sizeof(length);
    if (bytes.size() - at < length + sizeof(double)) break;
    std::string name = bytes.substr(at, length);
    at += length;
    double value = 0;
    std::memcpy(&value, bytes.data() + at, sizeof(double));
    at += sizeof(double);
    if (name.empty()) {
      part.loss = value;
    } else {
      part.sums.push_back({std::move(name), value});
    }
  }
  if (at != bytes.size()) {
    return absl::DataLossError(absl::StrCat("malformed gradient norms from rank ", from_rank));
  }
  return part;
}

absl::StatusOr<std::vector<RankSums>> AllGatherSums(comm::Transport& transport,
                                                    const RankSums& mine) {
  absl::StatusOr<std::vector<std::string>> gathered = transport.AllGather(EncodeSumSquares(mine));
  if (!gathered.ok()) return gathered.status();
  std::vector<RankSums> all;
  for (int r = 0; r < static_cast<int>(gathered->size()); ++r) {
    absl::StatusOr<RankSums> part = DecodeSumSquares((*gathered)[r], r);
    if (!part.ok()) return part.status();
    all.push_back(*std::move(part));
  }
  return all;
}

std::optional<NonFinite> FindNonFinite(const std::vector<RankSums>& ranks) {
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    if (ranks[r].loss && !std::isfinite(*ranks[r].loss)) {
      return NonFinite{.what = "loss", .rank = r, .value = *ranks[r].loss};
    }
  }
  double total = 0;
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    for (const TensorSumSq& t : ranks[r].sums) {
      if (!std::isfinite(t.sum_sq)) {
        return NonFinite{.what = absl::StrCat("gradient of tensor '", t.name, "'"),
                         .rank = r,
                         .value = t.sum_sq};
      }
      total += t.sum_sq;
    }
  }
  // Finite sums of squares can still add up past the largest double.
  if (!std::isfinite(total)) {
    return NonFinite{.what = "global gradient norm", .rank = -1, .value = total};
  }
  return std::nullopt;
}

std::string DescribeNonFinite(int step, const NonFinite& bad) {
  std::string where = bad.rank >= 0 ? absl::StrCat(" on rank ", bad.rank) : "";
  return absl::StrCat("step ", step, ": non-finite ", bad.what, " ", bad.value, where);
}

absl::Status TooManyBadSteps(int step, const NonFinite& bad, int bad_steps, int max_bad_steps) {
  return absl::OutOfRangeError(
      absl::StrCat(DescribeNonFinite(step, bad), "; ", bad_steps,
                   " bad steps, more than train.max_bad_steps = ", max_bad_steps));
}

}  // namespace pp::executor
