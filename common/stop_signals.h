// How ppcoord, ppworker and ppctl up take their signals (SIGINT, SIGTERM; SIGHUP too: ppctl up stops
// on it, the daemons reload their --deny_certs list, common/daemon_main.h).
//
// Why this shape. Measured on ppworker (/proc/PID/task/*/status, SigBlk): the threads of gRPC,
// civetweb (prometheus-cpp) and Gloo never change their signal mask, so threads they start after
// main blocked the stop signals keep them blocked. But OpenBLAS starts its thread pool in a
// load-time constructor, before main runs, and those threads block nothing. So blocking plus
// sigwait alone is not enough: a stop signal that arrives while main is not inside sigwait (ppctl
// between two ticks, ppworker while it drains) is delivered to an OpenBLAS thread and, with the
// default action, kills the process without cleanup. A handler alone would be called on any thread
// and interrupt its system calls. So StopSignals does both: Install blocks the signals in the
// calling thread (every thread started later inherits that) and installs a handler that writes the
// signal number into a pipe; Wait unblocks them only inside ppoll on that pipe, atomically. The
// handler runs on main while it waits or on an early thread such as OpenBLAS's; either way the
// signal lands in the pipe: never lost, never fatal.
//
// Contract:
// - Install REQUIRES: called once per process, in main, before the program starts any thread
//   (library constructors' threads are covered, as above). A second call is FailedPrecondition.
// - Wait returns the next stop signal received since Install (each once, in arrival order), or
//   nullopt once `timeout` passed (InfiniteDuration: no timeout). Call it from one thread.
// - original_mask() is the mask from before Install: a forked child restores it before exec (exec
//   resets the handler; the pipe is close-on-exec). A signal that reaches a forked child before
//   exec takes its default action there instead of reaching the parent's pipe.
// - Copies share the process's one pipe, which lives until the process ends.
#ifndef PP_COMMON_STOP_SIGNALS_H_
#define PP_COMMON_STOP_SIGNALS_H_

#include <signal.h>

#include <initializer_list>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pp::common {

class StopSignals {
 public:
  static absl::StatusOr<StopSignals> Install(std::initializer_list<int> signals = {SIGINT,
                                                                                   SIGTERM});

  std::optional<int> Wait(absl::Duration timeout);

  const sigset_t& original_mask() const { return original_; }

 private:
  StopSignals() = default;

  sigset_t stop_{};      // the signals handled
  sigset_t original_{};  // the mask before Install
  sigset_t waiting_{};   // the mask inside ppoll: original_ without stop_
  int read_fd_ = -1;
};

}  // namespace pp::common

#endif  // PP_COMMON_STOP_SIGNALS_H_
