#include "bench/chaos/chaos_run.h"

#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/chaos/jobs.h"
#include "bench/chaos/sandbox.h"
#include "common/checkpoint.h"
#include "tests/support/cluster.h"

namespace pp::chaos {
namespace {

namespace fs = std::filesystem;
using testing_support::Cluster;

constexpr char kKillWorker[] = "kill -9 worker";
constexpr char kStopWorker[] = "SIGSTOP/SIGCONT worker";
constexpr char kKillCoordinator[] = "kill -9 ppcoord";
constexpr char kStopCoordinator[] = "SIGSTOP/SIGCONT ppcoord";
constexpr char kKillWorkerMidCheckpoint[] = "kill -9 worker mid-checkpoint";
constexpr char kKillCoordinatorMidCheckpoint[] = "kill -9 ppcoord mid-checkpoint";
constexpr char kFullDisk[] = "full checkpoint disk";
constexpr char kSqliteLock[] = "SQLite lock held";

// Whether `kind` is one of the kinds `only` names (ChaosOptions::only).
bool Selected(const std::string& kind, const std::string& only) {
  if (only.empty()) return true;
  for (absl::string_view word : absl::StrSplit(only, ',', absl::SkipEmpty())) {
    if (absl::StrContains(absl::AsciiStrToLower(kind), absl::AsciiStrToLower(word))) return true;
  }
  return false;
}

bool Ended(pp::v1::JobState state) {
  return state == pp::v1::SUCCEEDED || state == pp::v1::FAILED || state == pp::v1::CANCELLED;
}

class ChaosRun {
 public:
  explicit ChaosRun(const ChaosOptions& options) : options_(options), rng_(options.seed) {}

  Report Run();

 private:
  absl::Status Start();
  void InjectFaults();
  bool Inject(const std::string& kind);
  void WaitForJobs();
  void CheckWeights();

  // The coordinator's view of a job; also samples ppcoord's peak RSS and times the call.
  absl::StatusOr<pp::v1::Job> Get(const std::string& job_id);
  std::vector<std::string> RunningJobs();
  // A worker holding a rank of a running job, else any.
  std::string PickWorker();
  // A running job with a checkpoint being written (shards present, no manifest yet), polled
  // for up to 10 s: the worker that has not written its shard yet is mid-write.
  std::string FindCheckpointInFlight();
  void KillWorker(const std::string& name);
  void KillCoordinator();
  void Pause(testing_support::Process& process, absl::Duration duration);
  absl::Duration Uniform(double lo_seconds, double hi_seconds);
  void SampleRss();

  ChaosOptions options_;
  std::mt19937_64 rng_;
  std::unique_ptr<Cluster> cluster_;
  std::vector<std::pair<std::string, pp::v1::JobSpec>> jobs_;
  RpcStats stats_;
  Report report_;
};

absl::Duration ChaosRun::Uniform(double lo_seconds, double hi_seconds) {
  return absl::Seconds(std::uniform_real_distribution<double>(lo_seconds, hi_seconds)(rng_));
}

void ChaosRun::SampleRss() {
  report_.coordinator_peak_rss_kib =
      std::max(report_.coordinator_peak_rss_kib, PeakRssKiB(cluster_->coordinator_process().pid()));
}

absl::StatusOr<pp::v1::Job> ChaosRun::Get(const std::string& job_id) {
  SampleRss();
  const absl::Time start = absl::Now();
  absl::StatusOr<pp::v1::Job> job = testing_support::GetJob(cluster_->stub(), job_id);
  stats_.Record("GetJob", grpc::Status(static_cast<grpc::StatusCode>(job.status().code()), ""),
                absl::ToDoubleSeconds(absl::Now() - start));
  return job;
}

absl::Status ChaosRun::Start() {
  testing_support::ClusterOptions cluster;
  cluster.bin_dir = options_.bin_dir;
  cluster.dir = options_.dir + "/cluster";
  cluster.coordinator_flags = {"--worker_timeout=2s", "--heartbeat_interval=200ms"};
  cluster.worker_flags = {"--comm_timeout=10s", "--drain_timeout=30s"};
  if (options_.tmpfs_ok) {
    // Before ppcoord opens its data folder, so that checkpoints/ is the small disk.
    absl::Status mounted =
        MountTmpfs(cluster.dir + "/data/checkpoints", options_.tmpfs_bytes);
    if (!mounted.ok()) {
      options_.tmpfs_ok = false;
      options_.tmpfs_note = std::string(mounted.message());
    }
  }
  absl::StatusOr<std::unique_ptr<Cluster>> started = Cluster::Start(cluster);
  if (!started.ok()) return started.status();
  cluster_ = *std::move(started);
  for (int i = 0; i < options_.workers; ++i) {
    // Each worker pauses 1 s before writing its shard of a different step: the window a
    // mid-checkpoint kill needs, found at several points of a run.
    testing_support::WorkerOptions worker;
    worker.env["PP_TEST_SHARD_WRITE_PAUSE"] =
        absl::StrCat(options_.checkpoint_every * (i + 1), ":1");
    if (absl::Status s = cluster_->StartWorker(absl::StrCat("w", i), worker); !s.ok()) return s;
  }
  const std::string corpus = options_.dir + "/corpus.txt";
  WriteCorpus(corpus, 50000);
  for (int k = 0; k < options_.jobs; ++k) {
    pp::v1::JobSpec spec = TrainSpec(corpus, 5 + k, options_.steps, options_.checkpoint_every);
    absl::StatusOr<std::string> id = testing_support::SubmitJob(cluster_->stub(), spec);
    if (!id.ok()) return id.status();
    jobs_.emplace_back(*id, spec);
  }
  return absl::OkStatus();
}

std::vector<std::string> ChaosRun::RunningJobs() {
  std::vector<std::string> running;
  for (const auto& [id, spec] : jobs_) {
    absl::StatusOr<pp::v1::Job> job = Get(id);
    if (job.ok() && job->state() == pp::v1::RUNNING) running.push_back(id);
  }
  return running;
}

std::string ChaosRun::PickWorker() {
  std::vector<std::string> candidates;
  for (const std::string& id : RunningJobs()) {
    absl::StatusOr<pp::v1::Job> job = Get(id);
    if (!job.ok()) continue;
    for (const pp::v1::RankPlacement& p : job->placement()) candidates.push_back(p.worker());
  }
  if (candidates.empty()) candidates = cluster_->worker_names();
  return candidates[std::uniform_int_distribution<size_t>(0, candidates.size() - 1)(rng_)];
}

int CountShards(const fs::path& step_dir) {
  int shards = 0;
  std::error_code ec;
  for (fs::directory_iterator it(step_dir, ec), end; !ec && it != end; it.increment(ec)) {
    shards += it->path().extension() == ".safetensors";
  }
  return shards;
}

// A step folder of `job_dir` that has some shards and no manifest: a checkpoint being written.
bool HasCheckpointInFlight(const fs::path& job_dir) {
  std::error_code ec;
  for (fs::directory_iterator it(job_dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_directory(ec) || it->path().filename().string().rfind("step-", 0) != 0) continue;
    if (!fs::exists(it->path() / common::kManifestFile, ec) && CountShards(it->path()) > 0) {
      return true;
    }
  }
  return false;
}

std::string ChaosRun::FindCheckpointInFlight() {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    for (const auto& [id, spec] : jobs_) {
      if (HasCheckpointInFlight(fs::path(cluster_->checkpoint_root()) / id)) return id;
    }
    absl::SleepFor(absl::Milliseconds(2));
  }
  return "";
}

void ChaosRun::KillWorker(const std::string& name) {
  cluster_->worker(name).Signal(SIGKILL);
  (void)cluster_->worker(name).Wait(absl::Seconds(10));
  absl::SleepFor(Uniform(0.2, 1.5));
  // The same name again, as a supervisor would restart it; without its shard pause, which
  // the killed instance took with it.
  if (absl::Status s = cluster_->LaunchWorker(name); !s.ok()) {
    std::cerr << "chaos: restarting " << name << ": " << s << "\n";
  }
}

void ChaosRun::KillCoordinator() {
  SampleRss();
  cluster_->KillCoordinator();
  absl::SleepFor(Uniform(0.2, 1.0));
  if (absl::Status s = cluster_->RestartCoordinator(); !s.ok()) {
    std::cerr << "chaos: restarting ppcoord: " << s << "\n";
  }
}

void ChaosRun::Pause(testing_support::Process& process, absl::Duration duration) {
  process.Signal(SIGSTOP);
  absl::SleepFor(duration);
  process.Signal(SIGCONT);
}

// One fault of `kind`; false when it could not be injected now (no checkpoint in flight).
bool ChaosRun::Inject(const std::string& kind) {
  if (kind == kKillWorker) {
    KillWorker(PickWorker());
  } else if (kind == kStopWorker) {
    // Up to 3.5 s: past --worker_timeout=2s the worker is DOWN when it wakes.
    Pause(cluster_->worker(PickWorker()), Uniform(0.3, 3.5));
  } else if (kind == kKillCoordinator) {
    KillCoordinator();
  } else if (kind == kStopCoordinator) {
    Pause(cluster_->coordinator_process(), Uniform(0.3, 1.5));
  } else if (kind == kKillWorkerMidCheckpoint || kind == kKillCoordinatorMidCheckpoint) {
    const std::string job_id = FindCheckpointInFlight();
    if (job_id.empty()) return false;
    if (kind == kKillCoordinatorMidCheckpoint) {
      KillCoordinator();
      return true;
    }
    absl::StatusOr<pp::v1::Job> job = Get(job_id);
    if (!job.ok() || job->placement().empty()) return false;
    KillWorker(job->placement(std::uniform_int_distribution<int>(
                                  0, job->placement_size() - 1)(rng_)).worker());
  } else if (kind == kFullDisk) {
    absl::StatusOr<int64_t> filled = FillDisk(cluster_->checkpoint_root());
    absl::SleepFor(Uniform(1.0, 3.0));
    FreeDisk(cluster_->checkpoint_root());
    if (!filled.ok()) std::cerr << "chaos: " << filled.status() << "\n";
    return filled.ok();
  } else if (kind == kSqliteLock) {
    absl::Status held =
        HoldSqliteLock(cluster_->data_dir() + "/ppcoord.db", Uniform(1.0, 3.0));
    if (!held.ok()) std::cerr << "chaos: " << held << "\n";
    return held.ok();
  }
  return true;
}

// Every kind once in a seeded order, then kinds at random, until fault_time passes or no job
// is left running.
void ChaosRun::InjectFaults() {
  std::vector<std::string> kinds = {kKillWorker,      kStopWorker,
                                    kKillCoordinator, kStopCoordinator,
                                    kKillWorkerMidCheckpoint, kKillCoordinatorMidCheckpoint,
                                    kSqliteLock};
  if (options_.tmpfs_ok) {
    kinds.push_back(kFullDisk);
  } else {
    report_.fault_notes[kFullDisk] = options_.tmpfs_note;
  }
  kinds.erase(std::remove_if(kinds.begin(), kinds.end(),
                             [&](const std::string& k) { return !Selected(k, options_.only); }),
              kinds.end());
  for (const std::string& kind : kinds) report_.faults[kind] = 0;
  if (!options_.tmpfs_ok && Selected(kFullDisk, options_.only)) report_.faults[kFullDisk] = -1;
  if (kinds.empty()) return;
  std::vector<std::string> order = kinds;
  std::shuffle(order.begin(), order.end(), rng_);
  const absl::Time end = absl::Now() + options_.fault_time;
  for (size_t n = 0; absl::Now() < end;) {
    absl::SleepFor(Uniform(0.5 * absl::ToDoubleSeconds(options_.mean_gap),
                           1.5 * absl::ToDoubleSeconds(options_.mean_gap)));
    if (RunningJobs().empty() && n > 0) {
      bool all_ended = true;
      for (const auto& [id, spec] : jobs_) {
        absl::StatusOr<pp::v1::Job> job = Get(id);
        all_ended = all_ended && job.ok() && Ended(job->state());
      }
      if (all_ended) break;
      continue;  // queued behind a restart: nothing to hit yet
    }
    const std::string kind =
        n < order.size() ? order[n]
                         : kinds[std::uniform_int_distribution<size_t>(0, kinds.size() - 1)(rng_)];
    ++n;
    std::cout << "chaos: t=" << absl::FormatDuration(options_.fault_time - (end - absl::Now()))
              << " " << kind << std::endl;
    if (Inject(kind)) ++report_.faults[kind];
  }
}

void ChaosRun::WaitForJobs() {
  const absl::Time deadline = absl::Now() + options_.job_timeout;
  for (const auto& [id, spec] : jobs_) {
    pp::v1::Job last;
    while (absl::Now() < deadline) {
      absl::StatusOr<pp::v1::Job> job = Get(id);
      if (job.ok()) last = *job;
      if (job.ok() && Ended(job->state())) break;
      absl::SleepFor(absl::Milliseconds(100));
    }
    JobOutcome outcome;
    outcome.job_id = id;
    outcome.state = pp::v1::JobState_Name(last.state());
    outcome.restarts = last.restart_log_size();
    if (!Ended(last.state())) outcome.state += " (timed out)";
    if (last.state() != pp::v1::SUCCEEDED) {
      outcome.detail = absl::StrCat("step ", last.step(), ", restarts ", last.restarts(), ": ",
                                    last.reason());
    }
    report_.jobs.push_back(outcome);
  }
}

void ChaosRun::CheckWeights() {
  for (size_t k = 0; k < jobs_.size(); ++k) {
    JobOutcome& outcome = report_.jobs[k];
    if (outcome.state != "SUCCEEDED") continue;
    outcome.bitwise = FinalWeightsBitwise(cluster_->checkpoint_root(), jobs_[k].first,
                                          jobs_[k].second, &outcome.detail);
  }
}

Report ChaosRun::Run() {
  const absl::Time start = absl::Now();
  report_.title = absl::StrCat("chaos run: seed ", options_.seed, ", ", options_.workers,
                               " workers, ", options_.jobs, " jobs of ", options_.steps, " steps");
  report_.expected_codes = {grpc::UNAVAILABLE};
  if (absl::Status started = Start(); !started.ok()) {
    report_.jobs.push_back({"(start)", "not started", 0, false, started.ToString()});
    cluster_.reset();
    if (options_.tmpfs_ok) Unmount(options_.dir + "/cluster/data/checkpoints");
    return report_;
  }
  InjectFaults();
  WaitForJobs();
  SampleRss();
  CheckWeights();
  report_.rpc_errors = stats_.errors();
  report_.rpc_seconds = stats_.latencies();
  report_.wall_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  const bool failed = report_.JobsCompleted() != static_cast<int>(jobs_.size());
  if (failed) std::cerr << cluster_->Logs();
  const std::string root = cluster_->checkpoint_root();
  cluster_.reset();
  if (options_.tmpfs_ok) Unmount(root);
  return report_;
}

}  // namespace

Report RunChaos(const ChaosOptions& options) { return ChaosRun(options).Run(); }

}  // namespace pp::chaos
