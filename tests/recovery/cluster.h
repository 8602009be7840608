// A real local cluster for the recovery tests: one ppcoord and N ppworker processes on loopback,
// each with its own log file, driven over pp.v1.Coordinator. Every process is killed and reaped
// when the Cluster goes away.
#ifndef PP_TESTS_RECOVERY_CLUSTER_H_
#define PP_TESTS_RECOVERY_CLUSTER_H_

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pp/v1/coordinator.grpc.pb.h"

namespace pp::recovery {

// A child process with stdout and stderr appended to `log`.
class Process {
 public:
  static absl::StatusOr<std::unique_ptr<Process>> Start(
      const std::vector<std::string>& argv, const std::string& log,
      const std::map<std::string, std::string>& env = {});
  ~Process();  // SIGKILL and reap when still running

  pid_t pid() const { return pid_; }
  void Signal(int signal);
  // The exit status (or 128 + signal) once it ended within `timeout`; DeadlineExceeded otherwise.
  absl::StatusOr<int> Wait(absl::Duration timeout);

 private:
  explicit Process(pid_t pid) : pid_(pid) {}
  pid_t pid_;
  bool reaped_ = false;
};

class Cluster {
 public:
  // `dir` holds the coordinator's --data_dir (dir/data) and the logs (dir/*.log).
  explicit Cluster(std::string dir) : dir_(std::move(dir)) {}

  // Starts ppcoord on --data_dir=dir/data; `port` 0 picks a free one (a restart passes the old
  // one so workers find it again). Waits for its address file.
  absl::Status StartCoordinator(int port = 0);
  // SIGKILLs ppcoord and reaps it.
  void KillCoordinator();
  // Starts a worker named `name`; waits until the coordinator lists it.
  absl::Status StartWorker(const std::string& name,
                           const std::map<std::string, std::string>& env = {});
  Process& worker(const std::string& name) { return *workers_.at(name); }

  pp::v1::Coordinator::Stub& coordinator() { return *stub_; }
  int coordinator_port() const { return port_; }
  std::string data_dir() const { return dir_ + "/data"; }
  std::string checkpoint_dir() const { return dir_ + "/data/checkpoints"; }

  absl::StatusOr<std::string> Submit(const pp::v1::JobSpec& spec);
  absl::StatusOr<pp::v1::Job> Get(const std::string& job_id);
  // Polls GetJob every 20 ms until `done` holds; the last job seen. DeadlineExceeded (with the
  // job's state and reason) when `timeout` passes first.
  absl::StatusOr<pp::v1::Job> WaitFor(const std::string& job_id,
                                      const std::function<bool(const pp::v1::Job&)>& done,
                                      absl::Duration timeout);
  // Waits until the job ended; an error unless it SUCCEEDED.
  absl::StatusOr<pp::v1::Job> WaitSucceeded(const std::string& job_id, absl::Duration timeout);

  // The last lines of every log, for a failure message.
  std::string LogTails() const;

 private:
  std::string dir_;
  int port_ = 0;
  std::unique_ptr<Process> coordinator_;
  std::map<std::string, std::unique_ptr<Process>> workers_;
  std::unique_ptr<pp::v1::Coordinator::Stub> stub_;
};

// Every value of `tensors` from the committed checkpoint <root>/<job>/step-<step>.
absl::StatusOr<std::map<std::string, std::vector<float>>> CheckpointValues(
    const std::string& root, const std::string& job, int step);

// Per-step losses of a job from ppcoord's store (<data_dir>/ppcoord.db), step 1 first.
absl::StatusOr<std::vector<double>> StoredLosses(const std::string& data_dir,
                                                 const std::string& job);

}  // namespace pp::recovery

#endif  // PP_TESTS_RECOVERY_CLUSTER_H_
