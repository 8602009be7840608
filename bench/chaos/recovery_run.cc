#include "bench/chaos/recovery_run.h"

#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>
#include <random>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "bench/chaos/job_events.h"
#include "bench/chaos/jobs.h"
#include "bench/chaos/recovery_figures.h"
#include "tests/support/cluster.h"
#include "tests/support/process.h"

namespace pp::chaos {
namespace {

using testing_support::Cluster;
using Events = std::vector<pp::v1::JobEvent>;

constexpr absl::Duration kPoll = absl::Milliseconds(20);
constexpr absl::Duration kIdleTimeout = absl::Seconds(20);  // a restarted worker registers

bool Ended(const pp::v1::Job& job) {
  return job.state() == pp::v1::SUCCEEDED || job.state() == pp::v1::FAILED ||
         job.state() == pp::v1::CANCELLED;
}

bool EndedEvents(const Events& events) { return !events.empty() && FinalEvent(events.back()); }

// The job's last completed step as its STEP events say; 0 before the first.
int LastStep(const Events& events) {
  for (auto it = events.rbegin(); it != events.rend(); ++it) {
    if (it->kind() == pp::v1::EVENT_STEP) return it->step();
  }
  return 0;
}

// The last step the job's current placement completed; -1 while it completed none (a kill then
// would hit its start-up: the rendezvous, loading the checkpoint).
int AttemptStep(const Events& events) {
  for (auto it = events.rbegin(); it != events.rend(); ++it) {
    if (it->kind() == pp::v1::EVENT_STEP) return it->step();
    if (it->kind() == pp::v1::EVENT_PLACED || it->kind() == pp::v1::EVENT_RESIZED) return -1;
  }
  return -1;
}

std::string Secs(absl::Duration d) { return absl::StrFormat("%.0f s", absl::ToDoubleSeconds(d)); }

std::string Describe(const absl::StatusOr<pp::v1::Job>& job) {
  if (!job.ok()) return job.status().ToString();
  return absl::StrCat(pp::v1::JobState_Name(job->state()), " at step ", job->step(),
                      job->state() == pp::v1::RUNNING
                          ? absl::StrCat(" on ", job->placement_size(), " workers")
                          : "",
                      job->reason().empty() ? "" : ": ", job->reason());
}

// "model name" of /proc/cpuinfo (the first), and the cores this process may use.
std::string CpuModel() {
  std::string model = "unknown CPU";
  for (absl::string_view line : absl::StrSplit(testing_support::ReadFile("/proc/cpuinfo"), '\n')) {
    if (!absl::ConsumePrefix(&line, "model name")) continue;
    const size_t colon = line.find(':');
    if (colon != absl::string_view::npos) {
      model = std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
    }
    break;
  }
  return absl::StrCat(model, ", ", std::thread::hardware_concurrency(), " cores");
}

// One kill at a seeded random step of each window [i N + 1, (i + 1) N] that ends before the
// last step (never step 1: a checkpoint exists before the first kill).
std::vector<int> KillSteps(const RecoveryOptions& o, std::mt19937_64& rng) {
  std::vector<int> steps;
  for (int i = 0; i < o.kills && (i + 1) * o.kill_every < o.steps; ++i) {
    const int lo = std::max(2, i * o.kill_every + 1);
    const int hi = std::max(lo, (i + 1) * o.kill_every);
    steps.push_back(std::uniform_int_distribution<int>(lo, hi)(rng));
  }
  return steps;
}

class ModeRun {
 public:
  ModeRun(const RecoveryOptions& options, const std::string& mode, std::string corpus)
      : options_(options),
        elastic_(mode == "elastic"),
        rng_(options.seed),
        corpus_(std::move(corpus)) {
    result_.mode = mode;
  }

  ModeResult Run();

 private:
  absl::Status Start();
  pp::v1::JobSpec Spec() const;
  void Train(JobResult* job, const std::vector<int>& kill_steps);
  bool WaitForStep(JobEvents& events, int step);
  // false when the job did not recover (then the killed worker is started again anyway).
  bool Kill(JobEvents& events, KillSample* sample);
  void Refill(const std::string& worker, KillSample* sample);
  bool WaitIdle(const std::string& worker);
  void End(JobEvents& events, double submitted_unix, JobResult* job);
  void CheckWeights(JobResult* job);
  void Problem(const std::string& line) { result_.problems.push_back(line); }

  RecoveryOptions options_;
  bool elastic_;
  std::mt19937_64 rng_;
  std::string corpus_;
  std::unique_ptr<Cluster> cluster_;
  std::string job_id_;     // the job being trained
  int min_kill_step_ = 0;  // elastic: a step past the grown placement's start
  ModeResult result_;
};

absl::Status ModeRun::Start() {
  testing_support::ClusterOptions cluster;
  cluster.bin_dir = options_.bin_dir;
  cluster.dir = absl::StrCat(options_.dir, "/", result_.mode);
  cluster.coordinator_flags = {"--worker_timeout=2s", "--heartbeat_interval=200ms"};
  cluster.worker_flags = {"--comm_timeout=10s", "--drain_timeout=30s"};
  absl::StatusOr<std::unique_ptr<Cluster>> started = Cluster::Start(cluster);
  if (!started.ok()) return started.status();
  cluster_ = *std::move(started);
  return cluster_->AddWorkers(options_.workers + (elastic_ ? 0 : 1));
}

pp::v1::JobSpec ModeRun::Spec() const {
  pp::v1::JobSpec spec = TrainSpec(corpus_, /*seed=*/5, options_.steps, /*checkpoint_every=*/1);
  spec.set_name("recovery");
  spec.mutable_parallel()->set_pipeline(options_.workers);
  if (elastic_) {
    pp::v1::ElasticSpec* elastic = spec.mutable_elastic();
    elastic->set_min_workers(options_.min_workers);
    elastic->set_max_workers(options_.workers);
    elastic->set_grace_seconds(options_.grace_seconds);
    elastic->set_grow_after_seconds(options_.grow_after_seconds);
  }
  return spec;
}

void ModeRun::Train(JobResult* job, const std::vector<int>& kill_steps) {
  const double submitted_unix = NowUnix();
  absl::StatusOr<std::string> id = testing_support::SubmitJob(cluster_->stub(), Spec());
  if (!id.ok()) {
    job->detail = id.status().ToString();
    Problem(absl::StrCat(result_.mode, ": SubmitJob refused: ", job->detail));
    return;
  }
  job->id = job_id_ = *id;
  const absl::Duration bound =
      options_.job_timeout + options_.recovery_timeout * static_cast<int>(kill_steps.size() + 1);
  absl::StatusOr<std::unique_ptr<JobEvents>> events =
      JobEvents::Open(cluster_->stub(), job_id_, bound);
  if (!events.ok()) {
    job->detail = events.status().ToString();
    Problem(absl::StrCat(result_.mode, ": ", job->detail));
    return;
  }
  min_kill_step_ = 0;
  for (int step : kill_steps) {
    if (!WaitForStep(**events, std::max(step, min_kill_step_))) break;
    result_.kills.emplace_back();
    if (!Kill(**events, &result_.kills.back())) break;
  }
  End(**events, submitted_unix, job);
  CheckWeights(job);
}

// Whether the job reached `step` (a kill is due), its current placement completed a step, and it
// still runs.
bool ModeRun::WaitForStep(JobEvents& events, int step) {
  const bool reached =
      events.WaitUntil([&](const Events& e) { return EndedEvents(e) || AttemptStep(e) >= step; },
                       options_.job_timeout);
  if (!reached) {
    Problem(absl::StrCat(result_.mode, ": job did not reach step ", step, " within ",
                         Secs(options_.job_timeout), ": ",
                         Describe(testing_support::GetJob(cluster_->stub(), job_id_))));
  }
  return reached && !EndedEvents(events.events());
}

bool ModeRun::Kill(JobEvents& events, KillSample* sample) {
  const absl::StatusOr<pp::v1::Job> job = testing_support::GetJob(cluster_->stub(), job_id_);
  if (!job.ok() || job->placement().empty()) {
    Problem(absl::StrCat(result_.mode, ": no worker to kill: ", Describe(job)));
    return false;
  }
  sample->step = LastStep(events.events());
  sample->worker =
      job->placement(std::uniform_int_distribution<int>(0, job->placement_size() - 1)(rng_))
          .worker();
  testing_support::Process& process = cluster_->worker(sample->worker);
  const double kill_unix = NowUnix();
  process.Signal(SIGKILL);
  (void)process.Wait(absl::Seconds(10));
  events.WaitUntil(
      [&](const Events& e) {
        KillSample read;
        ReadKill(e, kill_unix, &read);
        return read.committed >= 0 || EndedEvents(e);
      },
      options_.recovery_timeout);
  ReadKill(events.events(), kill_unix, sample);
  if (sample->committed < 0) {
    Problem(absl::StrCat(result_.mode, ": job did not recover within ",
                         Secs(options_.recovery_timeout), " of kill ", result_.kills.size(), " (",
                         sample->worker, " at step ", sample->step, "); now ",
                         Describe(testing_support::GetJob(cluster_->stub(), job_id_))));
    if (absl::Status s = cluster_->LaunchWorker(sample->worker); !s.ok()) {
      Problem(absl::StrCat(result_.mode, ": restarting ", sample->worker, ": ", s.ToString()));
    }
    return false;
  }
  if (absl::StatusOr<pp::v1::Job> now = testing_support::GetJob(cluster_->stub(), job_id_);
      now.ok()) {
    sample->placed_workers = now->placement_size();
  }
  Refill(sample->worker, sample);
  return true;
}

// The killed worker's process again. Spare: it registers IDLE (the spare pool refilled).
// Elastic: the job grows back onto it.
void ModeRun::Refill(const std::string& worker, KillSample* sample) {
  const absl::Time relaunched = absl::Now();
  if (absl::Status s = cluster_->LaunchWorker(worker); !s.ok()) {
    Problem(absl::StrCat(result_.mode, ": restarting ", worker, ": ", s.ToString()));
    return;
  }
  if (!elastic_) {
    if (!WaitIdle(worker)) {
      Problem(absl::StrCat("spare: ", worker, " not IDLE within ", Secs(kIdleTimeout),
                           " of its restart"));
    }
    return;
  }
  const absl::StatusOr<pp::v1::Job> grown = testing_support::WaitForJob(
      cluster_->stub(), job_id_,
      [&](const pp::v1::Job& j) {
        return Ended(j) || (j.state() == pp::v1::RUNNING && j.placement_size() == options_.workers);
      },
      options_.recovery_timeout);
  if (grown.ok() && grown->state() == pp::v1::RUNNING) {
    sample->grown = absl::ToDoubleSeconds(absl::Now() - relaunched);
    // GetJob may show the placement before the events do: the next kill waits for a step of it.
    min_kill_step_ = grown->start_step() + 1;
  } else if (!grown.ok()) {
    Problem(absl::StrCat("elastic: job did not grow back to ", options_.workers, " workers within ",
                         Secs(options_.recovery_timeout), " of ", worker,
                         "'s restart: ", grown.status().message()));
  }
}

bool ModeRun::WaitIdle(const std::string& worker) {
  const absl::Time deadline = absl::Now() + kIdleTimeout;
  while (absl::Now() < deadline) {
    absl::StatusOr<std::vector<pp::v1::WorkerInfo>> workers =
        testing_support::ListWorkers(cluster_->stub());
    if (workers.ok() && std::any_of(workers->begin(), workers->end(), [&](const auto& w) {
          return w.name() == worker && w.state() == pp::v1::IDLE;
        })) {
      return true;
    }
    absl::SleepFor(kPoll);
  }
  return false;
}

void ModeRun::End(JobEvents& events, double submitted_unix, JobResult* job) {
  events.WaitUntil(EndedEvents, options_.job_timeout);
  const Events seen = events.events();
  // ppcoord's own word on the end: the events may have stopped early (the stream's deadline).
  absl::StatusOr<pp::v1::Job> last =
      testing_support::WaitForJob(cluster_->stub(), job_id_, Ended,
                                  EndedEvents(seen) ? absl::Seconds(10) : options_.job_timeout);
  if (last.ok()) {
    job->last = *last;
    job->ended = true;
  } else {
    job->detail = std::string(last.status().message());
    if (absl::StatusOr<pp::v1::Job> now = testing_support::GetJob(cluster_->stub(), job_id_);
        now.ok()) {
      job->last = *now;
    }
    Problem(absl::StrCat(result_.mode, ": job ", job_id_, " did not end: ", job->detail));
  }
  job->seconds = (EndedEvents(seen) ? seen.back().time_unix() : NowUnix()) - submitted_unix;
  if (job->ended && job->last.state() != pp::v1::SUCCEEDED) job->detail = job->last.reason();
}

void ModeRun::CheckWeights(JobResult* job) {
  if (!job->ended || job->last.state() != pp::v1::SUCCEEDED) return;
  // The reference is the same for every mode's job: one process, no elastic bounds.
  pp::v1::JobSpec spec = Spec();
  spec.clear_elastic();
  job->bitwise = FinalWeightsBitwise(cluster_->checkpoint_root(), job->id, spec, &job->detail);
}

ModeResult ModeRun::Run() {
  const absl::Time start = absl::Now();
  const std::vector<int> kill_steps = KillSteps(options_, rng_);
  result_.title = absl::StrCat(
      "recovery run, ", result_.mode, ": a ", options_.workers, "-stage job of ", options_.steps,
      " steps (a checkpoint every step) on ", options_.workers + (elastic_ ? 0 : 1), " workers",
      elastic_ ? absl::StrFormat(", no spare, spec.elastic min_workers %d grace %.1f s grow "
                                 "after %.1f s",
                                 options_.min_workers, options_.grace_seconds,
                                 options_.grow_after_seconds)
               : " (1 spare)",
      "; kills due at steps ", absl::StrJoin(kill_steps, ", "));
  if (absl::Status started = Start(); !started.ok()) {
    Problem(absl::StrCat(result_.mode, ": cluster: ", started.ToString()));
  } else {
    Train(&result_.baseline, {});
    Train(&result_.faulted, kill_steps);
  }
  if (!Passed(result_) && cluster_ != nullptr) std::cerr << cluster_->Logs();
  cluster_.reset();
  result_.wall_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return result_;
}

}  // namespace

bool RunRecovery(const RecoveryOptions& options) {
  RecoveryOptions o = options;
  const std::string corpus = o.dir + "/corpus.txt";
  const int units = TrainSpec(corpus, 5, o.steps, 1).model().n_layers() + 2;
  if (o.workers <= 0) o.workers = units >= 4 ? 4 : 2;
  std::cout << "recovery run: seed " << o.seed << ", CPU " << CpuModel() << ", modes "
            << absl::StrJoin(o.modes, ", ") << std::endl;
  if (o.workers < 2 || o.workers > units || o.kill_every < 1) {
    std::cout << "recovery run: --workers must be 2.." << units
              << " (the model's n_layers + 2) and --kill_every at least 1; got " << o.workers
              << " and " << o.kill_every << "\nresult: FAIL" << std::endl;
    return false;
  }
  std::error_code ec;
  std::filesystem::create_directories(o.dir, ec);
  WriteCorpus(corpus, 50000);
  bool ok = true;
  for (const std::string& mode : o.modes) {
    const ModeResult result = ModeRun(o, mode, corpus).Run();
    std::cout << ModeTable(result, o.kill_every) << std::endl;
    ok = Passed(result) && ok;
  }
  return ok;
}

}  // namespace pp::chaos
