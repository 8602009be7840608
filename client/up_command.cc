// `ppctl up`: a whole local cluster in one command (the embedded default). Starts ppcoord and
// --workers ppworker processes on loopback (binaries next to ppctl's own executable, free ports,
// address files), waits until every worker registered, submits a job (--job, or a small GPT on a
// text every Debian machine has), shows its progress, then prints a summary (loss, tokens/s,
// measured and simulated bubble, the measured timeline of the last step) and writes that step's
// Chrome trace. Every process it starts is stopped and reaped before it returns: at the end, on
// SIGINT/SIGTERM/SIGHUP (exit 128 + signal), and through PR_SET_PDEATHSIG if ppctl itself dies.
#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/command.h"
#include "common/file_io.h"
#include "common/job_spec.h"
#include "coordinator/plan/convert.h"
#include "coordinator/plan/render.h"
#include "coordinator/plan/simulate.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "pp/v1/coordinator.grpc.pb.h"

ABSL_FLAG(int32_t, workers, 2, "N: ppworker processes to start, one pipeline rank each (1..64)");
ABSL_FLAG(std::string, job, "",
          "job spec FILE (proto3 JSON or text) to run instead of the embedded default (a small "
          "GPT on /usr/share/common-licenses/GPL-3, 1f1b over all N workers, 300 steps); it "
          "must fit on N workers");
ABSL_FLAG(std::string, data_dir, "",
          "keep the job store, checkpoints (<DIR>/checkpoints/<job>/step-<N>/), the daemons' logs "
          "and address files (<DIR>/ppctl-up/) and the Chrome trace here; default: a temporary "
          "folder removed at exit");
ABSL_FLAG(std::string, chrome_trace, "",
          "where to write the Chrome trace of the last step; default <DIR>/<job>.trace.json, or "
          "$TMPDIR/ppctl-up-<job>.trace.json without --data_dir");
ABSL_FLAG(absl::Duration, startup_timeout, absl::Seconds(30),
          "how long the daemons may take to serve and the workers to register");

namespace pp::client {
namespace {

constexpr int kOk = 0;
constexpr int kFailed = 1;
constexpr int kUsage = 2;
constexpr int kMaxWorkers = 64;
constexpr char kDefaultCorpus[] = "/usr/share/common-licenses/GPL-3";

// The embedded default: about two minutes on two cores, and the loss falls from ln(256) = 5.55 to
// about 1.6 (a byte-level model learns the letters and the common words of the licence).
pp::v1::JobSpec DefaultSpec(int workers) {
  pp::v1::JobSpec spec;
  spec.set_name("up");
  pp::v1::ModelSpec* model = spec.mutable_model();
  model->set_vocab_size(256);
  model->set_seq_len(128);
  model->set_d_model(128);
  model->set_n_heads(4);
  model->set_n_layers(std::max(4, workers));
  pp::v1::ParallelSpec* parallel = spec.mutable_parallel();
  parallel->set_pipeline(workers);
  parallel->set_schedule("1f1b");
  pp::v1::TrainSpec* train = spec.mutable_train();
  train->set_steps(300);
  train->set_microbatches(std::max(8, 2 * workers));
  train->set_microbatch_size(4);
  train->set_lr(2e-3);
  train->set_weight_decay(0.1);
  train->set_grad_clip(1.0);
  train->set_seed(1);
  pp::v1::DataSpec* data = spec.mutable_data();
  if (access(kDefaultCorpus, R_OK) == 0) {
    data->set_path(kDefaultCorpus);
  } else {
    data->set_format("generated");  // text-like bytes, so the loss still falls
  }
  spec.mutable_checkpoint()->set_every_steps(100);
  spec.mutable_checkpoint()->set_keep(2);
  return spec;
}

// The job to run, defaulted and validated here so that a bad spec starts no process.
absl::StatusOr<pp::v1::JobSpec> LoadSpec(const std::string& path, int workers) {
  const std::string origin = path.empty() ? "the default job" : path;
  pp::v1::JobSpec spec;
  if (path.empty()) {
    spec = DefaultSpec(workers);
  } else {
    absl::StatusOr<pp::v1::JobSpec> loaded = pp::common::LoadJobSpec(path);
    if (!loaded.ok()) return absl::InvalidArgumentError(loaded.status().message());
    spec = *std::move(loaded);
  }
  if (!spec.data().path().empty()) {  // the daemons run elsewhere: give them an absolute path
    spec.mutable_data()->set_path(std::filesystem::absolute(spec.data().path()).string());
  }
  pp::v1::JobSpec defaulted = spec;
  pp::common::ApplyDefaults(&defaulted);
  if (absl::Status valid = pp::common::ValidateJobSpec(defaulted); !valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": ", valid.message()));
  }
  const pp::v1::ParallelSpec& p = defaulted.parallel();
  const int needed = p.pipeline() * p.tensor() * p.data();
  if (needed > workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        origin, " needs ", needed, " workers (parallel.pipeline x tensor x data = ", p.pipeline(),
        " x ", p.tensor(), " x ", p.data(), ") but --workers=", workers));
  }
  return spec;
}

// ppcoord and ppworker live next to ppctl (build/bin/, or an image's bin folder).
absl::StatusOr<std::filesystem::path> BinaryNextToMe(const std::string& name) {
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) {
    return absl::InternalError(absl::StrCat("cannot read /proc/self/exe: ", error.message()));
  }
  const std::filesystem::path binary = self.parent_path() / name;
  if (access(binary.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot find ", name, " next to ppctl (looked for ", binary.string(),
                     "); build every binary: cmake --build build"));
  }
  return binary;
}

// {"grpc":"h:p","metrics":"h:p"}, as ppcoord and ppworker write it with --address_file.
struct Addresses {
  std::string grpc, metrics;
};

std::optional<Addresses> ReadAddressFile(const std::string& path) {
  absl::StatusOr<std::string> text = pp::common::ReadFile(path);
  if (!text.ok()) return std::nullopt;
  google::protobuf::Struct parsed;
  if (!google::protobuf::util::JsonStringToMessage(*text, &parsed).ok()) return std::nullopt;
  const auto& fields = parsed.fields();
  if (!fields.contains("grpc") || !fields.contains("metrics")) return std::nullopt;
  return Addresses{fields.at("grpc").string_value(), fields.at("metrics").string_value()};
}

std::string TempRoot() {
  const char* tmp = std::getenv("TMPDIR");
  return tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
}

std::string LastLines(const std::string& path, int n) {
  absl::StatusOr<std::string> text = pp::common::ReadFile(path);
  if (!text.ok()) return "";
  std::vector<std::string> lines = absl::StrSplit(*text, '\n', absl::SkipEmpty());
  if (static_cast<int>(lines.size()) > n) lines.erase(lines.begin(), lines.end() - n);
  return absl::StrJoin(lines, "\n");
}

// The daemons, as child processes in one process group of their own: a Ctrl-C in the terminal
// reaches ppctl alone, which then stops them itself (bounded). Each child asks the kernel for
// SIGKILL when ppctl dies, so none outlives it even when ppctl is killed without a chance to
// clean up.
class LocalCluster {
 public:
  explicit LocalCluster(const sigset_t& child_signal_mask) : child_mask_(child_signal_mask) {}
  ~LocalCluster() { Stop(); }
  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;

  // Starts `binary args...` with stdout and stderr to `log`. `name` is for messages.
  absl::Status Start(const std::string& name, const std::string& binary,
                     const std::vector<std::string>& args, const std::string& log) {
    // Everything the child needs is prepared before fork: it only calls async-signal-safe code.
    std::vector<std::string> argv_strings = {binary};
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& s : argv_strings) argv.push_back(s.data());
    argv.push_back(nullptr);
    const int log_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log_fd < 0) {
      return absl::InternalError(absl::StrCat("cannot create ", log, ": ", strerror(errno)));
    }
    const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid == 0) {
      setpgid(0, group_);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);  // ppctl died before the line above
      dup2(null_fd, STDIN_FILENO);
      dup2(log_fd, STDOUT_FILENO);
      dup2(log_fd, STDERR_FILENO);
      sigprocmask(SIG_SETMASK, &child_mask_, nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    const int fork_errno = errno;
    close(log_fd);
    if (null_fd >= 0) close(null_fd);
    if (pid < 0) {
      return absl::InternalError(absl::StrCat("fork for ", name, ": ", strerror(fork_errno)));
    }
    setpgid(pid, group_);  // also here: whichever of parent and child runs first sets it
    if (group_ == 0) group_ = pid;
    children_.push_back({name, log, pid});
    return absl::OkStatus();
  }

  // A message naming the first daemon that exited on its own, if any did.
  std::optional<std::string> Exited() {
    Reap();
    for (const Child& c : children_) {
      if (c.pid > 0) continue;
      std::string how = WIFSIGNALED(c.status)
                            ? absl::StrCat("was killed by signal ", WTERMSIG(c.status))
                            : absl::StrCat("exited with code ", WEXITSTATUS(c.status));
      std::string message = absl::StrCat(c.name, " ", how, " (log ", c.log, ")");
      if (std::string tail = LastLines(c.log, 5); !tail.empty()) {
        absl::StrAppend(&message, ":\n", tail);
      }
      return message;
    }
    return std::nullopt;
  }

  // SIGTERM to all, then SIGKILL to whatever still runs after `grace`; returns once every child
  // is reaped (SIGKILL cannot be ignored, so the second wait is short). Signals go to the pids:
  // a child not yet reaped keeps its pid, so no other process can be hit.
  void Stop(absl::Duration grace = absl::Seconds(5)) {
    for (int sig : {SIGTERM, SIGKILL}) {
      if (!Running()) return;
      for (const Child& c : children_) {
        if (c.pid > 0) kill(c.pid, sig);
      }
      const absl::Time deadline = absl::Now() + grace;
      while (Running() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
    }
  }

  int size() const { return static_cast<int>(children_.size()); }

 private:
  struct Child {
    std::string name, log;
    pid_t pid;  // 0 once reaped
    int status = 0;
  };

  void Reap() {
    for (Child& c : children_) {
      if (c.pid > 0 && waitpid(c.pid, &c.status, WNOHANG) == c.pid) c.pid = 0;
    }
  }

  bool Running() {
    Reap();
    return std::any_of(children_.begin(), children_.end(),
                       [](const Child& c) { return c.pid > 0; });
  }

  sigset_t child_mask_;
  pid_t group_ = 0;  // the first child's pid: the group every child joins
  std::vector<Child> children_;
};

// A folder that is removed when this goes away, unless it was given to keep.
class WorkDir {
 public:
  static absl::StatusOr<WorkDir> Open(const std::string& keep) {
    if (!keep.empty()) {
      if (absl::Status made = pp::common::MakeDirs(keep); !made.ok()) return made;
      return WorkDir(std::filesystem::absolute(keep).string(), false);
    }
    std::string pattern = TempRoot() + "/ppctl-up-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      return absl::InternalError(
          absl::StrCat("cannot create a temporary folder ", pattern, ": ", strerror(errno)));
    }
    return WorkDir(pattern, true);
  }
  WorkDir(WorkDir&& other) noexcept : path_(other.path_), remove_(other.remove_) {
    other.remove_ = false;
  }
  ~WorkDir() {
    std::error_code ignored;
    if (remove_) std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }
  bool temporary() const { return remove_; }

 private:
  WorkDir(std::string path, bool remove) : path_(std::move(path)), remove_(remove) {}
  std::string path_;
  bool remove_;
};

// Events of the job, as the watch thread receives them.
struct WatchState {
  absl::Mutex mu;
  std::vector<pp::v1::JobEvent> events ABSL_GUARDED_BY(mu);
  bool ended ABSL_GUARDED_BY(mu) = false;
  grpc::Status status ABSL_GUARDED_BY(mu);
};

std::string SignalName(int signal) {
  switch (signal) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    default:
      return absl::StrCat("signal ", signal);
  }
}

// "1:02:03" or "2:03".
std::string Clock(double seconds) {
  const int64_t s = static_cast<int64_t>(std::max(0.0, seconds) + 0.5);
  if (s >= 3600) return absl::StrFormat("%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60);
  return absl::StrFormat("%d:%02d", s / 60, s % 60);
}

std::string EventName(const pp::v1::JobEvent& e) {
  return pp::v1::JobEventKind_Name(e.kind()).substr(6);  // without "EVENT_"
}

// `up-1  step  42/300 [####................]  loss 3.1234  9321 tok/s  bubble 23.0%  ETA 1:32`;
// `first` is the job's first step event (for the ETA), if one came yet.
std::string ProgressLine(const pp::v1::JobEvent& e, const pp::v1::JobEvent* first) {
  constexpr int kBar = 20;
  const int total = std::max(1, e.total_steps());
  const int filled = std::min(kBar, kBar * e.step() / total);
  const int digits = static_cast<int>(absl::StrCat(total).size());
  std::string line = absl::StrFormat("%s  step %*d/%d [%s%s]", e.job_id(), digits, e.step(), total,
                                     std::string(filled, '#'), std::string(kBar - filled, '.'));
  if (e.step() > 0) {
    absl::StrAppendFormat(&line, "  loss %.4f  %.0f tok/s  bubble %.1f%%", e.loss(),
                          e.tokens_per_second(), 100 * e.bubble_ratio());
  }
  if (first != nullptr && e.step() > first->step() && e.step() < total) {
    const double per_step = (e.time_unix() - first->time_unix()) / (e.step() - first->step());
    absl::StrAppend(&line, "  ETA ", Clock(per_step * (total - e.step())));
  }
  return line;
}

// Measured per-stage compute costs of one step, as the simulator's cost model: mean F and B (or
// I and W) over stages, each stage scaled by its share; communication free.
absl::StatusOr<double> BubbleWithMeasuredCosts(const pp::v1::Schedule& schedule,
                                               const pp::v1::StepTrace& trace) {
  absl::StatusOr<pp::plan::Schedule> plain = pp::plan::ScheduleFromProto(schedule);
  if (!plain.ok()) return plain.status();
  const int S = static_cast<int>(plain->stage_to_rank.size());
  // Per stage, per kind: total seconds and count.
  std::map<std::pair<int, pp::plan::Kind>, std::pair<double, int>> sums;
  for (const pp::v1::RankTrace& rank : trace.ranks()) {
    for (const pp::v1::TimedAction& t : rank.actions()) {
      const pp::plan::Action a = pp::plan::ActionFromProto(t.action());
      if (pp::plan::IsComm(a.kind) || a.stage < 0 || a.stage >= S) continue;
      auto& [seconds, count] = sums[{a.stage, a.kind}];
      seconds += t.end() - t.start();
      ++count;
    }
  }
  auto mean = [&](int stage, pp::plan::Kind kind) {
    auto it = sums.find({stage, kind});
    return it == sums.end() ? 0.0 : it->second.first / it->second.second;
  };
  std::vector<double> forward(S), backward(S), input(S), weight(S);
  double f = 0, b = 0, i = 0, w = 0;
  for (int s = 0; s < S; ++s) {
    forward[s] = mean(s, pp::plan::Kind::kForward);
    input[s] = mean(s, pp::plan::Kind::kBackwardInput);
    weight[s] = mean(s, pp::plan::Kind::kBackwardWeight);
    backward[s] = mean(s, pp::plan::Kind::kBackward) + input[s] + weight[s];
    f += forward[s] / S;
    b += backward[s] / S;
    i += input[s] / S;
    w += weight[s] / S;
  }
  if (f <= 0 || b <= 0) return absl::NotFoundError("the trace has no forward or backward times");
  pp::plan::CostModel costs;
  costs.forward = f;
  costs.backward = b;
  costs.backward_input = i;
  costs.backward_weight = w;
  for (int s = 0; s < S; ++s) costs.stage_scale.push_back((forward[s] + backward[s]) / (f + b));
  absl::StatusOr<pp::plan::Simulation> simulation = pp::plan::Simulate(*plain, costs);
  if (!simulation.ok()) return simulation.status();
  return simulation->bubble_fraction;
}

class Up {
 public:
  Up(const sigset_t& stop_signals, const sigset_t& child_mask)
      : stop_signals_(stop_signals), cluster_(child_mask) {}

  int Run() {
    const int workers = absl::GetFlag(FLAGS_workers);
    if (workers < 1 || workers > kMaxWorkers) {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("--workers must be 1..", kMaxWorkers, ", got ", workers)));
    }
    absl::StatusOr<pp::v1::JobSpec> spec = LoadSpec(absl::GetFlag(FLAGS_job), workers);
    if (!spec.ok()) return Fail(spec.status());
    absl::StatusOr<std::filesystem::path> ppcoord = BinaryNextToMe("ppcoord");
    if (!ppcoord.ok()) return Fail(ppcoord.status());
    absl::StatusOr<std::filesystem::path> ppworker = BinaryNextToMe("ppworker");
    if (!ppworker.ok()) return Fail(ppworker.status());
    absl::StatusOr<WorkDir> dir = WorkDir::Open(absl::GetFlag(FLAGS_data_dir));
    if (!dir.ok()) return Fail(dir.status());

    absl::Status status = StartCluster(dir->path(), *ppcoord, *ppworker, workers);
    if (status.ok()) status = RunJob(*spec);
    if (status.ok()) status = Summarize(*dir);
    watch_context_.TryCancel();
    if (watcher_.joinable()) watcher_.join();
    const int stopped = cluster_.size();
    cluster_.Stop();
    if (stopped > 0) {
      std::cout << "stopped ppcoord and " << stopped - 1 << " worker(s)"
                << (dir->temporary() ? "; removed " + dir->path() : "") << "\n";
    }
    if (stop_signal_ != 0) {
      std::cerr << "ppctl up: " << status.message() << "\n";
      return 128 + stop_signal_;
    }
    return Fail(status);
  }

 private:
  int Fail(const absl::Status& status) {
    if (status.ok()) return kOk;
    std::cerr << "ppctl up: " << status.message() << "\n";
    return absl::IsInvalidArgument(status) ? kUsage : kFailed;
  }

  // Waits until done() holds. Ends early with an error when a stop signal arrives (Cancelled),
  // a daemon exits (Unavailable, naming it) or `timeout` passes (DeadlineExceeded, naming what).
  absl::Status WaitFor(const std::string& what, absl::Duration timeout,
                       const std::function<bool()>& done) {
    const absl::Time deadline = absl::Now() + timeout;
    while (!done()) {
      if (std::optional<std::string> exited = cluster_.Exited()) {
        return absl::UnavailableError(absl::StrCat("while waiting for ", what, ": ", *exited));
      }
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("no ", what, " within ", absl::FormatDuration(timeout)));
      }
      const timespec tick = {0, 50'000'000};
      const int signal = sigtimedwait(&stop_signals_, nullptr, &tick);
      if (signal > 0) {
        stop_signal_ = signal;
        return absl::CancelledError(
            absl::StrCat("interrupted by ", SignalName(signal), "; stopped the cluster"));
      }
    }
    return absl::OkStatus();
  }

  absl::Status StartCluster(const std::string& data_dir, const std::string& ppcoord,
                            const std::string& ppworker, int workers) {
    const std::string run_dir = data_dir + "/ppctl-up";
    if (absl::Status made = pp::common::MakeDirs(run_dir); !made.ok()) return made;
    const absl::Duration timeout = absl::GetFlag(FLAGS_startup_timeout);
    auto address_file = [&](const std::string& name) { return run_dir + "/" + name + ".json"; };
    auto log_file = [&](const std::string& name) { return run_dir + "/" + name + ".log"; };
    std::vector<std::string> names = {"ppcoord"};
    for (int i = 0; i < workers; ++i) names.push_back(absl::StrCat("w", i));
    for (const std::string& name : names) {  // left by an earlier run in the same folder
      std::filesystem::remove(address_file(name));
    }

    absl::Status started =
        cluster_.Start("ppcoord", ppcoord,
                       {"--grpc=127.0.0.1:0", "--metrics=127.0.0.1:0", "--data_dir=" + data_dir,
                        "--address_file=" + address_file("ppcoord")},
                       log_file("ppcoord"));
    if (!started.ok()) return started;
    std::map<std::string, Addresses> addresses;
    auto serving = [&](const std::string& name) {
      if (addresses.contains(name)) return true;
      std::optional<Addresses> a = ReadAddressFile(address_file(name));
      if (a.has_value()) addresses[name] = *a;
      return a.has_value();
    };
    if (absl::Status s =
            WaitFor("address file from ppcoord", timeout, [&] { return serving("ppcoord"); });
        !s.ok()) {
      return s;
    }
    const std::string coordinator = addresses["ppcoord"].grpc;
    for (int i = 1; i <= workers; ++i) {
      started = cluster_.Start(
          names[i], ppworker,
          {"--coordinator=" + coordinator, "--grpc=127.0.0.1:0", "--metrics=127.0.0.1:0",
           "--device=cpu", "--name=" + names[i], "--address_file=" + address_file(names[i])},
          log_file(names[i]));
      if (!started.ok()) return started;
    }
    if (absl::Status s = WaitFor("address files from the workers", timeout,
                                 [&] { return std::all_of(names.begin(), names.end(), serving); });
        !s.ok()) {
      return s;
    }

    std::cout << "ppcoord  grpc " << coordinator << "  metrics http://"
              << addresses["ppcoord"].metrics << "/metrics\n";
    for (int i = 1; i <= workers; ++i) {
      std::cout << absl::StrFormat("%-8s grpc %s  metrics http://%s/metrics\n", names[i],
                                   addresses[names[i]].grpc, addresses[names[i]].metrics);
    }
    std::cout << "logs and address files in " << run_dir << "\n" << std::flush;

    stub_ = pp::v1::Coordinator::NewStub(
        grpc::CreateChannel(coordinator, grpc::InsecureChannelCredentials()));
    auto registered = [&] {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
      pp::v1::ListWorkersResponse response;
      if (!stub_->ListWorkers(&context, {}, &response).ok()) return false;
      int idle = 0;
      for (const pp::v1::WorkerInfo& w : response.workers()) {
        idle += w.state() == pp::v1::IDLE &&
                std::find(names.begin() + 1, names.end(), w.name()) != names.end();
      }
      return idle == workers;
    };
    return WaitFor(absl::StrCat("registration of all ", workers, " workers"), timeout, registered);
  }

  absl::Status RunJob(const pp::v1::JobSpec& spec) {
    pp::v1::SubmitJobRequest request;
    *request.mutable_spec() = spec;
    pp::v1::SubmitJobResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::Status submitted = stub_->SubmitJob(&context, request, &response);
    if (!submitted.ok()) {
      return absl::Status(static_cast<absl::StatusCode>(submitted.error_code()),
                          absl::StrCat("submit: ", submitted.error_message()));
    }
    job_id_ = response.job_id();
    spec_ = spec;
    const pp::v1::ParallelSpec& p = spec.parallel();
    std::cout << "job " << job_id_ << ": " << spec.model().n_layers()
              << " layers, C=" << spec.model().d_model() << ", T=" << spec.model().seq_len() << ", "
              << p.schedule() << " D=" << p.pipeline() << " M=" << spec.train().microbatches()
              << ", " << spec.train().steps() << " steps on "
              << (spec.data().path().empty() ? "generated text" : spec.data().path()) << "\n"
              << std::flush;

    watcher_ = std::thread([this] {
      pp::v1::WatchJobRequest watch;
      watch.set_job_id(job_id_);
      std::unique_ptr<grpc::ClientReader<pp::v1::JobEvent>> reader =
          stub_->WatchJob(&watch_context_, watch);
      pp::v1::JobEvent event;
      while (reader->Read(&event)) {
        absl::MutexLock lock(&watch_.mu);
        watch_.events.push_back(event);
      }
      grpc::Status status = reader->Finish();
      absl::MutexLock lock(&watch_.mu);
      watch_.status = status;
      watch_.ended = true;
    });

    // On a terminal one line is redrawn in place; it must not wrap, or each redraw leaves a line.
    const bool live = isatty(STDOUT_FILENO);
    winsize terminal{};
    const size_t columns = ioctl(STDOUT_FILENO, TIOCGWINSZ, &terminal) == 0 && terminal.ws_col > 1
                               ? terminal.ws_col
                               : 80;
    size_t shown = 0;
    bool progress_drawn = false;
    auto show = [&] {
      absl::MutexLock lock(&watch_.mu);
      for (; shown < watch_.events.size(); ++shown) {
        const pp::v1::JobEvent& e = watch_.events[shown];
        if (e.kind() == pp::v1::EVENT_STEP) {
          if (!first_step_.has_value()) first_step_ = e;
          if (e.step() > 1) {  // step 1 pays for warm-up
            bubble_sum_ += e.bubble_ratio();
            ++bubble_steps_;
          }
          const int every = std::max(1, e.total_steps() / 10);
          if (live) {
            std::cout << "\r\033[K" << ProgressLine(e, &*first_step_).substr(0, columns - 1)
                      << std::flush;
            progress_drawn = true;
          } else if (e.step() % every == 0 || e.step() == 1) {
            std::cout << ProgressLine(e, &*first_step_) << "\n" << std::flush;
          }
          continue;
        }
        if (progress_drawn) std::cout << "\r\033[K";
        std::cout << job_id_ << "  " << EventName(e) << (e.message().empty() ? "" : "  ")
                  << e.message() << "\n"
                  << std::flush;
        progress_drawn = false;
      }
      return watch_.ended;
    };
    absl::Status waited = WaitFor("end of the job", absl::InfiniteDuration(), show);
    if (progress_drawn && live) std::cout << "\n";
    if (!waited.ok()) {
      if (stop_signal_ != 0) CancelJob();
      return waited;
    }
    absl::MutexLock lock(&watch_.mu);
    if (!watch_.status.ok()) {
      return absl::UnavailableError(
          absl::StrCat("watching job ", job_id_, ": ", watch_.status.error_message()));
    }
    if (watch_.events.empty() || watch_.events.back().kind() != pp::v1::EVENT_FINISHED) {
      const std::string why = watch_.events.empty() ? "no events" : watch_.events.back().message();
      return absl::AbortedError(absl::StrCat("job ", job_id_, " did not succeed: ", why));
    }
    last_event_ = watch_.events.back();
    return absl::OkStatus();
  }

  void CancelJob() {
    if (job_id_.empty()) return;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    pp::v1::CancelJobRequest request;
    request.set_job_id(job_id_);
    pp::v1::Job job;
    (void)stub_->CancelJob(&context, request, &job);  // best effort: the daemons stop anyway
  }

  absl::Status Summarize(const WorkDir& dir) {
    grpc::ClientContext trace_context, plan_context;
    trace_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    plan_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    pp::v1::GetTraceRequest trace_request;
    trace_request.set_job_id(job_id_);
    pp::v1::StepTrace trace;
    grpc::Status traced = stub_->GetTrace(&trace_context, trace_request, &trace);
    pp::v1::PlanJobRequest plan_request;
    *plan_request.mutable_spec() = spec_;
    pp::v1::PlanJobResponse plan;
    grpc::Status planned = stub_->PlanJob(&plan_context, plan_request, &plan);

    const pp::v1::JobEvent& last = last_event_;
    const pp::v1::JobEvent& first = first_step_.value_or(last);
    const pp::v1::JobSpec& s = spec_;
    const double tokens_per_step = static_cast<double>(s.train().microbatches()) *
                                   s.train().microbatch_size() * s.model().seq_len() *
                                   std::max(1, s.parallel().data());
    std::cout << "\nsummary of job " << job_id_ << "\n";
    std::cout << absl::StrFormat("  loss        %.4f at step %d -> %.4f at step %d\n", first.loss(),
                                 first.step(), last.loss(), last.step());
    const double seconds = last.time_unix() - first.time_unix();
    if (last.step() > first.step() && seconds > 0) {
      std::cout << absl::StrFormat(
          "  tokens/s    %.0f (mean over steps %d-%d: %.0f tokens in %s)\n",
          tokens_per_step * (last.step() - first.step()) / seconds, first.step() + 1, last.step(),
          tokens_per_step * (last.step() - first.step()), Clock(seconds));
    }
    std::cout << "  bubble      idle share of all ranks' time, first action to last\n";
    if (bubble_steps_ > 0) {
      std::cout << absl::StrFormat("              measured   %5.1f%% (mean of steps 2-%d)\n",
                                   100 * bubble_sum_ / bubble_steps_, last.step());
    }
    if (planned.ok()) {
      std::cout << absl::StrFormat(
          "              simulated  %5.1f%% (%s D=%d M=%d, F=1 B=2, free communication)\n",
          100 * plan.schedule().simulation().bubble_fraction(), plan.schedule().name(),
          plan.schedule().pipeline(), plan.schedule().microbatches());
      if (traced.ok()) {
        absl::StatusOr<double> measured_costs = BubbleWithMeasuredCosts(plan.schedule(), trace);
        if (measured_costs.ok()) {
          std::cout << absl::StrFormat(
              "              simulated  %5.1f%% (measured per-stage F and B of step %d, free "
              "communication)\n",
              100 * *measured_costs, trace.step());
        }
      }
    }
    if (!dir.temporary()) {
      std::cout << "  checkpoints " << dir.path() << "/checkpoints/" << job_id_ << "/\n";
    }
    if (!traced.ok()) {
      return absl::UnavailableError(
          absl::StrCat("trace of job ", job_id_, ": ", traced.error_message()));
    }
    const pp::plan::Timeline timeline = pp::plan::TimelineFromTrace(trace);
    std::cout << "\nstep " << trace.step() << " as measured:\n"
              << pp::plan::RenderAscii(timeline, pp::plan::TimeUnit::kSeconds);
    std::string path = absl::GetFlag(FLAGS_chrome_trace);
    if (path.empty()) {
      path = dir.temporary() ? absl::StrCat(TempRoot(), "/ppctl-up-", job_id_, ".trace.json")
                             : absl::StrCat(dir.path(), "/", job_id_, ".trace.json");
    }
    if (absl::Status written =
            pp::common::WriteFileAtomic(path, pp::plan::RenderChrome(timeline, 1e6));
        !written.ok()) {
      return written;
    }
    std::cout << "\nChrome trace of step " << trace.step() << ": " << path
              << " (open in ui.perfetto.dev or chrome://tracing)\n";
    return absl::OkStatus();
  }

  sigset_t stop_signals_;
  int stop_signal_ = 0;
  LocalCluster cluster_;
  std::unique_ptr<pp::v1::Coordinator::Stub> stub_;
  pp::v1::JobSpec spec_;
  std::string job_id_;
  grpc::ClientContext watch_context_;
  std::thread watcher_;
  WatchState watch_;
  std::optional<pp::v1::JobEvent> first_step_;
  pp::v1::JobEvent last_event_;
  double bubble_sum_ = 0;
  int bubble_steps_ = 0;
};

int RunUp(const std::vector<std::string>& args) {
  if (!args.empty()) {
    std::cerr << "ppctl up: unexpected argument '" << args[0] << "' (the job file is --job=FILE)\n";
    return kUsage;
  }
  // The stop signals are taken synchronously (sigtimedwait in Up::WaitFor): blocked here, before
  // any thread starts, so every thread inherits the mask; children get the original one back.
  sigset_t stop_signals, original;
  sigemptyset(&stop_signals);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stop_signals, sig);
  pthread_sigmask(SIG_BLOCK, &stop_signals, &original);
  return Up(stop_signals, original).Run();
}

}  // namespace

Command UpCommand() {
  return {"up",
          "",
          "run a local cluster (ppcoord + N ppworker on loopback), train a job on it with live "
          "progress, print a summary and the measured timeline, then stop every process",
          {"workers", "job", "data_dir", "chrome_trace", "startup_timeout"},
          RunUp};
}

}  // namespace pp::client
