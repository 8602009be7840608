// bench/planner: does parallel.schedule "auto" choose well, and does it predict what it gets?
// On four emulated hosts (tests/support/netns.h: one network namespace and address per worker,
// joined by a bridge) and for each link setting (free, then every link shaped to --rate_mbit by
// tbf), it runs an auto job on a fresh calibration (whose trial steps refit it: calibrated.h),
// then a second auto job, which chooses on the refitted calibration from the cache, then every
// fixed candidate a user could write (schedule x V x M, partition cost), each with its predicted
// step (coordinator/plan/calibrated.h PredictStepSeconds on the refitted calibration) beside its
// measured median step (steps 2.., the first connects the ranks). Each row also shows where the
// step went, from the job's traces (span, tail, waited-message latency, SEND time), and the
// machine's idle and steal shares while it ran; a job the hypervisor stole more than --max_steal
// from runs again (--tries). At the end auto's plan and the best fixed one run alternately
// --repeats times each: auto against the best, and auto's prediction, on their medians. Needs
// root (namespaces): exits 77 without.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/job_spec.h"
#include "common/median.h"
#include "coordinator/plan/plan.h"
#include "program/schedules.h"
#include "tests/support/cluster.h"
#include "tests/support/netns.h"

ABSL_FLAG(std::string, links, "fast,slow", "link settings to run, comma-separated: fast, slow");
ABSL_FLAG(int, rate_mbit, 50, "the slow setting's rate per link, Mbit/s (tbf)");
ABSL_FLAG(int, steps, 10, "steps per job; the first is not counted");
ABSL_FLAG(int, layers, 14, "model.n_layers (C=128, T=128, 4 heads)");
ABSL_FLAG(int, batch, 8, "sequences per step: train.microbatches x train.microbatch_size");
ABSL_FLAG(int, tries, 3, "runs of a job at most while the hypervisor steals CPU");
ABSL_FLAG(double, max_steal, 0.03, "steal share of the CPU above which a job runs again");
ABSL_FLAG(int, repeats, 3, "alternating runs of auto's plan and the best fixed one at the end");
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

// /proc/stat's first line: jiffies of all CPUs, idle + iowait, and steal.
struct CpuTimes {
  double total = 0, idle = 0, steal = 0;
};
CpuTimes ReadCpuTimes() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  double v[8] = {};
  in >> cpu;
  for (double& x : v) in >> x;
  CpuTimes t;
  for (double x : v) t.total += x;
  t.idle = v[3] + v[4];
  t.steal = v[7];
  return t;
}

struct Measured {
  pp::v1::Job job;
  double median_step = 0;
  std::vector<double> steps;  // seconds of steps 2.., in order
  // Where a step went, from the traces of the counted steps (plan.h FitStepOverheads: medians
  // of the programs' span, the tail after it, the waited-message latency and the SEND time).
  pp::v1::StepOverheads parts;
  double idle = 0, steal = 0;  // of the machine's CPU time while the job ran (/proc/stat)
};

// FitStepOverheads of `steps` (number, seconds) of `job_id`, as ppcoord kept their traces; empty
// when they are not there.
pp::v1::StepOverheads TracedOverheads(pp::v1::Coordinator::Stub& stub, const std::string& job_id,
                                      const std::vector<std::pair<int, double>>& steps) {
  std::vector<pp::v1::StepTrace> traces;
  std::vector<double> seconds;
  for (const auto& [step, took] : steps) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    pp::v1::GetTraceRequest request;
    request.set_job_id(job_id);
    request.set_step(step);
    pp::v1::StepTrace trace;
    if (!stub.GetTrace(&context, request, &trace).ok()) continue;
    traces.push_back(std::move(trace));
    seconds.push_back(took);
  }
  absl::StatusOr<pp::v1::StepOverheads> fitted = plan::FitStepOverheads(traces, seconds);
  return fitted.ok() ? *fitted : pp::v1::StepOverheads();
}

// Runs `spec` to its end: the job and its median step seconds over steps 2...
absl::StatusOr<Measured> RunJob(Cluster& cluster, const pp::v1::JobSpec& spec) {
  const CpuTimes before = ReadCpuTimes();
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
  std::vector<std::pair<int, double>> steps;
  std::vector<double> seconds;
  for (const pp::v1::JobEvent& e : *events) {
    if (e.kind() != pp::v1::EVENT_STEP || e.step() < 2) continue;
    steps.emplace_back(e.step(), e.step_seconds());
    seconds.push_back(e.step_seconds());
  }
  if (seconds.empty()) return absl::InternalError("no step after the first");
  absl::StatusOr<pp::v1::Job> job = testing_support::GetJob(cluster.stub(), *id);
  if (!job.ok()) return job.status();
  const CpuTimes after = ReadCpuTimes();
  const double total = std::max(after.total - before.total, 1.0);
  return Measured{.job = *job,
                  .median_step = common::Median(seconds),
                  .steps = seconds,
                  .parts = TracedOverheads(cluster.stub(), *id, steps),
                  .idle = (after.idle - before.idle) / total,
                  .steal = (after.steal - before.steal) / total};
}

// Every fixed plan a user could write for the base spec: schedule x V x M, partition cost.
std::vector<pp::v1::JobSpec> FixedCandidates(const pp::v1::JobSpec& base) {
  std::vector<pp::v1::JobSpec> out;
  const int batch = absl::GetFlag(FLAGS_batch);
  const int units = base.model().n_layers() + 2;
  for (const std::string& name : prog::TrainingScheduleNames()) {
    for (int V : prog::ChunkChoices(*prog::FindSchedule(name), 4)) {
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

void Row(const std::string& what, double predicted, const Measured& measured) {
  const pp::v1::StepOverheads& p = measured.parts;
  std::cout << absl::StrFormat(
                   "  %-44s %9.1f %9.1f %+7.1f%% %7.1f %6.1f %6.2f %6.2f %5.1f%% %5.1f%%\n", what,
                   1e3 * predicted, 1e3 * measured.median_step,
                   100 * (predicted / measured.median_step - 1), 1e3 * p.span_seconds(),
                   1e3 * p.tail_seconds(), 1e3 * p.latency_seconds(), 1e3 * p.send_seconds(),
                   100 * measured.idle, 100 * measured.steal)
            << std::flush;
}

// RunJob up to --tries times while the hypervisor steals more than --max_steal of the CPU: the
// run with the least steal.
absl::StatusOr<Measured> RunSteady(Cluster& cluster, const pp::v1::JobSpec& spec) {
  std::optional<Measured> best;
  for (int i = 0; i < std::max(1, absl::GetFlag(FLAGS_tries)); ++i) {
    absl::StatusOr<Measured> run = RunJob(cluster, spec);
    if (!run.ok()) return run.status();
    if (!best || run->steal < best->steal) best = *std::move(run);
    if (best->steal <= absl::GetFlag(FLAGS_max_steal)) break;
  }
  return *std::move(best);
}

// `a` and `b` run alternately --repeats times each: the medians of their runs' median steps.
// One run of each on this shared VM can differ by 10-20% for the same plan (bench/NOTES.md).
absl::StatusOr<std::pair<double, double>> Rematch(Cluster& cluster, const pp::v1::JobSpec& a,
                                                  const pp::v1::JobSpec& b) {
  std::vector<double> first, second;
  for (int i = 0; i < absl::GetFlag(FLAGS_repeats); ++i) {
    for (auto [spec, into] : {std::pair{&a, &first}, std::pair{&b, &second}}) {
      absl::StatusOr<Measured> run = RunSteady(cluster, *spec);
      if (!run.ok()) return run.status();
      into->push_back(run->median_step);
    }
  }
  return std::pair{common::Median(first), common::Median(second)};
}

// Every fixed candidate, predicted on `calibration`, one row each; the best measured one.
struct FixedRuns {
  double best = 0;
  std::string best_label;
  pp::v1::JobSpec best_spec;
  int within = 0, rows = 0;  // rows predicted within 10%, of all
};

FixedRuns RunFixed(Cluster& cluster, const pp::v1::Calibration& calibration) {
  FixedRuns out;
  for (const pp::v1::JobSpec& spec : FixedCandidates(BaseSpec())) {
    absl::StatusOr<double> predicted = plan::PredictStepSeconds(spec, calibration);
    absl::StatusOr<Measured> run = RunSteady(cluster, spec);
    if (!run.ok() || !predicted.ok()) {
      std::cout << "  " << Label(spec) << ": "
                << (run.ok() ? predicted.status() : run.status()).message() << "\n";
      continue;
    }
    Row(Label(spec), *predicted, *run);
    ++out.rows;
    if (std::abs(*predicted / run->median_step - 1) <= 0.1) ++out.within;
    if (out.best == 0 || run->median_step < out.best) {
      out.best = run->median_step, out.best_label = Label(spec), out.best_spec = spec;
    }
  }
  return out;
}

pp::v1::JobSpec AutoSpec() {
  pp::v1::JobSpec spec = BaseSpec();
  pp::v1::AutoPlanSpec* bounds = spec.mutable_parallel()->mutable_auto_plan();
  spec.mutable_parallel()->set_schedule("auto");
  bounds->set_calibration_seconds(5);
  bounds->set_max_replans(-1);  // each job measures one plan
  return spec;
}

// One link setting: auto on a fresh calibration (whose trial steps refit it), auto again on the
// refitted calibration, then every fixed candidate predicted on it; the summary lines.
absl::Status RunSetting(const std::string& setting, const std::string& dir) {
  const int64_t rate = setting == "slow" ? int64_t{absl::GetFlag(FLAGS_rate_mbit)} * 1000000 : 0;
  absl::StatusOr<Bed> bed = StartBed(dir, rate);
  if (!bed.ok()) return bed.status();
  std::cout << "\n" << setting << " links"
            << (rate > 0 ? absl::StrCat(" (", rate / 1000000, " Mbit/s each, tbf)") : "") << "\n"
            << absl::StrFormat("  %-44s %9s %9s %8s %7s %6s %6s %6s %6s %6s\n", "plan",
                               "pred. ms", "meas. ms", "error", "span", "tail", "lat.", "send",
                               "idle", "steal");
  absl::StatusOr<Measured> first = RunSteady(*bed->cluster, AutoSpec());
  if (!first.ok()) return first.status();
  const pp::v1::JobPlan& fresh = first->job.plan();
  Row("auto, fresh: " + fresh.chosen().substr(0, 31), fresh.first_predicted_step_seconds(),
      *first);
  Row("  after its trial steps", fresh.predicted_step_seconds(), *first);
  std::cout << "  its steps (ms):";
  for (double t : first->steps) std::cout << absl::StrFormat(" %.1f", 1e3 * t);
  std::cout << "\n  " << fresh.reason() << "\n";
  absl::StatusOr<Measured> chosen = RunSteady(*bed->cluster, AutoSpec());
  if (!chosen.ok()) return chosen.status();
  const pp::v1::JobPlan& plan = chosen->job.plan();
  Row("auto: " + plan.chosen().substr(0, 38), plan.first_predicted_step_seconds(), *chosen);
  std::cout << "  " << plan.reason() << "\n";
  const FixedRuns fixed = RunFixed(*bed->cluster, fresh.calibration());
  const double best = fixed.best;
  const std::string& best_label = fixed.best_label;
  const int within = fixed.within, rows = fixed.rows;
  const pp::v1::JobSpec& best_spec = fixed.best_spec;
  pp::v1::JobSpec auto_plan = chosen->job.spec();
  auto_plan.mutable_parallel()->clear_auto_plan();
  absl::StatusOr<std::pair<double, double>> rematch = Rematch(*bed->cluster, auto_plan, best_spec);
  if (!rematch.ok()) return rematch.status();
  std::cout << absl::StrFormat(
      "  alternating %d runs each, medians: auto's plan %.1f ms, %s %.1f ms: auto %+.1f%%; auto's "
      "prediction %+.1f%%\n",
      absl::GetFlag(FLAGS_repeats), 1e3 * rematch->first, best_label, 1e3 * rematch->second,
      100 * (rematch->first / rematch->second - 1),
      100 * (plan.first_predicted_step_seconds() / rematch->first - 1));
  std::cout << absl::StrFormat(
      "  auto chose %s in %.2f s of calibration (link 0->1: %.2f ms, %.1f MB/s), %s\n"
      "  auto measured %.1f ms, best fixed candidate %s %.1f ms: auto %+.1f%%; auto's prediction "
      "%+.1f%%; %d of %d fixed candidates predicted within 10%%\n",
      plan.chosen(), plan.calibration().seconds(),
      1e3 * plan.calibration().ranks(0).link_latency_seconds(),
      plan.calibration().ranks(0).link_bytes_per_second() / 1e6,
      plan.calibration().has_trial() ? "with the first auto job's trial steps" : "no trial",
      1e3 * chosen->median_step, best_label, 1e3 * best, 100 * (chosen->median_step / best - 1),
      100 * (plan.first_predicted_step_seconds() / chosen->median_step - 1), within, rows);
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
