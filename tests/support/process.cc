#include "tests/support/process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

extern char** environ;

namespace pp::testing_support {
namespace {

constexpr absl::Duration kPoll = absl::Milliseconds(20);

// This process's environment with `overrides` set.
std::vector<std::string> Environment(const std::map<std::string, std::string>& overrides) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    if (!overrides.contains(entry.substr(0, entry.find('=')))) env.push_back(entry);
  }
  for (const auto& [key, value] : overrides) env.push_back(absl::StrCat(key, "=", value));
  return env;
}

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

absl::StatusOr<pid_t> Spawn(std::vector<std::string> argv, const std::string& log,
                            const ProcessOptions& options) {
  if (argv.empty()) return absl::InvalidArgumentError("empty command line");
  std::vector<std::string> env = Environment(options.env);
  std::vector<char*> args = Pointers(argv), envp = Pointers(env);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  constexpr int kAppend = O_WRONLY | O_CREAT | O_APPEND;
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), kAppend, 0644);
  if (options.stderr_log.empty()) {
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
  } else {
    posix_spawn_file_actions_addopen(&actions, 2, options.stderr_log.c_str(), kAppend, 0644);
  }
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  if (options.own_process_group) {
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attributes, 0);
  }
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, args[0], &actions, &attributes, args.data(), envp.data());
  posix_spawnattr_destroy(&attributes);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    return absl::InternalError(absl::StrCat("cannot start ", argv[0], ": ", std::strerror(rc)));
  }
  return pid;
}

}  // namespace

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::StatusOr<std::unique_ptr<Process>> Process::Start(const std::vector<std::string>& argv,
                                                        const std::string& log,
                                                        const ProcessOptions& options) {
  absl::StatusOr<pid_t> pid = Spawn(argv, log, options);
  if (!pid.ok()) return pid.status();
  return std::unique_ptr<Process>(new Process(*pid, log));
}

Process::~Process() {
  if (running()) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

void Process::Signal(int signal) {
  if (running()) kill(pid_, signal);
}

absl::StatusOr<int> Process::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (running()) {
    int status = 0;
    const pid_t got = waitpid(pid_, &status, WNOHANG);
    if (got == pid_) {
      signaled_ = WIFSIGNALED(status);
      exit_code_ = signaled_ ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
    } else if (got < 0) {
      exit_code_ = -1;  // not our child any more: nothing to wait for, nor to kill later
      return absl::InternalError(absl::StrCat("waitpid ", pid_, ": ", std::strerror(errno)));
    } else if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("pid ", pid_, " still runs after ", absl::FormatDuration(timeout)));
    } else {
      absl::SleepFor(kPoll);
    }
  }
  return *exit_code_;
}

std::string Process::LogTail(size_t bytes) const {
  const std::string text = Log();
  return text.size() <= bytes ? text : text.substr(text.size() - bytes);
}

namespace {

// Runs argv to its end with stdout to the file `out` and stderr to `err`, then reads both.
absl::StatusOr<CommandResult> RunTo(const std::vector<std::string>& argv, const std::string& out,
                                    const std::string& err, absl::Duration timeout) {
  ProcessOptions options;
  options.stderr_log = err;
  absl::StatusOr<std::unique_ptr<Process>> process = Process::Start(argv, out, options);
  if (!process.ok()) return process.status();
  absl::StatusOr<int> code = (*process)->Wait(timeout);
  if (!code.ok()) {
    return absl::Status(code.status().code(),
                        absl::StrCat(absl::StrJoin(argv, " "), ": ", code.status().message()));
  }
  return CommandResult{*code, ReadFile(out), ReadFile(err)};
}

}  // namespace

absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         absl::Duration timeout) {
  char out_path[] = "/tmp/pp_command_out_XXXXXX";
  char err_path[] = "/tmp/pp_command_err_XXXXXX";
  const int out_fd = mkstemp(out_path), err_fd = mkstemp(err_path);
  if (out_fd >= 0) close(out_fd);
  if (err_fd >= 0) close(err_fd);
  if (out_fd < 0 || err_fd < 0) return absl::InternalError("mkstemp failed");
  absl::StatusOr<CommandResult> result = RunTo(argv, out_path, err_path, timeout);
  unlink(out_path);
  unlink(err_path);
  return result;
}

}  // namespace pp::testing_support
