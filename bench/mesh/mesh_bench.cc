// Figures on this machine: data- and tensor-parallel scaling at a fixed global batch,
// and how much of the data-parallel gradient all-reduce backwards hide. Every rank is a Task
// (worker/daemon/task.h) on a thread, planned the way ppcoord plans it (coordinator/placement.h),
// talking Gloo over loopback, so the figures include the real transport but share the machine's
// cores between ranks.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/job_spec.h"
#include "coordinator/placement.h"
#include "coordinator/plan/plan.h"
#include "worker/comm/transport.h"
#include "worker/daemon/task.h"
#include "worker/data/data.h"

ABSL_FLAG(std::string, part, "all", "dp | tp | overlap | all");
ABSL_FLAG(int, steps, 6, "steps per run; the first is warm-up and not counted");

namespace pp {
namespace {

class Collector : public daemon::TaskReporter {
 public:
  pp::v1::ReportResponse ReportStep(const pp::v1::StepReport& report,
                                    const executor::StepResult&) override {
    steps.push_back(report);
    return {};
  }
  void ReportCheckpoint(const pp::v1::CheckpointReport&, double) override {}
  std::vector<pp::v1::StepReport> steps;
};

struct Layout {
  int dp = 1, pp = 1, tp = 1, chunks = 1;
  std::string schedule = "gpipe";
  int microbatches = 8;  // per replica
  int64_t bucket_bytes = 0;
};

struct Figures {
  double step_seconds = 0;       // mean over counted steps, slowest rank
  double allreduce_seconds = 0;  // mean per step and rank
  double exposed_seconds = 0;
};

pp::v1::JobSpec Spec(const Layout& l, const std::string& corpus, int steps) {
  pp::v1::JobSpec spec;
  spec.set_name("bench");
  pp::v1::ModelSpec* model = spec.mutable_model();
  model->set_vocab_size(256);
  model->set_seq_len(64);
  model->set_d_model(128);
  model->set_n_heads(4);
  model->set_n_layers(4);
  pp::v1::ParallelSpec* parallel = spec.mutable_parallel();
  parallel->set_pipeline(l.pp);
  parallel->set_data(l.dp);
  parallel->set_tensor(l.tp);
  parallel->set_chunks(l.chunks);
  parallel->set_schedule(l.schedule);
  parallel->set_bucket_bytes(l.bucket_bytes);
  pp::v1::TrainSpec* train = spec.mutable_train();
  train->set_steps(steps);
  train->set_microbatches(l.microbatches);
  train->set_microbatch_size(4);
  train->set_threads(1);
  spec.mutable_data()->set_path(corpus);
  common::ApplyDefaults(&spec);
  return spec;
}

absl::StatusOr<Figures> Run(const Layout& l, const std::string& corpus, int steps) {
  const pp::v1::JobSpec spec = Spec(l, corpus, steps);
  if (absl::Status s = common::ValidateJobSpec(spec); !s.ok()) return s;
  absl::StatusOr<pp::v1::Schedule> schedule =
      plan::PlanSchedule(l.schedule, l.pp, l.chunks, l.microbatches, pp::v1::CostModel());
  if (!schedule.ok()) return schedule.status();
  absl::StatusOr<std::vector<int>> units =
      plan::PartitionUnits(spec.model(), l.pp * l.chunks, "uniform", {}, {});
  if (!units.ok()) return units.status();
  std::vector<pp::v1::WorkerInfo> workers(l.dp * l.pp * l.tp);
  for (size_t w = 0; w < workers.size(); ++w) workers[w].set_name(absl::StrFormat("w%03d", w));
  const std::vector<int> stage_to_rank(schedule->stage_to_rank().begin(),
                                       schedule->stage_to_rank().end());
  absl::StatusOr<std::vector<pp::v1::RankPlacement>> placement =
      coordinator::PlaceRanks(spec, stage_to_rank, workers);
  if (!placement.ok()) return placement.status();
  pp::v1::Job job;
  job.set_id("bench");
  *job.mutable_spec() = spec;
  job.mutable_placement()->Assign(placement->begin(), placement->end());
  const std::vector<pp::v1::TaskPlan> plans =
      coordinator::BuildTaskPlans(job, *schedule, *units, /*checkpoint_dir=*/"");

  std::unique_ptr<comm::KvStore> kv = comm::NewMemoryKvStore();
  std::vector<Collector> collectors(plans.size());
  std::vector<absl::Status> outcomes(plans.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < plans.size(); ++r) {
    threads.emplace_back([&, r] {
      daemon::TaskEnv env;
      env.kv = kv.get();
      env.comm_timeout = absl::Seconds(60);
      daemon::Task task(plans[r], env);
      outcomes[r] = task.Run(collectors[r]);
    });
  }
  for (std::thread& t : threads) t.join();
  Figures f;
  for (size_t r = 0; r < plans.size(); ++r) {
    if (!outcomes[r].ok()) return outcomes[r];
  }
  const int counted = steps - 1;
  for (int k = 1; k < steps; ++k) {
    double slowest = 0;
    for (const Collector& c : collectors) {
      slowest = std::max(slowest, c.steps[k].step_seconds());
      f.allreduce_seconds += c.steps[k].dp_allreduce_seconds() / (counted * plans.size());
      f.exposed_seconds += c.steps[k].dp_exposed_seconds() / (counted * plans.size());
    }
    f.step_seconds += slowest / counted;
  }
  return f;
}

int Main(const std::string& part, int steps) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / absl::StrCat("mesh_bench_", ::getpid())).string();
  std::filesystem::create_directories(dir);
  const std::string corpus = dir + "/corpus.txt";
  std::ofstream(corpus) << data::GenerateCorpus(1, 400000);
  const int global_microbatches = 8;
  const double tokens = global_microbatches * 4.0 * 64;
  std::cout << absl::StrFormat("machine: %d hardware threads; global batch %d x 4 x 64 tokens\n",
                               std::thread::hardware_concurrency(), global_microbatches);
  int failures = 0;
  auto report = [&](const std::string& name, const Layout& l) {
    absl::StatusOr<Figures> f = Run(l, corpus, steps);
    if (!f.ok()) {
      std::cout << name << ": " << f.status() << "\n";
      ++failures;
      return;
    }
    const double hidden =
        f->allreduce_seconds > 0 ? 1 - std::min(1.0, f->exposed_seconds / f->allreduce_seconds) : 0;
    std::cout << absl::StrFormat(
        "%-38s step %8.4f s  %9.0f tok/s  dp all-reduce %.4f s, exposed %.4f s, hidden %5.1f%%\n",
        name, f->step_seconds, tokens / f->step_seconds, f->allreduce_seconds, f->exposed_seconds,
        100 * hidden);
  };
  if (part == "dp" || part == "all") {
    for (int dp : {1, 2, 4}) {
      report(absl::StrCat("dp", dp, " x pp1 x tp1"),
             {.dp = dp, .microbatches = global_microbatches / dp});
    }
  }
  if (part == "tp" || part == "all") {
    for (int tp : {1, 2, 4}) report(absl::StrCat("dp1 x pp1 x tp", tp), {.tp = tp});
  }
  if (part == "overlap" || part == "all") {
    // Buckets of 64 KiB: several per chunk. A rank's gradients of one chunk are final only after
    // the chunk's last backward, so with V=1 nothing can start early; with V=2 the later chunk's
    // buckets run while the earlier chunk's backwards do.
    for (int64_t bucket : {int64_t{4} << 20, int64_t{64} << 10}) {
      const std::string b = absl::StrCat(" bucket ", bucket >> 10, "K");
      report("dp2 x pp2 1f1b V=1" + b,
             {.dp = 2, .pp = 2, .schedule = "1f1b", .microbatches = 4, .bucket_bytes = bucket});
      report("dp2 x pp2 interleaved V=2" + b, {.dp = 2,
                                               .pp = 2,
                                               .chunks = 2,
                                               .schedule = "interleaved-1f1b",
                                               .microbatches = 4,
                                               .bucket_bytes = bucket});
    }
  }
  std::filesystem::remove_all(dir);
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace pp

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return pp::Main(absl::GetFlag(FLAGS_part), absl::GetFlag(FLAGS_steps));
}
