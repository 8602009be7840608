#include "coordinator/rendezvous.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pp::coordinator {
namespace {

// "<job>/<attempt>/" of a key; a key with fewer components counts as its own attempt.
std::string AttemptOf(const std::string& key) {
  const size_t first = key.find('/');
  const size_t second = first == std::string::npos ? first : key.find('/', first + 1);
  return second == std::string::npos ? key : key.substr(0, second + 1);
}

int64_t Bytes(const std::string& key, const std::string& value) {
  return static_cast<int64_t>(key.size() + value.size());
}

absl::Status Over(const std::string& what, int64_t would, int64_t limit) {
  return absl::ResourceExhaustedError(
      absl::StrCat("rendezvous: ", what, " would be ", would, ", over the limit ", limit));
}

}  // namespace

RendezvousStore::RendezvousStore(RendezvousLimits limits, std::function<absl::Time()> clock)
    : limits_(limits), clock_(std::move(clock)), last_sweep_(clock_()) {}

absl::Status RendezvousStore::CheckRoom(const std::string& key, const std::string& value) const {
  const int64_t value_bytes = static_cast<int64_t>(value.size());
  if (value_bytes > limits_.max_value_bytes) {
    return Over(absl::StrCat("the value of key \"", key, "\" (bytes)"), value_bytes,
                limits_.max_value_bytes);
  }
  auto old = values_.find(key);
  const int64_t new_keys = old == values_.end() ? 1 : 0;
  const int64_t new_bytes =
      Bytes(key, value) - (old == values_.end() ? 0 : Bytes(key, old->second.value));
  const std::string attempt = AttemptOf(key);
  auto used = attempts_.find(attempt);
  const Usage mine = used == attempts_.end() ? Usage{} : used->second;
  if (mine.keys + new_keys > limits_.max_attempt_keys) {
    return Over(absl::StrCat("the keys of \"", attempt, "\""), mine.keys + new_keys,
                limits_.max_attempt_keys);
  }
  if (mine.bytes + new_bytes > limits_.max_attempt_bytes) {
    return Over(absl::StrCat("the bytes of \"", attempt, "\""), mine.bytes + new_bytes,
                limits_.max_attempt_bytes);
  }
  if (total_.keys + new_keys > limits_.max_total_keys) {
    return Over("the keys of the store", total_.keys + new_keys, limits_.max_total_keys);
  }
  if (total_.bytes + new_bytes > limits_.max_total_bytes) {
    return Over("the bytes of the store", total_.bytes + new_bytes, limits_.max_total_bytes);
  }
  return absl::OkStatus();
}

void RendezvousStore::Account(const std::string& key, int64_t keys, int64_t bytes) {
  const std::string attempt = AttemptOf(key);
  Usage& mine = attempts_[attempt];
  mine.keys += keys;
  mine.bytes += bytes;
  if (mine.keys == 0) attempts_.erase(attempt);
  total_.keys += keys;
  total_.bytes += bytes;
}

std::map<std::string, RendezvousStore::Entry>::iterator RendezvousStore::EraseLocked(
    std::map<std::string, Entry>::iterator it) {
  Account(it->first, -1, -Bytes(it->first, it->second.value));
  return values_.erase(it);
}

void RendezvousStore::DropIdleLocked() {
  // A sweep walks every key, so it runs at most once per tenth of the TTL.
  const absl::Time now = clock_();
  if (now - last_sweep_ < limits_.idle_ttl / 10) return;
  last_sweep_ = now;
  for (auto it = values_.begin(); it != values_.end();) {
    it = now - it->second.touched >= limits_.idle_ttl ? EraseLocked(it) : std::next(it);
  }
}

absl::Status RendezvousStore::Set(const std::string& key, std::string value) {
  absl::MutexLock lock(&mu_);
  DropIdleLocked();
  if (absl::Status room = CheckRoom(key, value); !room.ok()) return room;
  auto [it, added] = values_.try_emplace(key);
  Account(key, added ? 1 : 0, Bytes(key, value) - (added ? 0 : Bytes(key, it->second.value)));
  it->second.value = std::move(value);
  it->second.touched = clock_();
  return absl::OkStatus();
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
  timeout = std::min(timeout, limits_.max_wait);
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
  const absl::Time now = clock_();
  for (const std::string& key : keys) {
    Entry& entry = values_.at(key);
    entry.touched = now;  // a key still read is still in use
    out.push_back(entry.value);
  }
  return out;
}

int RendezvousStore::EraseWithPrefix(const std::string& prefix) {
  absl::MutexLock lock(&mu_);
  int erased = 0;
  for (auto it = values_.lower_bound(prefix);
       it != values_.end() && it->first.compare(0, prefix.size(), prefix) == 0;) {
    it = EraseLocked(it);
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
