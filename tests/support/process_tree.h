// For testing a program that starts others (`ppctl up`): which processes it started, and proof
// afterwards that none of them is left. A test that calls BecomeSubreaper inherits the orphans of
// its children, so a daemon that outlived its launcher is re-parented to the test (found, and
// killed) instead of to init.
#ifndef PP_TESTS_SUPPORT_PROCESS_TREE_H_
#define PP_TESTS_SUPPORT_PROCESS_TREE_H_

#include <sys/types.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tests/support/process.h"

namespace pp::testing_support {

// The pids whose parent is `parent` (from /proc/<pid>/stat).
std::vector<pid_t> ChildrenOf(pid_t parent);
// Makes this process a child subreaper (idempotent).
void BecomeSubreaper();
bool Exists(pid_t pid);

// A launcher in a process group of its own, and every child it was seen starting: children are
// noted while a Wait* polls (every 20 ms). Going away, it SIGKILLs the launcher and then every
// noted child that was re-parented to this process, never a pid that may have been reused.
class Launcher {
 public:
  static absl::StatusOr<std::unique_ptr<Launcher>> Start(const std::vector<std::string>& argv,
                                                         const std::string& log);
  ~Launcher();

  pid_t pid() const { return process_->pid(); }
  std::string Output() const { return process_->Log(); }
  const std::set<pid_t>& children_seen() const { return children_; }
  bool signaled() const { return process_->signaled(); }

  // True once `text` is in the output; false when the launcher exited or `timeout` passed first.
  bool WaitForOutput(const std::string& text, absl::Duration timeout);
  // Process::Wait, noting children meanwhile.
  absl::StatusOr<int> Wait(absl::Duration timeout);

 private:
  explicit Launcher(std::unique_ptr<Process> process) : process_(std::move(process)) {}
  void NoteChildren();

  std::unique_ptr<Process> process_;
  std::set<pid_t> children_;
};

}  // namespace pp::testing_support

#endif  // PP_TESTS_SUPPORT_PROCESS_TREE_H_
