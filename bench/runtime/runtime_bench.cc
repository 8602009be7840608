// Runtime figures, measured on a loopback cluster of the real binaries (ppcoord and
// ppworker processes, driven like a user would with ppctl):
//  (a) 1f1b, D=4, M=8: the measured idle fraction of a step (from `ppctl trace`) next to the
//      simulator's prediction under the per-action costs measured in the same run: mean F and B
//      of each stage, the mean time a rank spends inside a SEND (the cost model's send_overhead)
//      and the mean transfer latency of a message. Target: within 3 points.
//      Also printed: the share of time inside SEND actions.
//  (b) 1f1b, D=2, M=16: the pipeline's tokens/s against `ppctl train` (one process, one BLAS
//      thread) on the same model. Target >= 1.8x; 1F1B's bubble bounds it by 2 * M / (M + D - 1).
//      Control: two `ppctl train` at once, their summed tokens/s over one alone: what two busy
//      processes can get from the machine at that moment (2.0 on two idle cores).
// Idle fraction = 1 - sum(compute) / (D * span), span from the first action of any rank to the
// last (docs/architecture.md, "Words"); each rank's times count from its own step start (ranks leave the previous
// step's gradient-norm gather together, so the clocks line up to well under an action).
// Each part is repeated --repeats times; the median is printed last.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "coordinator/plan/plan.h"
#include "google/protobuf/util/json_util.h"
#include "pp/v1/schedule.pb.h"
#include "tests/support/cluster.h"
#include "tests/support/process.h"

ABSL_FLAG(std::string, bin_dir, "", "folder of ppcoord, ppworker, ppctl; default: this binary's");
ABSL_FLAG(std::string, part, "all", "bubble | speedup | all");
ABSL_FLAG(int32_t, repeats, 3, "runs of each part; the median is reported");
ABSL_FLAG(std::string, dir, "", "work folder (removed at the end); default: a fresh one in /tmp");

namespace pp::bench {
namespace {

using testing_support::Cluster;
using testing_support::CommandResult;
using testing_support::RunCommand;

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double Mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / v.size();
}

// The 1-minute load average: the machine is shared, so every figure says how busy it was.
std::string LoadAverage() {
  const std::vector<std::string> fields =
      absl::StrSplit(testing_support::ReadFile("/proc/loadavg"), ' ');
  return fields.empty() ? "?" : fields[0];
}

pp::v1::JobSpec Spec(const std::string& name, int d_model, int layers, int seq_len, int D, int M,
                     int B, int steps) {
  pp::v1::JobSpec spec;
  spec.set_name(name);
  pp::v1::ModelSpec* model = spec.mutable_model();
  model->set_vocab_size(256);
  model->set_seq_len(seq_len);
  model->set_d_model(d_model);
  model->set_n_heads(d_model / 32);
  model->set_n_layers(layers);
  spec.mutable_parallel()->set_pipeline(D);
  spec.mutable_parallel()->set_schedule("1f1b");
  pp::v1::TrainSpec* train = spec.mutable_train();
  train->set_steps(steps);
  train->set_microbatches(M);
  train->set_microbatch_size(B);
  train->set_lr(3e-4);
  train->set_weight_decay(0.1);
  train->set_grad_clip(1.0);
  train->set_seed(1);
  train->set_threads(1);
  spec.mutable_data()->set_format("generated");
  spec.mutable_data()->set_generated_tokens(1 << 20);
  spec.mutable_data()->set_generated_seed(5);
  return spec;
}

absl::StatusOr<std::unique_ptr<Cluster>> StartCluster(const std::string& dir, int workers) {
  testing_support::ClusterOptions options;
  options.bin_dir = absl::GetFlag(FLAGS_bin_dir);
  options.dir = dir;
  absl::StatusOr<std::unique_ptr<Cluster>> cluster = Cluster::Start(options);
  if (!cluster.ok()) return cluster.status();
  if (absl::Status s = (*cluster)->AddWorkers(workers); !s.ok()) return s;
  return cluster;
}

// Runs `spec` on the cluster to its end; every event from submission on.
absl::StatusOr<std::vector<pp::v1::JobEvent>> RunJob(Cluster& cluster, const pp::v1::JobSpec& spec,
                                                     std::string* job_id) {
  absl::StatusOr<std::string> id = testing_support::SubmitJob(cluster.stub(), spec);
  if (!id.ok()) return id.status();
  *job_id = *id;
  absl::StatusOr<std::unique_ptr<testing_support::JobWatch>> watch =
      testing_support::JobWatch::Open(cluster.stub(), *id, absl::Minutes(10));
  if (!watch.ok()) return watch.status();
  absl::StatusOr<std::vector<pp::v1::JobEvent>> events = (*watch)->Rest();
  if (!events.ok()) return events.status();
  if (events->back().kind() != pp::v1::EVENT_FINISHED) {
    return absl::InternalError(
        absl::StrCat("job ", *id, " ended: ", events->back().message(), "\n", cluster.Logs()));
  }
  return events;
}

// ---- (a) measured vs simulated idle fraction ----

struct StepCosts {
  std::vector<std::vector<double>> forward, backward;  // per stage: durations
  std::vector<double> transfer;                        // per message whose receiver waited
  double compute = 0;                                  // sum over ranks
  double send = 0;  // time inside SEND actions, sum over ranks
  int sends = 0;    // how many SEND actions
  double first = 1e300, last = 0;  // span of the step, all ranks
};

bool IsCompute(pp::v1::ActionKind kind) {
  return kind == pp::v1::FORWARD || kind == pp::v1::BACKWARD || kind == pp::v1::BACKWARD_INPUT ||
         kind == pp::v1::BACKWARD_WEIGHT;
}

// Per-action costs and the idle fraction of one traced step. A message is matched by the stage
// each end names (its own: SEND_ACTIVATION s -> RECV_ACTIVATION s+1, SEND_GRAD s -> RECV_GRAD
// s-1); its latency is counted only when the receiver was already waiting when it was sent.
StepCosts Measure(const pp::v1::StepTrace& trace, int S) {
  StepCosts c;
  c.forward.resize(S);
  c.backward.resize(S);
  std::map<std::tuple<int, int, int>, const pp::v1::TimedAction*> sends, recvs;
  for (const pp::v1::RankTrace& rank : trace.ranks()) {
    for (const pp::v1::TimedAction& t : rank.actions()) {
      const pp::v1::Action& a = t.action();
      const double took = t.end() - t.start();
      c.first = std::min(c.first, t.start());
      c.last = std::max(c.last, t.end());
      if (IsCompute(a.kind())) c.compute += took;
      if (a.kind() == pp::v1::SEND_ACTIVATION || a.kind() == pp::v1::SEND_GRAD) {
        c.send += took;
        ++c.sends;
      }
      if (a.kind() == pp::v1::FORWARD) c.forward[a.stage()].push_back(took);
      if (a.kind() == pp::v1::BACKWARD) c.backward[a.stage()].push_back(took);
      if (a.kind() == pp::v1::SEND_ACTIVATION) sends[{0, a.stage() + 1, a.microbatch()}] = &t;
      if (a.kind() == pp::v1::SEND_GRAD) sends[{1, a.stage() - 1, a.microbatch()}] = &t;
      if (a.kind() == pp::v1::RECV_ACTIVATION) recvs[{0, a.stage(), a.microbatch()}] = &t;
      if (a.kind() == pp::v1::RECV_GRAD) recvs[{1, a.stage(), a.microbatch()}] = &t;
    }
  }
  for (const auto& [key, send] : sends) {
    auto it = recvs.find(key);
    // The simulator's message leaves at the end of its SEND: latency counts from there.
    if (it == recvs.end() || it->second->start() > send->end()) continue;
    c.transfer.push_back(std::max(0.0, it->second->end() - send->end()));
  }
  return c;
}

absl::StatusOr<pp::v1::StepTrace> PpctlTrace(const Cluster& cluster, const std::string& job,
                                             int step) {
  absl::StatusOr<CommandResult> run =
      RunCommand({cluster.ppctl(), "--coordinator=" + cluster.coordinator().grpc, "trace", job,
                  absl::StrCat("--step=", step), "--format=json"},
                 absl::Seconds(30));
  if (!run.ok()) return run.status();
  if (run->exit_code != 0) return absl::InternalError("ppctl trace: " + run->err);
  pp::v1::StepTrace trace;
  if (!google::protobuf::util::JsonStringToMessage(run->out, &trace).ok()) {
    return absl::InternalError("ppctl trace printed no StepTrace JSON");
  }
  return trace;
}

struct BubbleFigures {
  double measured = 0, simulated = 0;
  double in_sends = 0;  // share of the measured idle time spent inside SEND actions
};

// The simulator takes one F and one B plus a per-stage multiplier of both: F and B are the means
// over stages, stage s's multiplier is (F_s + B_s) / (F + B); comm is the mean latency; a SEND
// keeps its rank busy for the mean measured SEND time.
pp::v1::CostModel CostsOf(const StepCosts& c) {
  const int S = static_cast<int>(c.forward.size());
  std::vector<double> f(S), b(S);
  for (int s = 0; s < S; ++s) {
    f[s] = Mean(c.forward[s]);
    b[s] = Mean(c.backward[s]);
  }
  pp::v1::CostModel costs;
  costs.set_forward(Mean(f));
  costs.set_backward(Mean(b));
  costs.set_comm_latency(Mean(c.transfer));
  costs.set_send_overhead(c.sends > 0 ? c.send / c.sends : 0);
  for (int s = 0; s < S; ++s) costs.add_stage_scale((f[s] + b[s]) / (Mean(f) + Mean(b)));
  return costs;
}

// Each measured step next to the simulation under that step's own costs (the machine is shared:
// costs drift from step to step); the run's figures are the medians over its steps.
absl::StatusOr<BubbleFigures> BubbleOnce(const std::string& dir, int repeat) {
  constexpr int kD = 4, kM = 8, kSteps = 8, kWarmup = 2;
  const pp::v1::JobSpec spec = Spec("bubble", 128, 6, 64, kD, kM, 2, kSteps);
  absl::StatusOr<std::unique_ptr<Cluster>> cluster = StartCluster(dir, kD);
  if (!cluster.ok()) return cluster.status();
  std::string job;
  absl::StatusOr<std::vector<pp::v1::JobEvent>> events = RunJob(**cluster, spec, &job);
  if (!events.ok()) return events.status();

  std::vector<double> measured, simulated, in_sends, f, b, comm;
  for (int step = kWarmup + 1; step <= kSteps; ++step) {
    absl::StatusOr<pp::v1::StepTrace> trace = PpctlTrace(**cluster, job, step);
    if (!trace.ok()) return trace.status();
    const StepCosts c = Measure(*trace, kD);
    const pp::v1::CostModel costs = CostsOf(c);
    absl::StatusOr<pp::v1::Schedule> plan = plan::PlanSchedule("1f1b", kD, 1, kM, costs);
    if (!plan.ok()) return plan.status();
    measured.push_back(1 - c.compute / (kD * (c.last - c.first)));
    in_sends.push_back(c.send / (kD * (c.last - c.first)));
    simulated.push_back(plan->simulation().bubble_fraction());
    f.push_back(costs.forward());
    b.push_back(costs.backward());
    comm.push_back(costs.comm_latency());
  }
  BubbleFigures out{Median(measured), Median(simulated), Median(in_sends)};
  std::cout << absl::StrFormat(
      "  run %d (load %s): mean F %.2f ms, B %.2f ms, comm %.2f ms; measured idle %.1f%%, "
      "simulated %.1f%%, gap %+.1f points, in SEND actions %.1f points (medians of steps %d-%d)\n",
      repeat, LoadAverage(), 1e3 * Median(f), 1e3 * Median(b), 1e3 * Median(comm),
      100 * out.measured, 100 * out.simulated, 100 * (out.measured - out.simulated),
      100 * out.in_sends, kWarmup + 1, kSteps);
  return out;
}

// ---- (b) pipeline vs single process ----

// Tokens per second of the steps after the first: tokens of a step over the time between the
// coordinator's consecutive step events.
double PipelineTokensPerSecond(const std::vector<pp::v1::JobEvent>& events, double tokens) {
  std::vector<double> rates;
  double previous = 0;
  for (const pp::v1::JobEvent& e : events) {
    if (e.kind() != pp::v1::EVENT_STEP) continue;
    if (e.step() >= 2 && previous > 0) rates.push_back(tokens / (e.time_unix() - previous));
    previous = e.time_unix();
  }
  return Median(rates);
}

// `ppctl train` prints "step k/N loss L grad_norm G S s R tok/s"; the median R after step 1.
absl::StatusOr<double> TrainerTokensPerSecond(const std::string& out) {
  std::vector<double> rates;
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
    const std::vector<absl::string_view> w = absl::StrSplit(line, ' ', absl::SkipEmpty());
    double rate = 0;
    if (w.size() >= 10 && w[0] == "step" && !absl::StartsWith(w[1], "1/") && w[9] == "tok/s" &&
        absl::SimpleAtod(w[8], &rate)) {
      rates.push_back(rate);
    }
  }
  if (rates.empty()) return absl::InternalError("ppctl train printed no step lines:\n" + out);
  return Median(rates);
}

struct SpeedupFigures {
  double pipeline = 0, single = 0;
  double capacity = 0;  // two trainers at once: their summed tokens/s over one alone
};

absl::StatusOr<double> TrainOnce(const std::string& file) {
  absl::StatusOr<CommandResult> run = RunCommand(
      {absl::GetFlag(FLAGS_bin_dir) + "/ppctl", "train", file, "--threads=1"}, absl::Minutes(10));
  if (!run.ok()) return run.status();
  if (run->exit_code != 0) return absl::InternalError("ppctl train: " + run->err);
  return TrainerTokensPerSecond(run->out);
}

absl::StatusOr<SpeedupFigures> SpeedupOnce(const std::string& dir, int repeat) {
  constexpr int kD = 2, kM = 16, kB = 1, kT = 128, kSteps = 5;
  const pp::v1::JobSpec spec = Spec("speedup", 256, 6, kT, kD, kM, kB, kSteps);
  SpeedupFigures out;
  {
    absl::StatusOr<std::unique_ptr<Cluster>> cluster = StartCluster(dir + "/cluster", kD);
    if (!cluster.ok()) return cluster.status();
    std::string job;
    absl::StatusOr<std::vector<pp::v1::JobEvent>> events = RunJob(**cluster, spec, &job);
    if (!events.ok()) return events.status();
    out.pipeline = PipelineTokensPerSecond(*events, double{kM} * kB * kT);
  }
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(spec, &json);
  const std::string file = dir + "/speedup.json";
  std::ofstream(file) << json;
  absl::StatusOr<double> single = TrainOnce(file);
  if (!single.ok()) return single.status();
  out.single = *single;
  // Control: what two busy processes get from this (shared) machine right now.
  absl::StatusOr<double> other;
  std::thread second([&] { other = TrainOnce(file); });
  absl::StatusOr<double> first = TrainOnce(file);
  second.join();
  if (!first.ok()) return first.status();
  if (!other.ok()) return other.status();
  out.capacity = (*first + *other) / out.single;
  std::cout << absl::StrFormat(
      "  run %d (load %s): pipeline %.0f tok/s, single process %.0f tok/s: %.2fx; two single "
      "processes at once: %.2fx\n",
      repeat, LoadAverage(), out.pipeline, out.single, out.pipeline / out.single, out.capacity);
  return out;
}

// The figures of runs 1..repeats of `once` (in <root>/<part>-<run>); a failed run is printed and
// counted in `failed`.
template <typename Figures>
std::vector<Figures> Runs(const std::string& part, const std::string& root, int repeats,
                          absl::StatusOr<Figures> (*once)(const std::string&, int), int* failed) {
  std::vector<Figures> runs;
  for (int r = 1; r <= repeats; ++r) {
    absl::StatusOr<Figures> f = once(absl::StrCat(root, "/", part, "-", r), r);
    if (f.ok()) {
      runs.push_back(*f);
    } else {
      std::cerr << part << " run " << r << ": " << f.status() << "\n";
      ++*failed;
    }
  }
  return runs;
}

// The median over `runs` of `figure` (a member or a function of one run's figures).
template <typename Figures, typename Figure>
double MedianOf(const std::vector<Figures>& runs, Figure figure) {
  std::vector<double> values;
  for (const Figures& run : runs) values.push_back(std::invoke(figure, run));
  return Median(values);
}

int Main() {
  if (absl::GetFlag(FLAGS_bin_dir).empty()) {
    absl::SetFlag(&FLAGS_bin_dir,
                  std::filesystem::read_symlink("/proc/self/exe").parent_path().string());
  }
  std::string root = absl::GetFlag(FLAGS_dir);
  if (root.empty()) root = absl::StrCat("/tmp/pp_runtime_bench_", ::getpid());
  const std::string part = absl::GetFlag(FLAGS_part);
  const int repeats = absl::GetFlag(FLAGS_repeats);
  if (part != "all" && part != "bubble" && part != "speedup") {
    std::cerr << "runtime_bench: --part must be bubble, speedup or all, got " << part << "\n";
    return 2;
  }
  int failed = 0;
  if (part != "speedup") {
    std::cout << "(a) 1f1b D=4 M=8, C=128 6 layers T=64 B=2, 4 ppworker processes:\n";
    const std::vector<BubbleFigures> runs =
        Runs<BubbleFigures>("bubble", root, repeats, BubbleOnce, &failed);
    const double measured = MedianOf(runs, &BubbleFigures::measured);
    const double simulated = MedianOf(runs, &BubbleFigures::simulated);
    std::cout << absl::StrFormat(
        "  median: measured idle %.1f%%, simulated %.1f%%, gap %.1f points (target <= 3); "
        "in SEND actions %.1f points\n",
        100 * measured, 100 * simulated, 100 * std::abs(measured - simulated),
        100 * MedianOf(runs, &BubbleFigures::in_sends));
  }
  if (part != "bubble") {
    std::cout << "(b) 1f1b D=2 M=16, C=256 6 layers T=128 B=1: 2 ppworker processes vs "
                 "ppctl train --threads=1:\n";
    const std::vector<SpeedupFigures> runs =
        Runs<SpeedupFigures>("speedup", root, repeats, SpeedupOnce, &failed);
    std::cout << absl::StrFormat(
        "  median: pipeline %.0f tok/s, single process %.0f tok/s, speedup %.2fx (target >= "
        "1.8x, bubble bound %.2fx); two single processes at once %.2fx\n",
        MedianOf(runs, &SpeedupFigures::pipeline), MedianOf(runs, &SpeedupFigures::single),
        MedianOf(runs, [](const SpeedupFigures& f) { return f.pipeline / f.single; }),
        2.0 * 16 / (16 + 2 - 1), MedianOf(runs, &SpeedupFigures::capacity));
  }
  std::filesystem::remove_all(root);
  return failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace pp::bench

int main(int argc, char** argv) {
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    std::cerr << "runtime_bench: unexpected argument " << rest[1] << "\n";
    return 2;
  }
  return pp::bench::Main();
}
