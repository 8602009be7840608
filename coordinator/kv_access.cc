#include "coordinator/kv_access.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace pp::coordinator {

std::optional<KeyScope> ScopeOfKey(absl::string_view key) {
  const size_t first = key.find('/');
  if (first == absl::string_view::npos || first == 0) return std::nullopt;
  const size_t second = key.find('/', first + 1);
  if (second == absl::string_view::npos) return std::nullopt;
  const absl::string_view digits = key.substr(first + 1, second - first - 1);
  // SimpleAtoi alone takes a sign and spaces: "job/+1/" must not pass for "job/1/".
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), absl::ascii_isdigit)) {
    return std::nullopt;
  }
  // Canonical numbers only: "job/01/" and "job/001/" would name attempt 1 under prefixes of their
  // own, each with its own share of the store (rendezvous.cc limits keys by their prefix text).
  if (digits.size() > 1 && digits[0] == '0') return std::nullopt;
  KeyScope scope;
  scope.job_id = std::string(key.substr(0, first));
  if (!absl::SimpleAtoi(digits, &scope.attempt)) return std::nullopt;
  return scope;
}

absl::Status CheckKvAccess(const std::string& key, const std::optional<LiveAttempt>& live,
                           const std::string& caller) {
  const std::optional<KeyScope> scope = ScopeOfKey(key);
  if (!scope.has_value()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "rendezvous key \"", key, "\" is under no job attempt's prefix \"<job>/<attempt>/\""));
  }
  if (live.has_value() && live->attempt == scope->attempt && !caller.empty() &&
      std::find(live->workers.begin(), live->workers.end(), caller) != live->workers.end()) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "rendezvous key \"", key, "\" belongs to job ", scope->job_id, " attempt ", scope->attempt,
      ": the caller (", caller, ") is not a worker placed on that attempt while it runs"));
}

absl::Status CheckReportAccess(const std::string& job_id, int attempt, int rank,
                               const std::optional<LiveAttempt>& live, const std::string& caller) {
  if (!live.has_value() || live->attempt != attempt) return absl::OkStatus();
  for (size_t i = 0; i < live->workers.size() && i < live->ranks.size(); ++i) {
    if (live->ranks[i] == rank && !caller.empty() && live->workers[i] == caller) {
      return absl::OkStatus();
    }
  }
  return absl::PermissionDeniedError(
      absl::StrCat("a report on job ", job_id, " attempt ", attempt, " rank ", rank,
                   " comes only from the worker placed on that rank; the caller (", caller,
                   ") is not"));
}

}  // namespace pp::coordinator
