// checkpoint_bench: what a checkpoint costs a training step, synchronous versus asynchronous, and
// the save and load bandwidth of sharded checkpoints.
//
// Runs the real task runner (worker/daemon/task.h: stage models, executor, Gloo over loopback)
// for D=2 ranks in threads of this process, three times: without checkpoints, with a checkpoint
// every --every steps written inline (sync), and the same written by the background writer
// (async). Step period = (time of the last step report - time of the first) / (steps - 1); the
// final checkpoint falls outside it. Cost per checkpoint = (period with - period without) *
// (steps - 1) / checkpoints inside the window.
// Save MB/s: shard bytes / seconds of a rank's write (serialize, sha256, write, fsync, rename),
// as reported. Load MB/s: LoadCheckpoint (manifest, sha256 of every shard, parse) of the last
// step folder after the manifest was committed; verify MB/s: VerifyCheckpoint (sha256 only).
// Each figure is the best of --rounds interleaved rounds (the machines are shared).
#include <chrono>
#include <cstdio>
#include <functional>
#include <utility>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/checkpoint.h"
#include "common/job_spec.h"
#include "coordinator/plan/plan.h"
#include "worker/daemon/task.h"
#include "worker/data/data.h"

ABSL_FLAG(int, steps, 13, "training steps per run");
ABSL_FLAG(int, every, 3, "checkpoint every N steps");
ABSL_FLAG(int, layers, 4, "transformer blocks");
ABSL_FLAG(int, d_model, 256, "model width C");
ABSL_FLAG(int, seq_len, 64, "sequence length T");
ABSL_FLAG(int, batch, 4, "sequences per microbatch B");
ABSL_FLAG(int, microbatches, 4, "microbatches per step M");
ABSL_FLAG(int, rounds, 3, "rounds of the three runs, interleaved; each figure is the best round");
ABSL_FLAG(std::string, dir, "", "scratch folder (default: a fresh one under the temp dir)");

namespace pp {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int kRanks = 2;

struct RunFigures {
  double step_period = 0;       // seconds
  std::vector<pp::v1::CheckpointReport> last_shards;  // of the final step, one per rank
  double write_seconds = 0;     // summed over every shard write of every rank
  int64_t written_bytes = 0;
  int checkpoints_inside = 0;   // checkpoints between the first and the last step report
};

class TimingReporter : public daemon::TaskReporter {
 public:
  pp::v1::ReportResponse ReportStep(const pp::v1::StepReport& report,
                                    const executor::StepResult&) override {
    absl::MutexLock lock(&mu_);
    report_times.push_back(Clock::now());
    return {};
  }
  void ReportCheckpoint(const pp::v1::CheckpointReport& report, double seconds) override {
    absl::MutexLock lock(&mu_);
    if (!report.ok()) std::fprintf(stderr, "checkpoint failed: %s\n", report.error().c_str());
    write_seconds += seconds;
    bytes += report.bytes();
    last = report;
  }
  absl::Mutex mu_;
  pp::v1::CheckpointReport last;
  std::vector<Clock::time_point> report_times;
  double write_seconds = 0;
  int64_t bytes = 0;
};

pp::v1::JobSpec Spec(const fs::path& corpus) {
  pp::v1::JobSpec spec;
  spec.set_name("ckpt-bench");
  pp::v1::ModelSpec* model = spec.mutable_model();
  model->set_vocab_size(256);
  model->set_seq_len(absl::GetFlag(FLAGS_seq_len));
  model->set_d_model(absl::GetFlag(FLAGS_d_model));
  model->set_n_heads(4);
  model->set_n_layers(absl::GetFlag(FLAGS_layers));
  spec.mutable_parallel()->set_pipeline(kRanks);
  spec.mutable_parallel()->set_schedule("1f1b");
  pp::v1::TrainSpec* train = spec.mutable_train();
  train->set_steps(absl::GetFlag(FLAGS_steps));
  train->set_microbatches(absl::GetFlag(FLAGS_microbatches));
  train->set_microbatch_size(absl::GetFlag(FLAGS_batch));
  train->set_lr(1e-3);
  train->set_seed(1);
  spec.mutable_data()->set_path(corpus.string());
  spec.mutable_checkpoint()->set_every_steps(absl::GetFlag(FLAGS_every));
  spec.mutable_checkpoint()->set_keep(100);
  common::ApplyDefaults(&spec);
  return spec;
}

std::vector<pp::v1::TaskPlan> Plans(const pp::v1::JobSpec& spec, const std::string& job,
                                    const std::string& checkpoint_dir) {
  absl::StatusOr<pp::v1::Schedule> schedule = plan::PlanSchedule(
      spec.parallel().schedule(), kRanks, 1, spec.train().microbatches(), pp::v1::CostModel());
  absl::StatusOr<std::vector<int>> units = plan::PartitionUnits(spec.model(), kRanks, "uniform",
                                                                {}, {});
  if (!schedule.ok() || !units.ok()) {
    std::fprintf(stderr, "cannot plan the bench job\n");
    std::exit(1);
  }
  std::vector<pp::v1::TaskPlan> plans(kRanks);
  int first = 0;
  for (int r = 0; r < kRanks; ++r) {
    pp::v1::TaskPlan& plan = plans[r];
    pp::v1::StageLayers* layers = plan.add_stages();
    layers->set_stage(r);
    layers->set_first_unit(first);
    layers->set_last_unit(first + (*units)[r] - 1);
    first += (*units)[r];
    plan.set_job_id(job);
    plan.set_rank(r);
    plan.set_world_size(kRanks);
    plan.set_pp_rank(r);
    *plan.mutable_spec() = spec;
    *plan.mutable_program() = schedule->ranks(r);
    *plan.mutable_stage_to_rank() = schedule->stage_to_rank();
    plan.set_checkpoint_dir(checkpoint_dir);
    plan.set_rendezvous_prefix(job + "/");
  }
  return plans;
}

RunFigures Run(const pp::v1::JobSpec& spec, const std::string& job,
               const std::string& checkpoint_dir, bool async) {
  std::unique_ptr<comm::KvStore> kv = comm::NewMemoryKvStore();
  std::vector<pp::v1::TaskPlan> plans = Plans(spec, job, checkpoint_dir);
  std::vector<TimingReporter> reporters(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      daemon::TaskEnv env;
      env.kv = kv.get();
      env.async_checkpoints = async;
      env.comm_timeout = absl::Seconds(120);
      daemon::Task task(plans[r], env);
      if (absl::Status s = task.Run(reporters[r]); !s.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", r, std::string(s.message()).c_str());
        std::exit(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  RunFigures figures;
  const int steps = spec.train().steps();
  for (TimingReporter& rep : reporters) {
    const double window =
        std::chrono::duration<double>(rep.report_times.back() - rep.report_times.front()).count();
    figures.step_period = std::max(figures.step_period, window / (steps - 1));
    figures.write_seconds += rep.write_seconds;
    figures.written_bytes += rep.bytes;
    figures.last_shards.push_back(rep.last);
  }
  const int every = spec.checkpoint().every_steps();
  figures.checkpoints_inside = checkpoint_dir.empty() ? 0 : (steps - 1) / every;
  return figures;
}

// Commits the manifest of the final step the way ppcoord does, from the ranks' reports.
std::string Commit(const std::string& root, const std::string& job,
                   const std::vector<pp::v1::CheckpointReport>& shards) {
  pp::v1::CheckpointManifest manifest;
  manifest.set_job_id(job);
  manifest.set_step(shards.front().step());
  for (const pp::v1::CheckpointReport& r : shards) *manifest.add_shards() = common::ManifestShard(r);
  const std::string dir = common::StepDir(root, job, manifest.step());
  if (absl::Status s = common::CommitManifest(dir, manifest); !s.ok()) {
    std::fprintf(stderr, "commit: %s\n", std::string(s.message()).c_str());
    std::exit(1);
  }
  return dir;
}

double SecondsOf(const std::function<void()>& run) {
  const Clock::time_point start = Clock::now();
  run();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

int Main() {
  const fs::path dir = absl::GetFlag(FLAGS_dir).empty()
                           ? fs::temp_directory_path() / absl::StrCat("ckpt_bench_", ::getpid())
                           : fs::path(absl::GetFlag(FLAGS_dir));
  fs::create_directories(dir);
  std::ofstream(dir / "corpus.txt") << data::GenerateCorpus(3, 1 << 20);
  const pp::v1::JobSpec spec = Spec(dir / "corpus.txt");
  const std::string root = (dir / "checkpoints").string();
  const pp::v1::ModelSpec& m = spec.model();
  std::printf("model: %d layers, C=%d, T=%d; M=%d, B=%d; D=%d ranks (threads), %d steps, "
              "checkpoint every %d\n",
              m.n_layers(), m.d_model(), m.seq_len(), spec.train().microbatches(),
              spec.train().microbatch_size(), kRanks, spec.train().steps(),
              spec.checkpoint().every_steps());

  // The machines these run on are shared: the best of interleaved rounds is the least disturbed.
  RunFigures none, sync, async;
  std::vector<pp::v1::CheckpointReport> on_disk;  // the shards the last sync run left
  auto keep_best = [](RunFigures& best, RunFigures run) {
    if (best.step_period == 0 || run.step_period < best.step_period) best = std::move(run);
  };
  for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    keep_best(none, Run(spec, "none", "", true));
    RunFigures run = Run(spec, "sync", root, false);
    on_disk = run.last_shards;
    keep_best(sync, std::move(run));
    keep_best(async, Run(spec, "async", root, true));
  }
  int64_t checkpoint_bytes = 0;
  for (const pp::v1::CheckpointReport& r : sync.last_shards) checkpoint_bytes += r.bytes();
  const double total_mb = checkpoint_bytes / 1e6;
  std::printf("checkpoint size: %.1f MB in %d shards (model + AdamW moments)\n", total_mb, kRanks);
  std::printf("%-22s %12s %18s\n", "run", "step period", "cost / checkpoint");
  std::printf("%-22s %10.1f ms %18s\n", "no checkpoints", none.step_period * 1e3, "-");
  for (const auto& [name, run] : {std::pair<const char*, const RunFigures*>{"sync", &sync},
                                  {"async", &async}}) {
    const double cost = (run->step_period - none.step_period) * (spec.train().steps() - 1) /
                        run->checkpoints_inside;
    std::printf("%-22s %10.1f ms %15.1f ms\n", name, run->step_period * 1e3, cost * 1e3);
  }
  std::printf("save (serialize+sha256+write+fsync), per rank: sync %.0f MB/s, async %.0f MB/s\n",
              sync.written_bytes / 1e6 / sync.write_seconds,
              async.written_bytes / 1e6 / async.write_seconds);

  const std::string step_dir = Commit(root, "sync", on_disk);
  absl::Status loaded;
  const double verify =
      SecondsOf([&] { loaded.Update(common::VerifyCheckpoint(step_dir).status()); });
  const double load = SecondsOf([&] { loaded.Update(common::LoadCheckpoint(step_dir).status()); });
  // What one resuming rank reads: the tensors rank 0 wrote (its stage), found via the manifest.
  const std::set<std::string> rank0(on_disk.front().tensors().begin(),
                                    on_disk.front().tensors().end());
  const double load_rank = SecondsOf([&] {
    loaded.Update(common::LoadCheckpoint(step_dir, [&](const std::string& name) {
                    return rank0.count(name) > 0;
                  }).status());
  });
  if (!loaded.ok()) {
    std::fprintf(stderr, "load: %s\n", std::string(loaded.message()).c_str());
    return 1;
  }
  std::printf("load (manifest+sha256+parse): %.0f MB/s; verify only (sha256): %.0f MB/s\n",
              total_mb / load, total_mb / verify);
  std::printf("load of rank 0's tensors alone (reads only its shard): %.1f ms, %.2fx the whole "
              "load's %.1f ms\n",
              load_rank * 1e3, load_rank / load, load * 1e3);
  if (absl::GetFlag(FLAGS_dir).empty()) fs::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace pp

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "checkpoint_bench [--steps=N] [--every=N] [--layers=L] [--d_model=C] ...: the step-time "
      "cost of sync and async checkpoints, and save/load MB/s");
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_steps) < 2 || absl::GetFlag(FLAGS_every) < 1 ||
      absl::GetFlag(FLAGS_every) >= absl::GetFlag(FLAGS_steps) || absl::GetFlag(FLAGS_rounds) < 1) {
    std::fprintf(stderr,
                 "checkpoint_bench: want --steps >= 2, 1 <= --every < --steps, --rounds >= 1\n");
    return 2;
  }
  return pp::Main();
}
