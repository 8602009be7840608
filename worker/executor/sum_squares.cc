#include "worker/executor/sum_squares.h"

#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pp::executor {

std::string EncodeSumSquares(const std::vector<TensorSumSq>& sums) {
  std::string out;
  for (const TensorSumSq& t : sums) {
    uint32_t length = static_cast<uint32_t>(t.name.size());
    out.append(reinterpret_cast<const char*>(&length), sizeof(length));
    out.append(t.name);
    out.append(reinterpret_cast<const char*>(&t.sum_sq), sizeof(t.sum_sq));
  }
  return out;
}

absl::Status DecodeSumSquares(const std::string& bytes, int from_rank, std::vector<TensorSumSq>& out) {
  size_t at = 0;
  while (at < bytes.size()) {
    uint32_t length = 0;
    if (bytes.size() - at < sizeof(length)) break;
    std::memcpy(&length, bytes.data() + at, sizeof(length));
    at += sizeof(length);
    if (bytes.size() - at < length + sizeof(double)) break;
    TensorSumSq t;
    t.name = bytes.substr(at, length);
    at += length;
    std::memcpy(&t.sum_sq, bytes.data() + at, sizeof(double));
    at += sizeof(double);
    out.push_back(std::move(t));
  }
  if (at != bytes.size()) {
    return absl::DataLossError(absl::StrCat("malformed gradient norms from rank ", from_rank));
  }
  return absl::OkStatus();
}

}  // namespace pp::executor
