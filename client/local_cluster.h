// Process supervision for `ppctl up`: the daemons as child processes in one process group of
// their own, so a Ctrl-C in the terminal reaches ppctl alone, which then stops them itself
// (bounded). Each child asks the kernel for SIGKILL when ppctl dies (PR_SET_PDEATHSIG), so none
// outlives it even when ppctl is killed without a chance to clean up. Not thread-safe: one
// thread starts, polls and stops.
#ifndef PP_CLIENT_LOCAL_CLUSTER_H_
#define PP_CLIENT_LOCAL_CLUSTER_H_

#include <signal.h>
#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pp::client {

// The executable `name` in ppctl's own folder (build/bin/, or an image's bin folder), where
// ppcoord and ppworker live. FailedPrecondition, saying how to build it, when it is not there.
absl::StatusOr<std::filesystem::path> BinaryNextToMe(const std::string& name);

class LocalCluster {
 public:
  // Children start with `child_signal_mask` as their signal mask: the one from before ppctl
  // installed its stop signals (StopSignals::original_mask), which the daemons must not inherit.
  explicit LocalCluster(const sigset_t& child_signal_mask) : child_mask_(child_signal_mask) {}
  ~LocalCluster() { Stop(); }
  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;

  // Starts `binary args...` with stdout and stderr to `log`. `name` is for messages. The child
  // inherits ppctl's whole environment (so e.g. PP_TEST_TRANSPORT or PP_CUDA_PLUGIN set for
  // ppctl reaches every daemon), with `env` ("KEY=VALUE" each) added on top, replacing an
  // inherited KEY.
  absl::Status Start(const std::string& name, const std::string& binary,
                     const std::vector<std::string>& args, const std::string& log,
                     const std::vector<std::string>& env = {});

  // A message naming the first daemon that exited on its own, with the end of its log, if any did.
  std::optional<std::string> Exited();

  // SIGTERM to all, then SIGKILL to whatever still runs after `grace`; returns once every child
  // is reaped (SIGKILL cannot be ignored, so the second wait is short). Signals go to the pids:
  // a child not yet reaped keeps its pid, so no other process can be hit.
  void Stop(absl::Duration grace = absl::Seconds(5));

  int size() const { return static_cast<int>(children_.size()); }

 private:
  struct Child {
    std::string name, log;
    pid_t pid;  // 0 once reaped
    int status = 0;
  };

  void Reap();
  bool Running();

  sigset_t child_mask_;
  pid_t group_ = 0;  // the first child's pid: the group every child joins
  std::vector<Child> children_;
};

}  // namespace pp::client

#endif  // PP_CLIENT_LOCAL_CLUSTER_H_
