#include "client/local_cluster.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/file_io.h"

extern char** environ;  // POSIX: the process environment, which execve passes on explicitly

namespace pp::client {
namespace {

std::string LastLines(const std::string& path, int n) {
  absl::StatusOr<std::string> text = pp::common::ReadFile(path);
  if (!text.ok()) return "";
  std::vector<std::string> lines = absl::StrSplit(*text, '\n', absl::SkipEmpty());
  if (static_cast<int>(lines.size()) > n) lines.erase(lines.begin(), lines.end() - n);
  return absl::StrJoin(lines, "\n");
}

// ppctl's environment with `extra` ("KEY=VALUE") added, an inherited KEY replaced: built before
// fork, because the child may only call async-signal-safe functions (no setenv).
std::vector<std::string> ChildEnvironment(const std::vector<std::string>& extra) {
  auto key = [](const std::string& entry) { return entry.substr(0, entry.find('=') + 1); };
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry = *e;
    const bool replaced = std::any_of(extra.begin(), extra.end(), [&](const std::string& x) {
      return key(x) == key(entry);
    });
    if (!replaced) env.push_back(entry);
  }
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

// Pointers into `strings` with the terminating null that execve wants.
std::vector<char*> NullTerminated(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

}  // namespace

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

absl::Status LocalCluster::Start(const std::string& name, const std::string& binary,
                                 const std::vector<std::string>& args, const std::string& log,
                                 const std::vector<std::string>& env) {
  // Everything the child needs is prepared before fork: it only calls async-signal-safe code.
  std::vector<std::string> argv_strings = {binary};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv = NullTerminated(argv_strings);
  std::vector<std::string> env_strings = ChildEnvironment(env);
  std::vector<char*> envp = NullTerminated(env_strings);
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
    execve(argv[0], argv.data(), envp.data());
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

std::optional<std::string> LocalCluster::Exited() {
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

void LocalCluster::Stop(absl::Duration grace) {
  for (int sig : {SIGTERM, SIGKILL}) {
    if (!Running()) return;
    for (const Child& c : children_) {
      if (c.pid > 0) kill(c.pid, sig);
    }
    const absl::Time deadline = absl::Now() + grace;
    while (Running() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
  }
}

void LocalCluster::Reap() {
  for (Child& c : children_) {
    if (c.pid > 0 && waitpid(c.pid, &c.status, WNOHANG) == c.pid) c.pid = 0;
  }
}

bool LocalCluster::Running() {
  Reap();
  return std::any_of(children_.begin(), children_.end(), [](const Child& c) { return c.pid > 0; });
}

}  // namespace pp::client
