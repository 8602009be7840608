#include "tests/support/process_tree.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace pp::testing_support {
namespace {

constexpr absl::Duration kPoll = absl::Milliseconds(20);

}  // namespace

std::vector<pid_t> ChildrenOf(pid_t parent) {
  std::vector<pid_t> children;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", error)) {
    pid_t pid;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &pid)) continue;
    // /proc/<pid>/stat: "pid (comm) state ppid ..."; comm may hold spaces and parentheses.
    const std::string stat = ReadFile(entry.path().string() + "/stat");
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::vector<std::string> fields = absl::StrSplit(stat.substr(close + 2), ' ');
    pid_t ppid;
    if (fields.size() > 1 && absl::SimpleAtoi(fields[1], &ppid) && ppid == parent) {
      children.push_back(pid);
    }
  }
  return children;
}

void BecomeSubreaper() { prctl(PR_SET_CHILD_SUBREAPER, 1); }

bool Exists(pid_t pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

absl::StatusOr<std::unique_ptr<Launcher>> Launcher::Start(const std::vector<std::string>& argv,
                                                          const std::string& log) {
  ProcessOptions options;
  options.own_process_group = true;
  absl::StatusOr<std::unique_ptr<Process>> process = Process::Start(argv, log, options);
  if (!process.ok()) return process.status();
  return std::unique_ptr<Launcher>(new Launcher(*std::move(process)));
}

Launcher::~Launcher() {
  process_.reset();
  // Anything left means a test already failed. The launcher is gone: its orphans are this
  // process's children now.
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (absl::Now() < deadline) {
    bool left = false;
    for (pid_t child : ChildrenOf(getpid())) {
      if (!children_.contains(child)) continue;
      left = true;
      kill(child, SIGKILL);
      waitpid(child, nullptr, WNOHANG);
    }
    if (!left) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
}

void Launcher::NoteChildren() {
  if (!process_->running()) return;
  for (pid_t child : ChildrenOf(pid())) children_.insert(child);
}

bool Launcher::WaitForOutput(const std::string& text, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    NoteChildren();
    if (Output().find(text) != std::string::npos) return true;
    if (process_->Wait(absl::ZeroDuration()).ok()) return false;
    absl::SleepFor(kPoll);
  }
  return false;
}

absl::StatusOr<int> Launcher::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    NoteChildren();
    absl::StatusOr<int> code = process_->Wait(absl::ZeroDuration());
    if (code.ok() || absl::Now() >= deadline) return code;
    absl::SleepFor(kPoll);
  }
}

}  // namespace pp::testing_support
