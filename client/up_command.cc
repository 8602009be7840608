// `ppctl up`: a whole local cluster in one command (the embedded default). Starts ppcoord and
// --workers ppworker processes on loopback (binaries next to ppctl's own executable, free ports,
// address files), waits until every worker registered, submits a job (--job, or a small GPT on a
// text every Debian machine has), shows its progress, then prints a summary (loss, tokens/s,
// measured and simulated bubble, the measured timeline of the last step) and writes that step's
// Chrome trace and the job's HTML report (report_command.h; also when the job failed). Every
// process it starts is stopped and reaped before it returns: at the end, on SIGINT/SIGTERM/SIGHUP
// (exit 128 + signal), and through PR_SET_PDEATHSIG if ppctl itself dies.
// Exit codes (common/exit_code.h): 2 for a usage error (a bad flag or argument), 1 for any other
// failure.
//
// --device=cuda:N puts every worker on GPU N: a test layout for one GPU (each rank its own
// process, NCCL between them over loopback sockets), not a fast one. The daemons inherit ppctl's
// environment.
//
// The parts: up_spec.h (the job), work_dir.h (the data folder), local_cluster.h (the daemons),
// common/address_file.h (where they serve), common/stop_signals.h (how ppctl takes its stop
// signals), up_progress.h (the live display), up_summary.h (the summary).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <thread>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/command.h"
#include "client/local_cluster.h"
#include "client/report_command.h"
#include "client/up_progress.h"
#include "client/up_secrets.h"
#include "client/up_spec.h"
#include "client/up_summary.h"
#include "client/work_dir.h"
#include "common/address_file.h"
#include "common/device.h"
#include "common/exit_code.h"
#include "common/file_io.h"
#include "common/job_spec.h"
#include "common/stop_signals.h"
#include "common/tls.h"
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
          "and address files (<DIR>/ppctl-up/), the Chrome trace and the HTML report "
          "(<DIR>/<job>.report.html) here; default: a temporary folder removed at exit");
ABSL_FLAG(std::string, chrome_trace, "",
          "where to write the Chrome trace of the last step; default <DIR>/<job>.trace.json, or "
          "$TMPDIR/ppctl-up-<job>.trace.json without --data_dir");
ABSL_FLAG(bool, view_token, false,
          "also make a read-only token (role view, user viewer) in <DIR>/ppctl-up/tls/view-token "
          "and print its path on a line \"view token: FILE\" after \"reach it:\"");
ABSL_FLAG(absl::Duration, startup_timeout, absl::Seconds(30),
          "how long the daemons may take to serve and the workers to register");
ABSL_DECLARE_FLAG(std::string, device);  // defined by `ppctl train` (client/train_command.cc)

namespace pp::client {
namespace {

constexpr int kMaxWorkers = 64;

constexpr char kDeviceHelp[] =
    "cpu (the default), or cuda:N: the --device of every ppworker. With cuda:N all the workers "
    "share GPU N, each with its own NCCL_HOSTID and NCCL_SOCKET_IFNAME=lo (NCCL refuses two "
    "ranks of one communicator on one device otherwise): a test layout for one GPU, not a fast "
    "one";

// What a worker's environment gets on top of ppctl's. NCCL takes two processes with the same
// host id and device for a duplicate rank and refuses them; a host id of their own makes each
// look like another machine, reached over loopback sockets.
std::vector<std::string> WorkerEnvironment(const pp::common::Device& device, int worker) {
  if (!device.cuda) return {};
  return {absl::StrCat("NCCL_HOSTID=pp-up-", getpid(), "-w", worker), "NCCL_SOCKET_IFNAME=lo"};
}

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

std::chrono::system_clock::time_point In(std::chrono::milliseconds from_now) {
  return std::chrono::system_clock::now() + from_now;
}

// The daemons' names: ppcoord, then w0, w1, ... and where each keeps its address file and log.
struct RunFiles {
  std::string dir;
  std::vector<std::string> names;
  std::string AddressFile(const std::string& name) const { return dir + "/" + name + ".json"; }
  std::string Log(const std::string& name) const { return dir + "/" + name + ".log"; }
};

class Up {
 public:
  // The daemons start with the signal mask from before `stop_signals` was installed.
  explicit Up(pp::common::StopSignals& stop_signals)
      : stop_signals_(stop_signals), cluster_(stop_signals.original_mask()) {}

  int Run() {
    const int workers = absl::GetFlag(FLAGS_workers);
    if (workers < 1 || workers > kMaxWorkers) {
      return Fail(absl::InvalidArgumentError(
                      absl::StrCat("--workers must be 1..", kMaxWorkers, ", got ", workers)),
                  pp::common::kExitUsage);
    }
    absl::StatusOr<pp::common::Device> device =
        pp::common::ParseDevice(absl::GetFlag(FLAGS_device), "device");
    if (!device.ok()) return Fail(device.status(), pp::common::kExitUsage);
    run_.device = device->ToString();
    absl::StatusOr<pp::v1::JobSpec> spec = LoadUpSpec(absl::GetFlag(FLAGS_job), workers);
    if (!spec.ok()) return Fail(spec.status());
    absl::StatusOr<std::filesystem::path> ppcoord = BinaryNextToMe("ppcoord");
    if (!ppcoord.ok()) return Fail(ppcoord.status());
    absl::StatusOr<std::filesystem::path> ppworker = BinaryNextToMe("ppworker");
    if (!ppworker.ok()) return Fail(ppworker.status());
    absl::StatusOr<WorkDir> dir = WorkDir::Open(absl::GetFlag(FLAGS_data_dir));
    if (!dir.ok()) return Fail(dir.status());

    absl::Status status = StartCluster(dir->path(), *ppcoord, *ppworker, workers, *device);
    if (status.ok()) status = RunJob(*spec);
    if (status.ok()) {
      status = PrintSummary(*stub_, run_, *dir, absl::GetFlag(FLAGS_chrome_trace));
    }
    // A failed job gets its report too: that is when its curves and restarts matter most.
    if (!run_.job_id.empty() && stop_signal_ == 0) WriteJobReport(*dir, &status);
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
  int Fail(const absl::Status& status, int code = pp::common::kExitFailure) {
    if (status.ok()) return pp::common::kExitOk;
    std::cerr << "ppctl up: " << status.message() << "\n";
    return code;
  }

  // Waits until done() holds. Ends early with an error when a stop signal arrives (Cancelled),
  // a daemon exits (Unavailable, naming it) or `timeout` passes (DeadlineExceeded, naming what).
  // Between two checks it waits one tick for a stop signal (StopSignals::Wait).
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
      if (std::optional<int> signal = stop_signals_.Wait(absl::Milliseconds(50))) {
        stop_signal_ = *signal;
        return absl::CancelledError(
            absl::StrCat("interrupted by ", SignalName(*signal), "; stopped the cluster"));
      }
    }
    return absl::OkStatus();
  }

  // Waits for `names`' address files and keeps what they say in addresses_. The daemons write
  // them atomically, so a file that is there but unreadable will stay so: that ends the wait.
  absl::Status WaitForAddresses(const RunFiles& files, const std::vector<std::string>& names,
                                const std::string& what) {
    absl::Status unreadable;
    auto serving = [&](const std::string& name) {
      if (addresses_.contains(name)) return true;
      absl::StatusOr<pp::common::DaemonAddresses> a =
          pp::common::ReadAddressFile(files.AddressFile(name));
      if (!a.ok()) {
        if (!absl::IsNotFound(a.status())) unreadable = a.status();
        return false;
      }
      addresses_[name] = *std::move(a);
      return true;
    };
    absl::Status waited = WaitFor(what, absl::GetFlag(FLAGS_startup_timeout), [&] {
      return std::all_of(names.begin(), names.end(), serving) || !unreadable.ok();
    });
    return unreadable.ok() ? waited : unreadable;
  }

  absl::Status StartCluster(const std::string& data_dir, const std::string& ppcoord,
                            const std::string& ppworker, int workers,
                            const pp::common::Device& device) {
    RunFiles files{data_dir + "/ppctl-up", {"ppcoord"}};
    if (absl::Status made = pp::common::MakeDirs(files.dir); !made.ok()) return made;
    for (int i = 0; i < workers; ++i) files.names.push_back(absl::StrCat("w", i));
    for (const std::string& name : files.names) {  // left by an earlier run in the same folder
      std::filesystem::remove(files.AddressFile(name));
    }
    absl::StatusOr<UpSecrets> secrets =
        MakeUpSecrets(files.dir + "/tls", files.names, {"ppctl"}, absl::GetFlag(FLAGS_view_token));
    if (!secrets.ok()) return secrets.status();
    std::vector<std::string> coordinator_args = {
        "--grpc=127.0.0.1:0", "--metrics=127.0.0.1:0", "--data_dir=" + data_dir,
        "--address_file=" + files.AddressFile("ppcoord"), "--auth_tokens=" + secrets->tokens_file};
    for (std::string& flag : secrets->DaemonFlags("ppcoord")) coordinator_args.push_back(flag);
    absl::Status started =
        cluster_.Start("ppcoord", ppcoord, coordinator_args, files.Log("ppcoord"));
    if (!started.ok()) return started;
    if (absl::Status s = WaitForAddresses(files, {"ppcoord"}, "address file from ppcoord");
        !s.ok()) {
      return s;
    }
    const std::string coordinator = addresses_["ppcoord"].grpc;
    const std::vector<std::string> worker_names(files.names.begin() + 1, files.names.end());
    for (int i = 0; i < workers; ++i) {
      const std::string& name = worker_names[i];
      std::vector<std::string> args = {"--coordinator=" + coordinator,
                                       "--grpc=127.0.0.1:0",
                                       "--metrics=127.0.0.1:0",
                                       "--device=" + device.ToString(),
                                       "--name=" + name,
                                       "--address_file=" + files.AddressFile(name)};
      for (std::string& flag : secrets->DaemonFlags(name)) args.push_back(flag);
      started = cluster_.Start(name, ppworker, args, files.Log(name), WorkerEnvironment(device, i));
      if (!started.ok()) return started;
    }
    if (absl::Status s = WaitForAddresses(files, files.names, "address files from the workers");
        !s.ok()) {
      return s;
    }
    PrintAddresses(files, worker_names);
    std::cout << "reach it: ppctl --coordinator=" << coordinator << " --ca=" << secrets->ca
              << " --token_file=" << secrets->token_file << " list\n";
    if (!secrets->view_token_file.empty()) {
      std::cout << "view token: " << secrets->view_token_file << "\n";
    }
    std::cout << std::flush;
    // ppctl up itself is an admin by its own certificate (OU=pipeline-admin); the daemons' are not.
    absl::StatusOr<pp::common::TlsConfig> tls =
        pp::common::LoadTls({secrets->Cert("ppctl"), secrets->Key("ppctl"), secrets->ca}, true, "");
    if (!tls.ok()) return tls.status();
    stub_ = pp::v1::Coordinator::NewStub(
        grpc::CreateChannel(coordinator, pp::common::ChannelCredentials(*tls)));
    return WaitForRegistration(worker_names);
  }

  void PrintAddresses(const RunFiles& files, const std::vector<std::string>& worker_names) {
    std::cout << "ppcoord  grpc " << addresses_["ppcoord"].grpc << "  metrics http://"
              << addresses_["ppcoord"].metrics << "/metrics\n";
    for (const std::string& name : worker_names) {
      std::cout << absl::StrFormat("%-8s grpc %s  metrics http://%s/metrics\n", name,
                                   addresses_[name].grpc, addresses_[name].metrics);
    }
    std::cout << "logs and address files in " << files.dir << "\n" << std::flush;
  }

  absl::Status WaitForRegistration(const std::vector<std::string>& worker_names) {
    auto registered = [&] {
      grpc::ClientContext context;
      context.set_deadline(In(std::chrono::milliseconds(500)));
      pp::v1::ListWorkersResponse response;
      if (!stub_->ListWorkers(&context, {}, &response).ok()) return false;
      int idle = 0;
      for (const pp::v1::WorkerInfo& w : response.workers()) {
        idle += w.state() == pp::v1::IDLE &&
                std::find(worker_names.begin(), worker_names.end(), w.name()) != worker_names.end();
      }
      return idle == static_cast<int>(worker_names.size());
    };
    return WaitFor(absl::StrCat("registration of all ", worker_names.size(), " workers"),
                   absl::GetFlag(FLAGS_startup_timeout), registered);
  }

  absl::Status RunJob(const pp::v1::JobSpec& spec) {
    if (absl::Status submitted = Submit(spec); !submitted.ok()) return submitted;
    StartWatcher();
    ProgressDisplay display(run_.job_id);
    size_t shown = 0;
    auto show = [&] {
      absl::MutexLock lock(&watch_.mu);
      for (; shown < watch_.events.size(); ++shown) display.Show(watch_.events[shown]);
      return watch_.ended;
    };
    absl::Status waited = WaitFor("end of the job", absl::InfiniteDuration(), show);
    display.Finish();
    run_.first_step = display.first_step();
    run_.bubble_sum = display.bubble_sum();
    run_.bubble_steps = display.bubble_steps();
    if (!waited.ok()) {
      if (stop_signal_ != 0) CancelJob();
      return waited;
    }
    return Outcome();
  }

  absl::Status Submit(const pp::v1::JobSpec& spec) {
    pp::v1::SubmitJobRequest request;
    *request.mutable_spec() = spec;
    pp::v1::SubmitJobResponse response;
    grpc::ClientContext context;
    context.set_deadline(In(std::chrono::seconds(10)));
    grpc::Status submitted = stub_->SubmitJob(&context, request, &response);
    if (!submitted.ok()) {
      return absl::Status(static_cast<absl::StatusCode>(submitted.error_code()),
                          absl::StrCat("submit: ", submitted.error_message()));
    }
    run_.job_id = response.job_id();
    run_.spec = spec;
    const pp::v1::ParallelSpec& p = spec.parallel();
    std::cout << "job " << run_.job_id << ": " << spec.model().n_layers()
              << " layers, C=" << spec.model().d_model() << ", T=" << spec.model().seq_len() << ", "
              << common::ScheduleLabel(p) << " D=" << p.pipeline() << " M=" << spec.train().microbatches()
              << ", "
              << (spec.train().epochs() > 0 ? absl::StrCat(spec.train().epochs(), " epochs")
                                            : absl::StrCat(spec.train().steps(), " steps"))
              << " on "
              << (spec.data().path().empty() ? "generated text" : spec.data().path()) << "\n"
              << std::flush;
    return absl::OkStatus();
  }

  void StartWatcher() {
    watcher_ = std::thread([this] {
      pp::v1::WatchJobRequest watch;
      watch.set_job_id(run_.job_id);
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
  }

  // After the watch ended: OK when the job finished, keeping its last event.
  absl::Status Outcome() {
    absl::MutexLock lock(&watch_.mu);
    if (!watch_.status.ok()) {
      return absl::UnavailableError(
          absl::StrCat("watching job ", run_.job_id, ": ", watch_.status.error_message()));
    }
    if (watch_.events.empty() || watch_.events.back().kind() != pp::v1::EVENT_FINISHED) {
      const std::string why = watch_.events.empty() ? "no events" : watch_.events.back().message();
      return absl::AbortedError(absl::StrCat("job ", run_.job_id, " did not succeed: ", why));
    }
    run_.last_event = watch_.events.back();
    return absl::OkStatus();
  }

  // The job's HTML report (report_command.h) beside the Chrome trace; prints "report: PATH". A
  // report that cannot be written fails the run unless it failed already.
  void WriteJobReport(const WorkDir& dir, absl::Status* status) {
    const std::string path =
        dir.temporary() ? absl::StrCat(TempRoot(), "/ppctl-up-", run_.job_id, ".report.html")
                        : absl::StrCat(dir.path(), "/", run_.job_id, ".report.html");
    const ReportRpc rpc{[] {
                          auto context = std::make_unique<grpc::ClientContext>();
                          context->set_deadline(In(std::chrono::seconds(10)));
                          return context;
                        },
                        [](const grpc::Status& s) { return s.error_message(); }};
    if (absl::Status written = WriteReport(*stub_, run_.job_id, path, rpc); !written.ok()) {
      std::cerr << "ppctl up: report: " << written.message() << "\n";
      if (status->ok()) *status = written;
      return;
    }
    std::cout << "report: " << path << "\n" << std::flush;
  }

  void CancelJob() {
    if (run_.job_id.empty()) return;
    grpc::ClientContext context;
    context.set_deadline(In(std::chrono::seconds(2)));
    pp::v1::CancelJobRequest request;
    request.set_job_id(run_.job_id);
    pp::v1::Job job;
    (void)stub_->CancelJob(&context, request, &job);  // best effort: the daemons stop anyway
  }

  pp::common::StopSignals& stop_signals_;
  int stop_signal_ = 0;
  LocalCluster cluster_;
  std::map<std::string, pp::common::DaemonAddresses> addresses_;
  std::unique_ptr<pp::v1::Coordinator::Stub> stub_;
  grpc::ClientContext watch_context_;
  std::thread watcher_;
  WatchState watch_;
  UpRun run_;
};

int RunUp(const std::vector<std::string>& args) {
  if (!args.empty()) {
    std::cerr << "ppctl up: unexpected argument '" << args[0] << "' (the job file is --job=FILE)\n";
    return pp::common::kExitUsage;
  }
  // Once per process (ppctl runs one command), before this command starts any thread; why a
  // handler and a pipe rather than a blocked mask alone is in common/stop_signals.h.
  absl::StatusOr<pp::common::StopSignals> stop_signals =
      pp::common::StopSignals::Install({SIGINT, SIGTERM, SIGHUP});
  if (!stop_signals.ok()) {
    std::cerr << "ppctl up: " << stop_signals.status().message() << "\n";
    return pp::common::kExitFailure;
  }
  return Up(*stop_signals).Run();
}

}  // namespace

Command UpCommand() {
  return {"up",
          "",
          "run a local cluster (ppcoord + N ppworker on loopback), train a job on it with live "
          "progress, print a summary and the measured timeline, then stop every process",
          {"workers", "device", "job", "data_dir", "chrome_trace", "startup_timeout", "view_token"},
          RunUp,
          {{"device", kDeviceHelp}}};
}

}  // namespace pp::client
