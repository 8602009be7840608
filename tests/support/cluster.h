// A loopback cluster of the real daemons for the tests and benches: ppcoord and named ppworker
// processes from the build's bin/ folder, each on free ports announced through --address_file,
// each with its log in the cluster's folder; and the Coordinator calls the tests make of it.
// Contract: every wait is bounded; errors say which process and carry its log's tail. A Cluster
// going away SIGTERMs every daemon, SIGKILLs what is left after 5 s, and reaps them all.
#ifndef PP_TESTS_SUPPORT_CLUSTER_H_
#define PP_TESTS_SUPPORT_CLUSTER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/security/credentials.h"
#include "pp/v1/coordinator.grpc.pb.h"
#include "tests/support/process.h"

namespace pp::testing_support {

struct Addresses {
  std::string grpc;
  std::string metrics;
};

struct ClusterOptions {
  std::string bin_dir;                         // holds ppcoord, ppworker, ppctl
  std::string dir;                             // logs, address files, --data_dir (dir/data)
  std::string coordinator_host = "127.0.0.1";   // ppcoord serves gRPC and metrics on it
  std::vector<std::string> coordinator_flags;  // extra flags, e.g. --worker_timeout=2s
  std::map<std::string, std::string> coordinator_env;  // at every start, e.g. a PP_TEST_ hook
  std::vector<std::string> worker_flags;       // extra flags for every worker
  // Every worker's environment (WorkerOptions::env may override an entry), e.g.
  // PP_TEST_TRANSPORT=fifo (worker/comm/transport.h ConnectForDevice).
  std::map<std::string, std::string> worker_env;
  absl::Duration startup_timeout = absl::Seconds(20);
  // The Coordinator stub's credentials (TLS, a client certificate); null: plaintext.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
};

struct WorkerOptions {
  std::map<std::string, std::string> env;  // e.g. PP_TEST_SHARD_WRITE_PAUSE
  std::vector<std::string> flags;          // after ClusterOptions::worker_flags
  // Where it runs: the host it serves on (and peers reach it at), and a command that runs its
  // argv there (a network namespace: NetnsBed::Exec's "ip netns exec NAME"); empty: here.
  std::string host = "127.0.0.1";
  std::vector<std::string> run_in;
};

// ppcoord at once; workers when asked (so a test may submit and watch first).
class Cluster {
 public:
  static absl::StatusOr<std::unique_ptr<Cluster>> Start(const ClusterOptions& options);
  ~Cluster();

  // Starts worker `name` and waits until the coordinator lists it IDLE.
  absl::Status StartWorker(const std::string& name, const WorkerOptions& options = {});
  // Starts worker `name` (again, after it was killed) without waiting for it: a queued job may
  // take it before it could be seen IDLE.
  absl::Status LaunchWorker(const std::string& name, const WorkerOptions& options = {});
  // Starts `n` more workers named w<i> (i counting every worker so far), all IDLE on return.
  absl::Status AddWorkers(int n);
  // SIGKILLs ppcoord and reaps it.
  void KillCoordinator();
  // A new ppcoord on the killed one's port and data dir, so that the workers find it again.
  absl::Status RestartCoordinator();

  const Addresses& coordinator() const { return coordinator_.addresses; }
  Process& coordinator_process() { return *coordinator_.process; }
  pp::v1::Coordinator::Stub& stub() { return *stub_; }
  // By name; naming a worker that was never started throws std::out_of_range.
  std::vector<std::string> worker_names() const;
  Process& worker(const std::string& name) { return *workers_.at(name).process; }
  const Addresses& worker_addresses(const std::string& name) const {
    return workers_.at(name).addresses;
  }
  std::string data_dir() const { return options_.dir + "/data"; }
  std::string checkpoint_root() const { return data_dir() + "/checkpoints"; }
  std::string ppctl() const { return options_.bin_dir + "/ppctl"; }
  // Log tails of every daemon, for failure messages.
  std::string Logs() const;

 private:
  struct Daemon {
    std::unique_ptr<Process> process;
    Addresses addresses;
  };

  explicit Cluster(const ClusterOptions& options) : options_(options) {}
  absl::Status StartCoordinator(int port);
  absl::Status WaitIdle(const std::vector<std::string>& names);
  // Starts `argv` with its log at dir/<name>.log and waits for its address file dir/<name>.json.
  absl::StatusOr<Daemon> Launch(const std::string& name, std::vector<std::string> argv,
                                const std::map<std::string, std::string>& env);

  ClusterOptions options_;
  Daemon coordinator_;
  std::map<std::string, Daemon> workers_;
  std::unique_ptr<pp::v1::Coordinator::Stub> stub_;
};

// Coordinator calls with a 10 s deadline; a refusal keeps its gRPC code (INVALID_ARGUMENT for a
// bad spec) and message.
absl::StatusOr<std::vector<pp::v1::WorkerInfo>> ListWorkers(pp::v1::Coordinator::Stub& stub);
absl::StatusOr<pp::v1::Job> GetJob(pp::v1::Coordinator::Stub& stub, const std::string& job_id);
absl::StatusOr<std::string> SubmitJob(pp::v1::Coordinator::Stub& stub, const pp::v1::JobSpec& spec);
absl::StatusOr<pp::v1::Job> ResumeJob(pp::v1::Coordinator::Stub& stub,
                                      const pp::v1::ResumeJobRequest& request);

// Polls GetJob every 20 ms until `done` holds: the job then. DeadlineExceeded, naming the job's
// last state, step and reason, when `timeout` passes first.
absl::StatusOr<pp::v1::Job> WaitForJob(pp::v1::Coordinator::Stub& stub, const std::string& job_id,
                                       const std::function<bool(const pp::v1::Job&)>& done,
                                       absl::Duration timeout);
// Waits until the job ended: an error unless it SUCCEEDED.
absl::StatusOr<pp::v1::Job> WaitSucceeded(pp::v1::Coordinator::Stub& stub,
                                          const std::string& job_id, absl::Duration timeout);

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

}  // namespace pp::testing_support

#endif  // PP_TESTS_SUPPORT_CLUSTER_H_
