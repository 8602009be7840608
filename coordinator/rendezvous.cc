#include "coordinator/rendezvous.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pp::coordinator {

void RendezvousStore::Set(const std::string& key, std::string value) {
  absl::MutexLock lock(&mu_);
  values_[key] = std::move(value);
}

bool RendezvousStore::AllPresent(const std::vector<std::string>& keys) const {
  for (const std::string& key : keys) {
    if (!values_.contains(key)) return false;
  }
  return true;
}

absl::StatusOr<std::vector<std::string>> RendezvousStore::Get(
    const std::vector<std::string>& keys, absl::Duration timeout,
    const std::function<bool()>& cancelled) {
  // Waits in short slices so a departed caller or a shutdown ends the wait promptly.
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  auto ready = [this, &keys]()
                   ABSL_SHARED_LOCKS_REQUIRED(mu_) { return closed_ || AllPresent(keys); };
  while (!ready()) {
    const absl::Time now = absl::Now();
    if (now >= deadline || (cancelled && cancelled())) break;
    mu_.AwaitWithDeadline(absl::Condition(&ready),
                          std::min(deadline, now + absl::Milliseconds(200)));
  }
  if (closed_) return absl::UnavailableError("rendezvous store is shutting down");
  std::vector<std::string> missing;
  for (const std::string& key : keys) {
    if (!values_.contains(key)) missing.push_back(key);
  }
  if (!missing.empty()) {
    return absl::DeadlineExceededError(absl::StrCat("rendezvous keys not set within ",
                                                    absl::FormatDuration(timeout), ": ",
                                                    absl::StrJoin(missing, ", ")));
  }
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const std::string& key : keys) out.push_back(values_.at(key));
  return out;
}

int RendezvousStore::EraseWithPrefix(const std::string& prefix) {
  absl::MutexLock lock(&mu_);
  int erased = 0;
  for (auto it = values_.lower_bound(prefix);
       it != values_.end() && it->first.compare(0, prefix.size(), prefix) == 0;) {
    it = values_.erase(it);
    ++erased;
  }
  return erased;
}

void RendezvousStore::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

size_t RendezvousStore::size() const {
  absl::MutexLock lock(&mu_);
  return values_.size();
}

}  // namespace pp::coordinator
