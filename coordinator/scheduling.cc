#include "coordinator/scheduling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"

namespace pp::coordinator {
namespace {

// pp.v1.Preemption.max_per_hour's meaning of 0. Policy fills it in already; a caller that passes
// the proto as written must not get "never preempt" from an unset field.
constexpr int kDefaultMaxPreemptionsPerHour = 4;
constexpr double kHourSeconds = 3600;

int MaxPreemptionsPerHour(const pp::v1::Preemption& preemption) {
  return preemption.max_per_hour() > 0 ? preemption.max_per_hour() : kDefaultMaxPreemptionsPerHour;
}

int PreemptionsInLastHour(const SchedJob& job, double now_unix) {
  // Times after now (a clock step back) count too: the bound protects the job, so err its way.
  return static_cast<int>(
      std::count_if(job.preempted_unix.begin(), job.preempted_unix.end(),
                    [now_unix](double t) { return t >= now_unix - kHourSeconds; }));
}

// Seconds of training a victim redoes after a preemption now: its steps since its newest
// checkpoint. Unmeasured step times count as nothing lost; they cannot be compared otherwise.
double WorkLost(const SchedJob& job) {
  return std::max(0, job.step - job.last_checkpoint_step) * job.step_seconds;
}

bool MayBeVictim(const SchedJob& job, const SchedJob& waiting, bool waiting_within_quota,
                 int max_per_hour, double now_unix) {
  if (job.state != pp::v1::RUNNING || job.id == waiting.id) return false;
  if (!job.preemptible || job.stopping || job.workers <= 0) return false;
  // In its last step it frees its workers as soon as a drain would: stopping it gains nothing.
  if (job.total_steps > 0 && job.step + 1 >= job.total_steps) return false;
  if (PreemptionsInLastHour(job, now_unix) >= max_per_hour) return false;
  // Class values alone: with aging, a job that waited long enough would preempt the job that
  // preempted it, and the two would take turns losing work.
  return job.priority < waiting.priority || (job.borrowing && waiting_within_quota);
}

// Victim order: what a preemption costs least first.
bool CheaperVictim(const SchedJob* a, const SchedJob* b) {
  const double lost_a = WorkLost(*a);
  const double lost_b = WorkLost(*b);
  // Later start and newer submission first: reversed operands, hence b before a below.
  return std::tie(a->priority, lost_a, b->started_unix, b->order, a->id) <
         std::tie(b->priority, lost_b, a->started_unix, a->order, b->id);
}

// A running job's workers come back after its remaining steps; when it has no measured step time
// it is absent from the replay, and whatever needs its workers stays unknown.
struct Release {
  double at = 0;
  int workers = 0;
};

std::vector<Release> KnownReleases(const std::vector<SchedJob>& jobs) {
  std::vector<Release> releases;
  for (const SchedJob& job : jobs) {
    if (job.state != pp::v1::RUNNING || job.step_seconds <= 0 || job.workers <= 0) continue;
    releases.push_back({std::max(0, job.total_steps - job.step) * job.step_seconds, job.workers});
  }
  std::sort(releases.begin(), releases.end(), [](const Release& a, const Release& b) {
    return std::tie(a.at, a.workers) < std::tie(b.at, b.workers);
  });
  return releases;
}

// The QUEUED jobs named by `ordered`, in its order, each once.
std::vector<const SchedJob*> QueuedInOrder(const std::vector<std::string>& ordered,
                                           const std::vector<SchedJob>& jobs) {
  std::map<std::string, const SchedJob*> by_id;
  for (const SchedJob& job : jobs) by_id.emplace(job.id, &job);
  std::vector<const SchedJob*> queued;
  std::set<std::string> seen;
  for (const std::string& id : ordered) {
    auto it = by_id.find(id);
    if (it == by_id.end() || it->second->state != pp::v1::QUEUED) continue;
    if (seen.insert(id).second) queued.push_back(it->second);
  }
  return queued;
}

// Starts, at `now`, each pending job that fits the `available` workers, in order: the queue
// backfills, so one that does not fit does not hold back those behind it.
void StartFitting(double now, int& available, std::vector<const SchedJob*>& pending,
                  std::map<std::string, double>& starts) {
  std::erase_if(pending, [&](const SchedJob* job) {
    if (job->workers > available) return false;
    available -= std::max(0, job->workers);
    starts[job->id] = now;
    return true;
  });
}

}  // namespace

int EffectivePriority(const SchedJob& job, const pp::v1::Aging& aging, double now_unix) {
  if (job.state != pp::v1::QUEUED || aging.every_seconds() <= 0 || aging.step() <= 0 ||
      aging.max_boost() <= 0) {
    return job.priority;
  }
  const double periods = std::floor((now_unix - job.queued_unix) / aging.every_seconds());
  if (periods <= 0) return job.priority;
  // In doubles first: a job queued for years must not overflow the boost before the cap.
  const double boost = std::min(periods * aging.step(), static_cast<double>(aging.max_boost()));
  return job.priority + static_cast<int>(boost);
}

std::map<std::string, double> OwnerUsage(const std::vector<SchedJob>& jobs, double now_unix) {
  // Ended jobs count too (their worker_seconds): an owner whose jobs finished used the cluster
  // all the same, and fair share would forget it the moment they ended.
  std::map<std::string, double> usage;
  for (const SchedJob& job : jobs) {
    double& used = usage[job.owner];
    used += job.worker_seconds;
    if (job.state == pp::v1::RUNNING) {
      used += job.workers * std::max(0.0, now_unix - job.started_unix);
    }
  }
  return usage;
}

std::map<std::string, int> OwnerWorkers(const std::vector<SchedJob>& jobs) {
  std::map<std::string, int> workers;
  for (const SchedJob& job : jobs) {
    if (job.state == pp::v1::RUNNING) workers[job.owner] += job.workers;
  }
  return workers;
}

std::vector<std::string> OrderQueued(const std::vector<SchedJob>& jobs, const pp::v1::Aging& aging,
                                     double now_unix) {
  const std::map<std::string, double> usage = OwnerUsage(jobs, now_unix);
  struct Key {
    int priority;
    double usage;
    const SchedJob* job;
  };
  std::vector<Key> keys;
  for (const SchedJob& job : jobs) {
    if (job.state != pp::v1::QUEUED) continue;
    keys.push_back({EffectivePriority(job, aging, now_unix), usage.at(job.owner), &job});
  }
  std::sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) {
    // Highest priority first (b's before a's), then least used owner, then oldest; the id only
    // keeps the order total should a caller repeat an order.
    return std::tie(b.priority, a.usage, a.job->order, a.job->id) <
           std::tie(a.priority, b.usage, b.job->order, b.job->id);
  });
  std::vector<std::string> ids;
  ids.reserve(keys.size());
  for (const Key& key : keys) ids.push_back(key.job->id);
  return ids;
}

QuotaVerdict CheckQuota(const SchedJob& job, int owner_workers, const pp::v1::Quota* quota) {
  QuotaVerdict verdict;
  if (quota == nullptr || quota->max_workers() <= 0) return verdict;
  // In 64 bits: both figures come from outside and their sum must not wrap.
  if (static_cast<int64_t>(owner_workers) + job.workers <= quota->max_workers()) return verdict;
  verdict.within = false;
  verdict.may_borrow = quota->borrow();
  verdict.reason = absl::StrCat("owner ", job.owner, " uses ", owner_workers, " of ",
                                quota->max_workers(), " workers; the job needs ", job.workers);
  return verdict;
}

std::vector<std::string> ChooseVictims(const SchedJob& waiting, bool waiting_within_quota,
                                       int missing, const std::vector<SchedJob>& jobs,
                                       const pp::v1::Preemption& preemption, double now_unix) {
  if (missing <= 0 || preemption.disabled()) return {};
  const int max_per_hour = MaxPreemptionsPerHour(preemption);
  std::vector<const SchedJob*> candidates;
  for (const SchedJob& job : jobs) {
    if (MayBeVictim(job, waiting, waiting_within_quota, max_per_hour, now_unix)) {
      candidates.push_back(&job);
    }
  }
  std::sort(candidates.begin(), candidates.end(), CheaperVictim);
  std::vector<std::string> victims;
  int64_t freed = 0;
  for (const SchedJob* job : candidates) {
    victims.push_back(job->id);
    freed += job->workers;
    if (freed >= missing) return victims;
  }
  return {};  // not enough to start `waiting`: stopping some would only lose their work
}

std::map<std::string, double> EstimateStarts(const std::vector<std::string>& ordered,
                                             const std::vector<SchedJob>& jobs, int idle_workers) {
  const std::vector<Release> releases = KnownReleases(jobs);
  std::vector<const SchedJob*> pending = QueuedInOrder(ordered, jobs);
  std::map<std::string, double> starts;
  int available = std::max(0, idle_workers);
  double now = 0;
  size_t next = 0;
  // Event by event: at each release, the jobs in order take what fits, as PlaceQueued would.
  while (true) {
    while (next < releases.size() && releases[next].at <= now) {
      available += releases[next++].workers;
    }
    StartFitting(now, available, pending, starts);
    if (pending.empty() || next == releases.size()) break;
    now = releases[next].at;
  }
  return starts;
}

}  // namespace pp::coordinator
