// Child processes for the tests and benches that drive the real binaries: a Process that is
// always killed and reaped, and RunCommand for one-shot programs (ppctl, promtool).
// Contract: every wait is bounded by the caller's timeout; a Process still running when it goes
// away is SIGKILLed and reaped, so a failed test leaves no child behind. Exit codes read as a
// shell reports them: 128 + N for a child that signal N ended.
#ifndef PP_TESTS_SUPPORT_PROCESS_H_
#define PP_TESTS_SUPPORT_PROCESS_H_

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pp::testing_support {

// The whole file; "" when it cannot be read. Works on /proc files, whose size reads as 0.
std::string ReadFile(const std::string& path);

struct ProcessOptions {
  std::map<std::string, std::string> env;  // set on top of this process's environment
  // A process group of its own, as a shell starts a job: a Ctrl-C sent to the group (-pid)
  // reaches it and not the test.
  bool own_process_group = false;
  std::string stderr_log;  // when set, stderr goes to this file instead of `log`
};

// A child started with posix_spawn: stdin /dev/null, stdout (and stderr) appended to `log`.
class Process {
 public:
  static absl::StatusOr<std::unique_ptr<Process>> Start(const std::vector<std::string>& argv,
                                                        const std::string& log,
                                                        const ProcessOptions& options = {});
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  bool running() const { return !exit_code_.has_value(); }
  void Signal(int signal);
  // The exit code once it ended within `timeout` (again on every later call); DeadlineExceeded
  // while it still runs.
  absl::StatusOr<int> Wait(absl::Duration timeout);
  // After Wait succeeded: whether a signal ended it (its code is then 128 + the signal).
  bool signaled() const { return signaled_; }
  std::string Log() const { return ReadFile(log_); }
  std::string LogTail(size_t bytes = 2000) const;

 private:
  Process(pid_t pid, std::string log) : pid_(pid), log_(std::move(log)) {}
  pid_t pid_;
  std::string log_;
  std::optional<int> exit_code_;
  bool signaled_ = false;
};

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};
// Runs argv to its end and returns what it printed; DeadlineExceeded (and killed) after `timeout`.
absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         absl::Duration timeout);

}  // namespace pp::testing_support

#endif  // PP_TESTS_SUPPORT_PROCESS_H_
