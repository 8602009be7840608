// bench/planner: does parallel.schedule "auto" choose well, and does it predict what it gets?
// On four emulated hosts (tests/support/netns.h: one network namespace and address per worker,
// joined by a bridge) and for each link setting (free, then every link shaped to --rate_mbit by
// tbf), it runs the auto job, then every fixed candidate a user could write (schedule x V x M,
// partition cost), each with its predicted step (coordinator/plan/calibrated.h PredictStepSeconds
// on the auto job's calibration) beside its measured median step (steps 2.., the first connects
// the ranks). It prints one row per run as it goes, then auto against the best measured
// candidate and auto's own prediction error. Needs root (namespaces): exits 77 without.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/job_spec.h"
#include "common/schedules.h"
#include "coordinator/plan/plan.h"
#include "tests/support/cluster.h"
#include "tests/support/netns.h"

ABSL_FLAG(std::string, links, "fast,slow", "link settings to run, comma-separated: fast, slow");
ABSL_FLAG(int, rate_mbit, 50, "the slow setting's rate per link, Mbit/s (tbf)");
ABSL_FLAG(int, steps, 6, "steps per job; the first is not counted");
ABSL_FLAG(int, layers, 14, "model.n_layers (C=128, T=128, 4 heads)");
ABSL_FLAG(int, batch, 8, "sequences per step: train.microbatches x train.microbatch_size");
ABSL_FLAG(std::string, bin_dir, "", "folder of ppcoord and ppworker; default: this binary's");

namespace pp::bench {
namespace {

namespace fs = std::filesystem;
using testing_support::Cluster;
using testing_support::NetnsBed;

constexpr int kRanks = 4;

std::string BinDir() {
  if (!absl::GetFlag(FLAGS_bin_dir).empty()) return absl::GetFlag(FLAGS_bin_dir);
  std::error_code ec;
  return fs::read_symlink("/proc/self/exe", ec).parent_path().string();
}

pp::v1::JobSpec BaseSpec() {
  pp::v1::JobSpec spec;
  spec.set_name("planner");
  pp::v1::ModelSpec* m = spec.mutable_model();
  m->set_vocab_size(256);
  m->set_seq_len(128);
  m->set_d_model(128);
  m->set_n_heads(4);
  m->set_n_layers(absl::GetFlag(FLAGS_layers));
  spec.mutable_parallel()->set_pipeline(kRanks);
  pp::v1::TrainSpec* t = spec.mutable_train();
  t->set_steps(absl::GetFlag(FLAGS_steps));
  t->set_microbatches(absl::GetFlag(FLAGS_batch) / 2);
  t->set_microbatch_size(2);
  t->set_lr(1e-3);
  t->set_seed(1);
  spec.mutable_data()->set_format("generated");
  return spec;
}

// The emulated hosts, ppcoord on the bridge and one worker per host.
struct Bed {
  std::unique_ptr<NetnsBed> hosts;
  std::unique_ptr<Cluster> cluster;
};

absl::StatusOr<Bed> StartBed(const std::string& dir, int64_t rate) {
  Bed bed;
  absl::StatusOr<std::unique_ptr<NetnsBed>> hosts = NetnsBed::Create(kRanks);
  if (!hosts.ok()) return hosts.status();
  bed.hosts = *std::move(hosts);
  testing_support::ClusterOptions options;
  options.bin_dir = BinDir();
  options.dir = dir;
  options.coordinator_host = bed.hosts->root_address();
  options.coordinator_flags = {"--insecure"};  // the bridge reaches nothing else
  options.worker_flags = {"--insecure", "--comm_timeout=60s"};
  absl::StatusOr<std::unique_ptr<Cluster>> cluster = Cluster::Start(options);
  if (!cluster.ok()) return cluster.status();
  bed.cluster = *std::move(cluster);
  for (int h = 0; h < kRanks; ++h) {
    testing_support::WorkerOptions worker;
    worker.host = bed.hosts->address(h);
    worker.run_in = bed.hosts->Exec(h, {});
    if (absl::Status s = bed.cluster->StartWorker(absl::StrCat("w", h), worker); !s.ok()) return s;
    if (rate > 0) {
      if (absl::Status s = bed.hosts->Shape(h, {rate, absl::ZeroDuration()}); !s.ok()) return s;
    }
  }
  return bed;
}

struct Measured {
  pp::v1::Job job;
  double median_step = 0;
};

// Runs `spec` to its end: the job and its median step seconds over steps 2...
absl::StatusOr<Measured> RunJob(Cluster& cluster, const pp::v1::JobSpec& spec) {
  absl::StatusOr<std::string> id = testing_support::SubmitJob(cluster.stub(), spec);
  if (!id.ok()) return id.status();
  absl::StatusOr<std::unique_ptr<testing_support::JobWatch>> watch =
      testing_support::JobWatch::Open(cluster.stub(), *id, absl::Seconds(60));
  if (!watch.ok()) return watch.status();
  absl::StatusOr<std::vector<pp::v1::JobEvent>> events = (*watch)->Rest();
  if (!events.ok()) return events.status();
  if (events->back().kind() != pp::v1::EVENT_FINISHED) {
    return absl::InternalError(absl::StrCat("job ", *id, " ended: ", events->back().message()));
  }
  std::vector<double> seconds;
  for (const pp::v1::JobEvent& e : *events) {
    if (e.kind() == pp::v1::EVENT_STEP && e.step() >= 2) seconds.push_back(e.step_seconds());
  }
  if (seconds.empty()) return absl::InternalError("no step after the first");
  std::sort(seconds.begin(), seconds.end());
  absl::StatusOr<pp::v1::Job> job = testing_support::GetJob(cluster.stub(), *id);
  if (!job.ok()) return job.status();
  return Measured{*job, seconds[seconds.size() / 2]};
}

// Every fixed plan a user could write for the base spec: schedule x V x M, partition cost.
std::vector<pp::v1::JobSpec> FixedCandidates(const pp::v1::JobSpec& base) {
  std::vector<pp::v1::JobSpec> out;
  const int batch = absl::GetFlag(FLAGS_batch);
  const int units = base.model().n_layers() + 2;
  for (const std::string& name : common::TrainingScheduleNames()) {
    for (int V : plan::ChunkChoices(*plan::FindSchedule(name), 4)) {
      for (int M = kRanks; M <= batch; ++M) {
        if (batch % M != 0 || kRanks * V > units) continue;
        if (!plan::Plan(name, kRanks, V, M, plan::CostModel{}).ok()) continue;
        absl::StatusOr<std::vector<int>> split = plan::PartitionUnits(
            base.model(), kRanks * V, "cost", {}, plan::UnitCosts(base.model()));
        if (!split.ok()) continue;
        pp::v1::JobSpec spec = base;
        pp::v1::ParallelSpec* p = spec.mutable_parallel();
        p->set_schedule(name);
        p->set_chunks(V);
        p->set_partition("explicit");
        p->mutable_stage_layers()->Assign(split->begin(), split->end());
        spec.mutable_train()->set_microbatches(M);
        spec.mutable_train()->set_microbatch_size(batch / M);
        common::ApplyDefaults(&spec);
        out.push_back(spec);
      }
    }
  }
  return out;
}

std::string Label(const pp::v1::JobSpec& spec) {
  return absl::StrCat(spec.parallel().schedule(), " V=", spec.parallel().chunks(),
                      " M=", spec.train().microbatches());
}

void Row(const std::string& what, double predicted, double measured) {
  std::cout << absl::StrFormat("  %-44s %9.1f %9.1f %+7.1f%%\n", what, 1e3 * predicted,
                               1e3 * measured, 100 * (predicted / measured - 1))
            << std::flush;
}

// One link setting: auto, then every fixed candidate; the summary lines.
absl::Status RunSetting(const std::string& setting, const std::string& dir) {
  const int64_t rate = setting == "slow" ? int64_t{absl::GetFlag(FLAGS_rate_mbit)} * 1000000 : 0;
  absl::StatusOr<Bed> bed = StartBed(dir, rate);
  if (!bed.ok()) return bed.status();
  std::cout << "\n" << setting << " links"
            << (rate > 0 ? absl::StrCat(" (", rate / 1000000, " Mbit/s each, tbf)") : "") << "\n"
            << absl::StrFormat("  %-44s %9s %9s %8s\n", "plan", "pred. ms", "meas. ms", "error");
  pp::v1::JobSpec auto_spec = BaseSpec();
  auto_spec.mutable_parallel()->set_schedule("auto");
  auto_spec.mutable_parallel()->mutable_auto_plan()->set_calibration_seconds(5);
  auto_spec.mutable_parallel()->mutable_auto_plan()->set_max_replans(-1);
  absl::StatusOr<Measured> chosen = RunJob(*bed->cluster, auto_spec);
  if (!chosen.ok()) return chosen.status();
  const pp::v1::JobPlan& plan = chosen->job.plan();
  Row("auto: " + plan.chosen().substr(0, 38), plan.predicted_step_seconds(), chosen->median_step);
  double best = 0;
  std::string best_label;
  for (const pp::v1::JobSpec& spec : FixedCandidates(BaseSpec())) {
    absl::StatusOr<double> predicted = plan::PredictStepSeconds(spec, plan.calibration());
    absl::StatusOr<Measured> run = RunJob(*bed->cluster, spec);
    if (!run.ok() || !predicted.ok()) {
      std::cout << "  " << Label(spec) << ": "
                << (run.ok() ? predicted.status() : run.status()).message() << "\n";
      continue;
    }
    Row(Label(spec), *predicted, run->median_step);
    if (best == 0 || run->median_step < best) best = run->median_step, best_label = Label(spec);
  }
  std::cout << absl::StrFormat(
      "  auto chose %s in %.2f s of calibration (link 0->1: %.2f ms, %.1f MB/s)\n"
      "  auto measured %.1f ms, best fixed candidate %s %.1f ms: auto %+.1f%%; auto's prediction "
      "%+.1f%%\n",
      plan.chosen(), plan.calibration().seconds(),
      1e3 * plan.calibration().ranks(0).link_latency_seconds(),
      plan.calibration().ranks(0).link_bytes_per_second() / 1e6, 1e3 * chosen->median_step,
      best_label, 1e3 * best, 100 * (chosen->median_step / best - 1),
      100 * (plan.predicted_step_seconds() / chosen->median_step - 1));
  return absl::OkStatus();
}

}  // namespace
}  // namespace pp::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (geteuid() != 0) {
    std::cerr << "planner_bench: needs root (network namespaces); skipped\n";
    return 77;
  }
  const std::string root = (std::filesystem::temp_directory_path() /
                            absl::StrCat("planner-bench-", getpid()))
                               .string();
  for (const std::string& setting :
       std::vector<std::string>(absl::StrSplit(absl::GetFlag(FLAGS_links), ','))) {
    if (setting != "fast" && setting != "slow") {
      std::cerr << "planner_bench: --links takes fast and slow, got " << setting << "\n";
      return 2;
    }
    if (absl::Status s = pp::bench::RunSetting(setting, root + "/" + setting); !s.ok()) {
      std::cerr << "planner_bench: " << setting << ": " << s << "\n";
      return 1;
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(root, ec);
  return 0;
}
