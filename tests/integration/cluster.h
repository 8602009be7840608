// Real processes for the integration tests and the runtime benches: a child process that is always
// killed and reaped, one-shot commands (ppctl), and a loopback cluster of ppcoord + N ppworker
// started from the build's bin/ folder, each on free ports announced through --address_file.
// Every wait is bounded; errors say which process and carry the tail of its log.
#ifndef PP_TESTS_INTEGRATION_CLUSTER_H_
#define PP_TESTS_INTEGRATION_CLUSTER_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pp/v1/coordinator.grpc.pb.h"

namespace pp::integration {

// A child started with posix_spawn, stdout and stderr appended to `log`. The destructor SIGKILLs
// and reaps it if it still runs.
class Process {
 public:
  static absl::StatusOr<std::unique_ptr<Process>> Start(const std::vector<std::string>& argv,
                                                        const std::string& log);
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0; }
  void Signal(int signal);
  // The exit code (128 + signal when killed) once it ends; DeadlineExceeded after `timeout`.
  absl::StatusOr<int> Wait(absl::Duration timeout);
  // Last `bytes` of its log.
  std::string LogTail(size_t bytes = 2000) const;

 private:
  Process(pid_t pid, std::string log) : pid_(pid), log_(std::move(log)) {}
  pid_t pid_;
  std::string log_;
};

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};
// Runs argv to its end (killed after `timeout`: DeadlineExceeded) and returns what it printed.
absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         absl::Duration timeout);

struct Addresses {
  std::string grpc;
  std::string metrics;
};

std::string ReadFile(const std::string& path);

struct ClusterOptions {
  std::string bin_dir;                         // holds ppcoord, ppworker, ppctl
  std::string dir;                             // logs, address files, --data_dir (dir/data)
  std::vector<std::string> coordinator_flags;  // extra flags, e.g. --worker_timeout=2s
  std::vector<std::string> worker_flags;       // extra flags for every worker
  absl::Duration startup_timeout = absl::Seconds(20);
};

// ppcoord at once; workers w0, w1, ... when asked (so a test may submit and watch first).
class Cluster {
 public:
  static absl::StatusOr<std::unique_ptr<Cluster>> Start(const ClusterOptions& options);
  ~Cluster();  // SIGTERMs every process, SIGKILLs what is left after a few seconds, reaps all

  // Starts `n` more workers named w<i> and waits until the coordinator lists them all IDLE.
  absl::Status AddWorkers(int n);

  const Addresses& coordinator() const { return coordinator_address_; }
  const Addresses& worker(int i) const { return worker_addresses_[i]; }
  Process& worker_process(int i) { return *workers_[i]; }
  int num_workers() const { return static_cast<int>(workers_.size()); }
  pp::v1::Coordinator::Stub& stub() { return *stub_; }
  std::string data_dir() const { return options_.dir + "/data"; }
  std::string checkpoint_root() const { return data_dir() + "/checkpoints"; }
  std::string ppctl() const { return options_.bin_dir + "/ppctl"; }
  // Log tails of every process, for failure messages.
  std::string Logs() const;

 private:
  explicit Cluster(const ClusterOptions& options) : options_(options) {}
  absl::StatusOr<Addresses> WaitForAddresses(Process& process, const std::string& file);

  ClusterOptions options_;
  std::unique_ptr<Process> coordinator_;
  Addresses coordinator_address_;
  std::vector<std::unique_ptr<Process>> workers_;
  std::vector<Addresses> worker_addresses_;
  std::unique_ptr<pp::v1::Coordinator::Stub> stub_;
};

// The workers as the coordinator lists them.
absl::StatusOr<std::vector<pp::v1::WorkerInfo>> ListWorkers(pp::v1::Coordinator::Stub& stub);
absl::StatusOr<pp::v1::Job> GetJob(pp::v1::Coordinator::Stub& stub, const std::string& job_id);
// The job id; a refusal keeps its gRPC code (INVALID_ARGUMENT for a bad spec) and message.
absl::StatusOr<std::string> SubmitJob(pp::v1::Coordinator::Stub& stub, const pp::v1::JobSpec& spec);

// A WatchJob stream opened on a job: Open returns once the first event (the job's state when
// the watch began) arrived, so every later event is seen; Rest reads to the job's end.
class JobWatch {
 public:
  static absl::StatusOr<std::unique_ptr<JobWatch>> Open(pp::v1::Coordinator::Stub& stub,
                                                        const std::string& job_id,
                                                        absl::Duration timeout);
  ~JobWatch();
  // Every event from the first to the final one (FINISHED, FAILED or CANCELLED).
  absl::StatusOr<std::vector<pp::v1::JobEvent>> Rest();

 private:
  JobWatch() = default;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<pp::v1::JobEvent>> reader_;
  std::vector<pp::v1::JobEvent> events_;
};

}  // namespace pp::integration

#endif  // PP_TESTS_INTEGRATION_CLUSTER_H_
