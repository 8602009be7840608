#include "common/stop_signals.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pp::common {
namespace {

// Read by the handler: a lock-free atomic and a value set before the handler exists.
std::atomic<int> g_write_fd{-1};
pid_t g_owner = 0;

void OnStopSignal(int signal) {
  const int saved_errno = errno;
  if (getpid() != g_owner) {
    // A child between fork and exec: the signal is meant for it, not for the parent's pipe.
    // Raised again with the default action, it is delivered once this handler returns.
    ::signal(signal, SIG_DFL);
    raise(signal);
  } else {
    const unsigned char byte = static_cast<unsigned char>(signal);
    (void)!write(g_write_fd.load(), &byte, 1);
  }
  errno = saved_errno;
}

absl::Status ErrnoError(absl::string_view what) {
  return absl::InternalError(absl::StrCat("StopSignals: ", what, ": ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<StopSignals> StopSignals::Install(std::initializer_list<int> signals) {
  static std::atomic<bool> installed{false};
  if (installed.exchange(true)) {
    return absl::FailedPreconditionError("StopSignals::Install: called twice in one process");
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return ErrnoError("pipe2");
  StopSignals s;
  sigemptyset(&s.stop_);
  for (int signal : signals) sigaddset(&s.stop_, signal);
  // Blocked before the handler exists: one arriving in between waits, pending, for Wait.
  if (pthread_sigmask(SIG_BLOCK, &s.stop_, &s.original_) != 0) return ErrnoError("sigmask");
  s.waiting_ = s.original_;
  for (int signal : signals) sigdelset(&s.waiting_, signal);
  s.read_fd_ = fds[0];
  g_owner = getpid();
  g_write_fd = fds[1];
  struct sigaction action {};
  action.sa_handler = OnStopSignal;
  action.sa_mask = s.stop_;
  action.sa_flags = SA_RESTART;  // an early thread's interrupted system call resumes
  for (int signal : signals) {
    if (sigaction(signal, &action, nullptr) != 0) return ErrnoError("sigaction");
  }
  return s;
}

std::optional<int> StopSignals::Wait(absl::Duration timeout) {
  const absl::Time deadline =
      timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + timeout;
  auto take = [this]() -> std::optional<int> {
    unsigned char byte = 0;
    if (read(read_fd_, &byte, 1) == 1) return byte;
    return std::nullopt;
  };
  while (true) {
    if (std::optional<int> signal = take()) return signal;
    timespec left{};
    if (deadline != absl::InfiniteFuture()) {
      left = absl::ToTimespec(std::max(deadline - absl::Now(), absl::ZeroDuration()));
    }
    pollfd pipe{read_fd_, POLLIN, 0};
    // Even with no time left, ppoll runs once: a signal pending while blocked is delivered here.
    const int ready =
        ppoll(&pipe, 1, deadline == absl::InfiniteFuture() ? nullptr : &left, &waiting_);
    if (ready == 0 || (ready < 0 && errno != EINTR)) return take();
    // Readable, or EINTR after the handler ran on this thread: the pipe has the signal.
  }
}

}  // namespace pp::common
