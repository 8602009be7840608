// The retention of ended jobs (retention.h): the flag's form, and JobManager's side of the expiry,
// which the committer (committer.h) runs on its thread: it asks for the expired jobs, deletes their
// rows and hands the outcomes back (the threading contract is in jobs.h).
#include "coordinator/retention.h"

#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "coordinator/job_logic.h"
#include "coordinator/jobs.h"
#include "coordinator/log.h"

namespace pp::coordinator {
namespace {

constexpr absl::Duration kDay = absl::Hours(24);
// Rows one expiry round deletes: a round holds store_mu_ (and so SubmitJob) for a few ms per row,
// so a backlog (a first start with a shorter --retain_jobs) goes over several rounds.
constexpr size_t kMaxExpiredPerRound = 256;

}  // namespace

absl::StatusOr<absl::Duration> ParseRetention(absl::string_view text) {
  absl::Duration retain;
  absl::string_view days = text;
  bool parsed;
  if (absl::ConsumeSuffix(&days, "d")) {
    int64_t count = 0;
    parsed = absl::SimpleAtoi(days, &count);
    retain = kDay * count;  // saturates to infinity, refused below
  } else {
    parsed = absl::ParseDuration(text, &retain);
  }
  if (!parsed || retain < absl::ZeroDuration() || retain == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--retain_jobs: \"", text,
        "\" is not a retention: whole days (30d), a duration (12h, 90m, 2s) or 0 (keep ended "
        "jobs forever)"));
  }
  return retain;
}

std::string FormatRetention(absl::Duration retain) {
  if (retain == absl::ZeroDuration()) return "0";
  absl::Duration rest;
  const int64_t days = absl::IDivDuration(retain, kDay, &rest);
  return rest == absl::ZeroDuration() ? absl::StrCat(days, "d") : absl::FormatDuration(retain);
}

bool Expired(const pp::v1::Job& job, double now_unix, absl::Duration retain) {
  return retain > absl::ZeroDuration() && IsTerminal(job.state()) &&
         now_unix - job.updated_unix() >= absl::ToDoubleSeconds(retain);
}

std::vector<Expiring> JobManager::ExpiredJobs() {
  const double now = NowUnix();
  std::vector<Expiring> expiring;
  for (const auto& [id, rec] : jobs_) {
    if (expiring.size() >= kMaxExpiredPerRound) break;
    // Its last row and checkpoint are written first: nothing writes them after the delete.
    if (rec.commits_in_flight > 0 || committer_.IsDirty(id) ||
        !Expired(rec.job(), now, options_.retain_jobs)) {
      continue;
    }
    expiring.push_back({.job_id = id, .attempt = rec.job().attempt()});
  }
  return expiring;
}

void JobManager::DropExpired(const std::vector<Expiring>& expiring,
                             const std::vector<absl::Status>& deleted) {
  std::set<std::string> gone;
  for (size_t i = 0; i < expiring.size(); ++i) {
    if (ForgetExpired(expiring[i], deleted[i])) gone.insert(expiring[i].job_id);
  }
  queue_.Erase(gone);
  UpdateGauges();
}

bool JobManager::ForgetExpired(const Expiring& expiring, const absl::Status& deleted) {
  const std::string& id = expiring.job_id;
  JobRecord* rec = FindLocked(id);
  if (rec == nullptr) return false;
  if (!deleted.ok()) {
    Log(absl::StrCat("job ", id, " not expired: the job store did not delete its row (",
                     deleted.message(), "); trying again in ", absl::FormatDuration(kExpiryScan)));
    return false;
  }
  if (!IsTerminal(rec->job().state()) || rec->job().attempt() != expiring.attempt) {
    Persist(*rec);  // resumed while its row was deleted: written again before anything waits on it
    return false;
  }
  Log(absl::StrCat("job ", id, " expired: ", pp::v1::JobState_Name(rec->job().state()),
                   " and unchanged for --retain_jobs=", FormatRetention(options_.retain_jobs),
                   "; its row is deleted, its checkpoints stay in ",
                   (std::filesystem::path(checkpoint_root()) / id).string()));
  events_.Erase(id);
  metrics_->JobExpired(id);
  committer_.Forget(id);
  jobs_.erase(id);
  return true;
}

}  // namespace pp::coordinator
