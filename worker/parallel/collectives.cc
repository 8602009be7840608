// The in-process Collectives (threads meeting at a barrier) and the tensor-parallel norm sums.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "worker/parallel/parallel.h"

namespace pp::parallel {
namespace {

// What the members of one in-process group share: a reusable barrier and each member's posted
// buffer for the collective in progress.
class Shared {
 public:
  Shared(int size, absl::Duration timeout)
      : size_(size), timeout_(timeout), buffers_(size), lengths_(size) {}

  int size() const { return size_; }

  // Posts rank's buffer, waits for every member, and checks they agree on the length.
  absl::Status Post(int rank, const void* buffer, size_t length, const char* op) {
    {
      absl::MutexLock lock(&mu_);
      buffers_[rank] = buffer;
      lengths_[rank] = length;
    }
    if (absl::Status s = Barrier(rank, op); !s.ok()) return s;
    absl::MutexLock lock(&mu_);
    for (int r = 0; r < size_; ++r) {
      if (lengths_[r] != length) {
        return absl::InvalidArgumentError(absl::StrCat(op, ": rank ", rank, " passed ", length,
                                                       " elements, rank ", r, " ", lengths_[r]));
      }
    }
    return absl::OkStatus();
  }

  const void* buffer(int rank) {
    absl::MutexLock lock(&mu_);
    return buffers_[rank];
  }

  absl::Status Barrier(int rank, const char* op) {
    absl::MutexLock lock(&mu_);
    if (broken_) return Broken(rank, op);
    const int64_t generation = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      return absl::OkStatus();
    }
    auto released = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return generation_ != generation || broken_;
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&released), timeout_) || broken_) {
      broken_ = true;
      return Broken(rank, op);
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Broken(int rank, const char* op) const {
    return absl::DeadlineExceededError(
        absl::StrCat(op, ": rank ", rank, " of an in-process group of ", size_,
                     " waited more than ", absl::FormatDuration(timeout_),
                     " for its peers (or an earlier call of the group timed out)"));
  }

  const int size_;
  const absl::Duration timeout_;
  absl::Mutex mu_;
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<const void*> buffers_ ABSL_GUARDED_BY(mu_);
  std::vector<size_t> lengths_ ABSL_GUARDED_BY(mu_);
};

class InProcessMember : public Collectives {
 public:
  InProcessMember(std::shared_ptr<Shared> shared, int rank)
      : shared_(std::move(shared)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return shared_->size(); }

  // Every member sums all buffers in rank order into its own scratch (same bits everywhere), then
  // all wait until nobody reads the buffers any more before overwriting their own.
  absl::Status AllReduceSum(float* data, size_t n) override {
    if (absl::Status s = shared_->Post(rank_, data, n, "AllReduceSum"); !s.ok()) return s;
    sum_.assign(n, 0.0f);
    for (int r = 0; r < size(); ++r) {
      const float* x = static_cast<const float*>(shared_->buffer(r));
      if (r == 0) {
        std::memcpy(sum_.data(), x, n * sizeof(float));
      } else {
        for (size_t i = 0; i < n; ++i) sum_[i] += x[i];
      }
    }
    if (absl::Status s = shared_->Barrier(rank_, "AllReduceSum"); !s.ok()) return s;
    if (n > 0) std::memcpy(data, sum_.data(), n * sizeof(float));
    return absl::OkStatus();
  }

  absl::Status AllGather(const void* in, size_t bytes, void* out) override {
    if (absl::Status s = shared_->Post(rank_, in, bytes, "AllGather"); !s.ok()) return s;
    for (int r = 0; r < size() && bytes > 0; ++r) {
      std::memcpy(static_cast<char*>(out) + r * bytes, shared_->buffer(r), bytes);
    }
    return shared_->Barrier(rank_, "AllGather");
  }

 private:
  std::shared_ptr<Shared> shared_;
  const int rank_;
  std::vector<float> sum_;
};

// FNV-1a over the names, to check that the ranks list the same tensors.
uint64_t HashNames(const std::map<std::string, double>& sums) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const auto& [name, value] : sums) {
    for (unsigned char c : name + '\0') {
      h ^= c;
      h *= 0x100000001b3ULL;
    }
  }
  return h;
}

}  // namespace

std::vector<std::unique_ptr<Collectives>> MakeInProcessGroup(int size, absl::Duration timeout) {
  auto shared = std::make_shared<Shared>(size, timeout);
  std::vector<std::unique_ptr<Collectives>> members;
  for (int r = 0; r < size; ++r) members.push_back(std::make_unique<InProcessMember>(shared, r));
  return members;
}

absl::Status AllReduceSumSquares(Collectives& group, const std::set<std::string>& sharded,
                                 std::map<std::string, double>& sums) {
  const int n = group.size();
  const uint64_t key[2] = {sums.size(), HashNames(sums)};
  std::vector<uint64_t> keys(2 * n);
  if (absl::Status s = group.AllGather(key, sizeof(key), keys.data()); !s.ok()) return s;
  for (int r = 0; r < n; ++r) {
    if (keys[2 * r] != key[0] || keys[2 * r + 1] != key[1]) {
      return absl::InvalidArgumentError(absl::StrCat("gradient norm: rank ", r, " holds ",
                                                     keys[2 * r], " tensors, rank ", group.rank(),
                                                     " ", key[0], " (or other names)"));
    }
  }
  std::vector<double> mine;
  for (const auto& [name, value] : sums) mine.push_back(value);
  std::vector<double> all(mine.size() * n);
  if (absl::Status s = group.AllGather(mine.data(), mine.size() * sizeof(double), all.data());
      !s.ok()) {
    return s;
  }
  size_t i = 0;
  for (auto& [name, value] : sums) {
    value = all[i];  // rank 0's
    if (sharded.count(name)) {
      for (int r = 1; r < n; ++r) value += all[r * mine.size() + i];
    }
    ++i;
  }
  return absl::OkStatus();
}

}  // namespace pp::parallel
