// Data-parallel gradient buckets (DDP style: Li et al., "PyTorch Distributed", VLDB 2020,
// sec. 3.2).
#include <algorithm>
#include <numeric>
#include <set>

#include "absl/strings/str_cat.h"
#include "worker/parallel/parallel.h"

namespace pp::parallel {

absl::StatusOr<std::vector<Bucket>> AssignBuckets(const std::vector<GradTensor>& tensors,
                                                  const std::vector<int>& weight_grad_stages,
                                                  int64_t bucket_bytes) {
  if (bucket_bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat("bucket size ", bucket_bytes, " must be >= 1"));
  }
  // ready[i]: the last backward that touches tensor i.
  std::vector<int> ready(tensors.size(), -1);
  std::set<std::string> seen;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const GradTensor& t = tensors[i];
    if (!seen.insert(t.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("gradient '", t.name, "' is listed twice"));
    }
    if (t.bytes < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("gradient '", t.name, "' has negative size ", t.bytes));
    }
    for (int k = 0; k < static_cast<int>(weight_grad_stages.size()); ++k) {
      if (weight_grad_stages[k] == t.stage) ready[i] = k;
    }
    if (ready[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("gradient '", t.name, "' of stage ", t.stage,
                       " has no weight-gradient backward on this rank"));
    }
  }
  // Backward order: by completing backward, and within one backward from the model's end.
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return ready[a] != ready[b] ? ready[a] < ready[b] : a > b; });
  std::vector<Bucket> buckets;
  for (size_t i : order) {
    const GradTensor& t = tensors[i];
    if (buckets.empty() || buckets.back().bytes + t.bytes > bucket_bytes) {
      buckets.emplace_back();
    }
    Bucket& b = buckets.back();
    b.names.push_back(t.name);
    b.bytes += t.bytes;
    b.ready_after = ready[i];  // ascending in this order, so the last tensor's is the bucket's
  }
  return buckets;
}

}  // namespace pp::parallel
