// The main() of ppcoord and ppworker: one skeleton, so both daemons treat flags, signals, address
// files and exit codes alike. RunDaemonMain does, in order:
//   1. parse the flags (ParseDaemonFlags): a bad flag or argument exits 2;
//   2. install the signals (StopSignals: SIGINT, SIGTERM and SIGHUP) before any thread starts;
//   3. start(): reads the flags and starts serving; its error exits ExitCodeFor(error)
//      (InvalidArgument: 2, anything else: 1);
//   4. write the addresses start() returned to the --address_file flag's path, if it names one
//      (atomically, common/address_file.h); a failure exits 1;
//   5. wait for a signal: SIGHUP calls reload() and logs the line it returns (or its error), and
//      the daemon goes on; SIGINT or SIGTERM calls stop(signal) and exits 0.
// Before 2 it raises the soft limit of open files to the hard one (a job holds every data shard
// open) and installs a crash report: on SIGSEGV, SIGABRT (glibc's heap checks), SIGBUS, SIGILL,
// SIGFPE or SIGTRAP the stack of the thread the signal reached goes to stderr ("*** SIGABRT
// received; ..." then one "    @ ADDRESS FUNCTION" line a frame), then the process dies of that
// signal.
// Every error is one stderr line "NAME: message". start, reload and stop run on the calling
// thread.
#ifndef PP_COMMON_DAEMON_MAIN_H_
#define PP_COMMON_DAEMON_MAIN_H_

#include <functional>
#include <string>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "common/address_file.h"

namespace pp::common {

struct DaemonMain {
  std::string name;   // "ppcoord": the program, first word of every stderr line
  std::string usage;  // absl's program usage message (--help)
  const absl::Flag<std::string>* address_file = nullptr;  // the --address_file flag
  std::function<absl::StatusOr<DaemonAddresses>()> start;
  std::function<void(int signal)> stop;
  // SIGHUP: reads what may change while serving (the --deny_certs list) again.
  std::function<absl::StatusOr<std::string>()> reload;
};

int RunDaemonMain(const DaemonMain& daemon, int argc, char** argv);

}  // namespace pp::common

#endif  // PP_COMMON_DAEMON_MAIN_H_
