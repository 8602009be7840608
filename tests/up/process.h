// Test helpers for `ppctl up`: start the real ppctl binary like a shell job (its own process
// group, output to a file), watch which processes it starts, and prove afterwards that none of
// them is left. The test process makes itself a child subreaper, so a daemon that outlived ppctl
// would be re-parented to the test (and found, and killed) instead of to init.
#ifndef PP_TESTS_UP_PROCESS_H_
#define PP_TESTS_UP_PROCESS_H_

#include <sys/types.h>

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace pp::testing_up {

std::string ReadText(const std::string& path);
void WriteText(const std::string& path, const std::string& text);

// A fresh folder under TMPDIR (or /tmp), removed by RemoveTree.
std::string MakeTempDir();
void RemoveTree(const std::string& path);

// The pids whose parent is `parent` (from /proc/<pid>/stat).
std::vector<pid_t> ChildrenOf(pid_t parent);

// A free TCP port on 127.0.0.1 (bound to port 0 and released).
int FreePort();

// `GET path` from 127.0.0.1:port over HTTP/1.0: the body, or nullopt when it cannot connect or
// the status is not 200.
std::optional<std::string> HttpGet(int port, const std::string& path);

// One started program and everything it was seen starting.
class Launched {
 public:
  // Runs `binary args...` in a new process group with stdout and stderr to `output`.
  Launched(const std::string& binary, const std::vector<std::string>& args,
           const std::string& output);
  ~Launched();  // SIGKILLs and reaps whatever is still there (a failed test leaves nothing)

  pid_t pid() const { return pid_; }
  std::string Output() const { return ReadText(output_); }
  const std::set<pid_t>& children_seen() const { return children_; }

  // Polls every 20 ms, noting the children, until `text` is in the output (true), or the
  // program exited or `timeout` passed (false).
  bool WaitForOutput(const std::string& text, absl::Duration timeout);
  // The wait status once it exited within `timeout` (nullopt if it still runs).
  std::optional<int> WaitExit(absl::Duration timeout);

 private:
  void NoteChildren();

  pid_t pid_;
  std::string output_;
  std::set<pid_t> children_;
  std::optional<int> status_;
};

// Becomes a child subreaper (idempotent).
void BecomeSubreaper();
// Reaps every exited child of this process; returns their pids (orphans re-parented here, or
// programs the test started and did not wait for).
std::vector<pid_t> ReapAny();
bool Exists(pid_t pid);

}  // namespace pp::testing_up

#endif  // PP_TESTS_UP_PROCESS_H_
