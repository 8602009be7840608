// memory_bench: the memory model (coordinator/plan/memory.h) against the real thing. For each
// layout it starts a fresh loopback cluster of the real binaries (ppcoord + one ppworker process
// per rank, one BLAS thread each), asks PlanJob for every rank's estimate, runs the job to its end
// and reads each worker's peak resident set (VmHWM in /proc/PID/status) before the cluster stops.
// Prints one line per rank: estimate, measured, measured / estimate.
//   build/bin/memory_bench [--layouts=tiny,1f1b,gpipe,interleaved,dp2] [--dir=DIR]
// "tiny" (d_model 32) measures the fixed per-process baseline: its line shows measured minus the
// model's share, the figure kProcessBaselineBytes is taken from.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "coordinator/plan/plan.h"
#include "grpcpp/grpcpp.h"
#include "tests/support/cluster.h"

ABSL_FLAG(std::string, bin_dir, "", "folder of ppcoord, ppworker, ppctl; default: this binary's");
ABSL_FLAG(std::string, dir, "", "work folder; default /tmp/pp_memory_bench_<pid>");
ABSL_FLAG(std::string, layouts, "tiny,1f1b,gpipe,interleaved,dp2",
          "comma-separated: tiny | 1f1b | gpipe | interleaved | dp2");

namespace pp::bench {
namespace {

using testing_support::Cluster;

struct Layout {
  std::string name;
  std::string schedule;
  int pipeline = 1, chunks = 1, data = 1;
  int d_model = 256, layers = 4;
};

const std::map<std::string, Layout>& Layouts() {
  static const auto* layouts = new std::map<std::string, Layout>{
      {"tiny", {"tiny", "1f1b", 2, 1, 1, 32, 2}},
      {"1f1b", {"1f1b", "1f1b", 2, 1, 1, 256, 4}},
      {"gpipe", {"gpipe", "gpipe", 2, 1, 1, 256, 4}},
      {"interleaved", {"interleaved", "interleaved-1f1b", 2, 2, 1, 256, 4}},
      {"dp2", {"dp2", "1f1b", 1, 1, 2, 256, 4}},
  };
  return *layouts;
}

// T = 128, B = 4, M = 4: a block's saved activations are ~9 MiB per microbatch at C = 256.
pp::v1::JobSpec SpecOf(const Layout& layout) {
  pp::v1::JobSpec spec;
  spec.set_name(absl::StrCat("memory-", layout.name));
  pp::v1::ModelSpec* model = spec.mutable_model();
  model->set_vocab_size(256);
  model->set_seq_len(128);
  model->set_d_model(layout.d_model);
  model->set_n_heads(layout.d_model / 32);
  model->set_n_layers(layout.layers);
  pp::v1::ParallelSpec* p = spec.mutable_parallel();
  p->set_pipeline(layout.pipeline);
  p->set_chunks(layout.chunks);
  p->set_data(layout.data);
  p->set_schedule(layout.schedule);
  pp::v1::TrainSpec* train = spec.mutable_train();
  train->set_steps(2);
  train->set_microbatches(4);
  train->set_microbatch_size(4);
  train->set_lr(3e-4);
  train->set_seed(1);
  train->set_threads(1);
  spec.mutable_data()->set_format("generated");
  spec.mutable_data()->set_generated_tokens(1 << 16);
  spec.mutable_data()->set_generated_seed(5);
  return spec;
}

// VmHWM of `pid` in bytes.
absl::StatusOr<int64_t> PeakRss(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) != 0) continue;
    std::vector<std::string> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
    int64_t kib = 0;
    if (parts.size() >= 2 && absl::SimpleAtoi(parts[1], &kib)) return kib * 1024;
  }
  return absl::NotFoundError(absl::StrCat("no VmHWM for pid ", pid));
}

absl::StatusOr<pp::v1::PlanJobResponse> PlanOf(Cluster& cluster, const pp::v1::JobSpec& spec) {
  pp::v1::PlanJobRequest request;
  *request.mutable_spec() = spec;
  pp::v1::PlanJobResponse response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  const grpc::Status status = cluster.stub().PlanJob(&context, request, &response);
  if (!status.ok()) return absl::InternalError(status.error_message());
  return response;
}

// Runs `layout` on a fresh cluster; prints its lines; the worst |ratio - 1|.
absl::StatusOr<double> RunLayout(const Layout& layout, const std::string& dir) {
  const pp::v1::JobSpec spec = SpecOf(layout);
  const int world = layout.pipeline * layout.data;
  testing_support::ClusterOptions options;
  options.bin_dir = absl::GetFlag(FLAGS_bin_dir);
  options.dir = dir;
  absl::StatusOr<std::unique_ptr<Cluster>> cluster = Cluster::Start(options);
  if (!cluster.ok()) return cluster.status();
  if (absl::Status s = (*cluster)->AddWorkers(world); !s.ok()) return s;
  absl::StatusOr<pp::v1::PlanJobResponse> plan = PlanOf(**cluster, spec);
  if (!plan.ok()) return plan.status();
  absl::StatusOr<std::string> id = testing_support::SubmitJob((*cluster)->stub(), spec);
  if (!id.ok()) return id.status();
  absl::StatusOr<pp::v1::Job> done =
      testing_support::WaitSucceeded((*cluster)->stub(), *id, absl::Minutes(10));
  if (!done.ok()) return absl::InternalError(absl::StrCat(done.status().message(), (*cluster)->Logs()));
  double worst = 0;
  for (const pp::v1::RankPlacement& p : done->placement()) {
    const pp::v1::RankMemory& m = plan->memory(p.rank());
    absl::StatusOr<int64_t> rss = PeakRss((*cluster)->worker(p.worker()).pid());
    if (!rss.ok()) return rss.status();
    const double ratio = static_cast<double>(*rss) / static_cast<double>(m.total());
    std::cout << absl::StrFormat(
        "%-12s %-17s %d %2d  %3d/%d/%d  %10s %10s %10s %10s %10s  %6.3f", layout.name,
        layout.schedule, layout.pipeline, layout.chunks, p.pp(), p.dp(), p.tp(),
        plan::FormatBytes(m.parameters() * 4), plan::FormatBytes(m.activations()),
        plan::FormatBytes(m.checkpoint()), plan::FormatBytes(m.total()),
        plan::FormatBytes(*rss), ratio);
    if (layout.name == "tiny") {
      std::cout << absl::StrFormat("  baseline measured %s",
                                   plan::FormatBytes(*rss - (m.total() - m.baseline())));
    }
    std::cout << "\n";
    if (layout.name != "tiny") worst = std::max(worst, std::abs(ratio - 1));
  }
  return worst;
}

int Main() {
  if (absl::GetFlag(FLAGS_bin_dir).empty()) {
    absl::SetFlag(&FLAGS_bin_dir,
                  std::filesystem::read_symlink("/proc/self/exe").parent_path().string());
  }
  std::string root = absl::GetFlag(FLAGS_dir);
  if (root.empty()) root = absl::StrCat("/tmp/pp_memory_bench_", ::getpid());
  std::cout << absl::StrFormat(
      "%-12s %-17s D  V  pp/dp/tp  %10s %10s %10s %10s %10s  %6s\n", "layout", "schedule",
      "state/4", "activ.", "ckpt", "estimate", "VmHWM", "ratio");
  double worst = 0;
  int failed = 0;
  const std::vector<std::string> names =
      absl::StrSplit(absl::GetFlag(FLAGS_layouts), ',', absl::SkipEmpty());
  for (const std::string& name : names) {
    auto it = Layouts().find(name);
    if (it == Layouts().end()) {
      std::cerr << "memory_bench: unknown layout " << name << "\n";
      return 2;
    }
    const std::string dir = absl::StrCat(root, "/", name);
    std::filesystem::remove_all(dir);
    absl::StatusOr<double> off = RunLayout(it->second, dir);
    if (!off.ok()) {
      std::cerr << "memory_bench: " << name << ": " << off.status() << "\n";
      ++failed;
      continue;
    }
    worst = std::max(worst, *off);
  }
  std::filesystem::remove_all(root);
  std::cout << absl::StrFormat("worst |VmHWM / estimate - 1| = %.1f%% (target: within 15%%)\n",
                               100 * worst);
  return failed > 0 ? 1 : 0;
}

}  // namespace
}  // namespace pp::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return pp::bench::Main();
}
