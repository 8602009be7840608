// recompute_bench: what activation recomputation buys and costs on the embedded default job
// (client/up_spec.cc: the model `ppctl up --workers=2` trains, D=2, M=8), for 1f1b and zb-h1 and
// recompute none, selective and full. One loopback cluster of the real binaries (ppcoord + 2
// ppworker processes, one BLAS thread each) runs every job; the runs alternate (every schedule
// and mode once per round) so that the machine's noise falls on all of them alike.
// For each it prints, per rank: the measured peak live activation bytes of the last step (the
// executor's figure in GetTrace: the stage's saved state and its boundary buffers), the memory
// model's activation estimate (PlanJob), the median step time over the steps after the first two,
// its ratio to none, and the simulator's predicted ratio (PlanJob's makespan under unit costs and
// the job's recomputation shares).
//   build/bin/recompute_bench [--steps=12] [--rounds=2] [--schedules=1f1b,zb-h1]
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/up_spec.h"
#include "coordinator/plan/plan.h"
#include "grpcpp/grpcpp.h"
#include "tests/support/cluster.h"

ABSL_FLAG(std::string, bin_dir, "", "folder of ppcoord, ppworker, ppctl; default: this binary's");
ABSL_FLAG(std::string, dir, "", "work folder; default /tmp/pp_recompute_bench_<pid>");
ABSL_FLAG(int32_t, steps, 12, "steps per job (the first two are not timed)");
ABSL_FLAG(int32_t, rounds, 2, "rounds of every schedule x mode, alternating");
ABSL_FLAG(std::string, schedules, "1f1b,zb-h1", "comma-separated schedules");

namespace pp::bench {
namespace {

using testing_support::Cluster;

const char* const kModes[] = {"none", "selective", "full"};

struct Figures {
  std::vector<int64_t> measured;   // peak activation bytes per rank, last step
  std::vector<int64_t> estimated;  // the memory model's activations per rank
  double predicted = 0;            // simulated makespan
  std::vector<double> step_seconds;
};

pp::v1::JobSpec SpecOf(const std::string& schedule, const std::string& mode) {
  pp::v1::JobSpec spec = client::DefaultUpSpec(2);
  spec.set_name(absl::StrCat("recompute-", schedule, "-", mode));
  spec.mutable_parallel()->set_schedule(schedule);
  spec.mutable_parallel()->set_recompute(mode);
  spec.mutable_train()->set_steps(absl::GetFlag(FLAGS_steps));
  spec.clear_eval();
  spec.mutable_checkpoint()->set_every_steps(0);
  return spec;
}

template <typename Request, typename Response, typename Call>
absl::StatusOr<Response> Ask(Call call, const Request& request) {
  Response response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  const grpc::Status status = call(&context, request, &response);
  if (!status.ok()) return absl::InternalError(status.error_message());
  return response;
}

// Runs one job to its end on `cluster` and adds its figures to `f`.
absl::Status RunOnce(Cluster& cluster, const pp::v1::JobSpec& spec, Figures& f) {
  auto& stub = cluster.stub();
  pp::v1::PlanJobRequest plan_request;
  *plan_request.mutable_spec() = spec;
  absl::StatusOr<pp::v1::PlanJobResponse> plan = Ask<pp::v1::PlanJobRequest, pp::v1::PlanJobResponse>(
      [&](auto* c, auto& q, auto* r) { return stub.PlanJob(c, q, r); }, plan_request);
  if (!plan.ok()) return plan.status();
  absl::StatusOr<std::string> id = testing_support::SubmitJob(stub, spec);
  if (!id.ok()) return id.status();
  absl::StatusOr<std::unique_ptr<testing_support::JobWatch>> watch =
      testing_support::JobWatch::Open(stub, *id, absl::Minutes(10));
  if (!watch.ok()) return watch.status();
  absl::StatusOr<std::vector<pp::v1::JobEvent>> events = (*watch)->Rest();
  if (!events.ok()) return events.status();
  if (events->back().kind() != pp::v1::EVENT_FINISHED) {
    return absl::InternalError(absl::StrCat(*id, ": ", events->back().message(), cluster.Logs()));
  }
  for (const pp::v1::JobEvent& e : *events) {
    if (e.kind() == pp::v1::EVENT_STEP && e.step() > 2) f.step_seconds.push_back(e.step_seconds());
  }
  pp::v1::GetTraceRequest trace_request;
  trace_request.set_job_id(*id);
  trace_request.set_step(spec.train().steps());
  absl::StatusOr<pp::v1::StepTrace> trace = Ask<pp::v1::GetTraceRequest, pp::v1::StepTrace>(
      [&](auto* c, auto& q, auto* r) { return stub.GetTrace(c, q, r); }, trace_request);
  if (!trace.ok()) return trace.status();
  f.measured.assign(trace->ranks_size(), 0);
  for (const pp::v1::RankTrace& rank : trace->ranks()) {
    if (rank.rank() >= 0 && rank.rank() < trace->ranks_size()) {
      f.measured[rank.rank()] = std::max(f.measured[rank.rank()], rank.peak_activation_bytes());
    }
  }
  f.estimated.clear();
  for (const pp::v1::RankMemory& m : plan->memory()) f.estimated.push_back(m.activations());
  f.predicted = plan->schedule().simulation().makespan();
  return absl::OkStatus();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string Bytes(const std::vector<int64_t>& v) {
  std::vector<std::string> parts;
  for (int64_t b : v) parts.push_back(plan::FormatBytes(b));
  return absl::StrJoin(parts, " / ");
}

int Main() {
  if (absl::GetFlag(FLAGS_bin_dir).empty()) {
    absl::SetFlag(&FLAGS_bin_dir,
                  std::filesystem::read_symlink("/proc/self/exe").parent_path().string());
  }
  std::string root = absl::GetFlag(FLAGS_dir);
  if (root.empty()) root = absl::StrCat("/tmp/pp_recompute_bench_", ::getpid());
  std::filesystem::remove_all(root);
  testing_support::ClusterOptions options;
  options.bin_dir = absl::GetFlag(FLAGS_bin_dir);
  options.dir = root;
  absl::StatusOr<std::unique_ptr<Cluster>> cluster = Cluster::Start(options);
  if (!cluster.ok() || !(*cluster)->AddWorkers(2).ok()) {
    std::cerr << "recompute_bench: no cluster: " << cluster.status() << "\n";
    return 1;
  }
  const std::vector<std::string> schedules =
      absl::StrSplit(absl::GetFlag(FLAGS_schedules), ',', absl::SkipEmpty());
  std::map<std::pair<std::string, std::string>, Figures> figures;
  for (int round = 1; round <= absl::GetFlag(FLAGS_rounds); ++round) {
    for (const std::string& schedule : schedules) {
      for (const char* mode : kModes) {
        std::cerr << "round " << round << ": " << schedule << " recompute " << mode << "\n";
        if (absl::Status s = RunOnce(**cluster, SpecOf(schedule, mode), figures[{schedule, mode}]);
            !s.ok()) {
          std::cerr << "recompute_bench: " << schedule << " " << mode << ": " << s << "\n";
          return 1;
        }
      }
    }
  }
  std::cout << absl::StrFormat("%-7s %-9s %-21s %-21s %9s %6s %6s %6s\n", "sched", "recompute",
                               "peak act. r0 / r1", "estimate r0 / r1", "step (s)", "spread",
                               "x none", "sim");
  for (const std::string& schedule : schedules) {
    const Figures& none = figures[{schedule, "none"}];
    for (const char* mode : kModes) {
      const Figures& f = figures[{schedule, mode}];
      const auto [lo, hi] = std::minmax_element(f.step_seconds.begin(), f.step_seconds.end());
      const double median = Median(f.step_seconds);
      std::cout << absl::StrFormat("%-7s %-9s %-21s %-21s %9.4f %5.0f%% %6.3f %6.3f\n", schedule,
                                   mode, Bytes(f.measured), Bytes(f.estimated), median,
                                   100 * (*hi - *lo) / median, median / Median(none.step_seconds),
                                   f.predicted / none.predicted);
    }
  }
  std::cout << "peak act.: measured in the last step; spread: (max - min) / median of the timed "
               "steps; sim: simulated makespan / none's (unit costs, FLOP shares)\n";
  cluster->reset();
  std::filesystem::remove_all(root);
  return 0;
}

}  // namespace
}  // namespace pp::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return pp::bench::Main();
}
