#include "common/daemon_main.h"

#include <execinfo.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <iostream>
#include <optional>
#include <string>

#include "absl/debugging/symbolize.h"
#include "absl/flags/usage.h"
#include "common/daemon_flags.h"
#include "common/exit_code.h"
#include "common/stop_signals.h"

namespace pp::common {
namespace {

// SIGHUP: one line, whatever reload says; the daemon keeps serving.
void Reload(const DaemonMain& daemon) {
  const absl::StatusOr<std::string> note =
      daemon.reload ? daemon.reload() : std::string("nothing to reload");
  std::cerr << daemon.name << ": SIGHUP: " << (note.ok() ? *note : note.status().message())
            << "\n";
}

// A job keeps every data file open while it trains (worker/data/data.h; up to
// common::kMaxDataFiles shards) beside its sockets and checkpoint files: the usual soft limit of
// 1024 descriptors is too few, the hard limit is the administrator's bound. A failure leaves the
// soft limit as it was (opening files then fails with an error naming the file).
void RaiseOpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
}

// The crash report (daemon_main.h). Frames come from glibc's backtrace(), which unwinds by the
// DWARF tables libc's own functions carry too; absl's failure handler walks frame pointers, which
// neither our -O2 code nor libc keeps, and stopped at the first frame (tried: "@ 0x31 (unknown)"
// under ppoll). Names come from absl::Symbolize. Everything here is async-signal-safe once
// backtrace() has run once (its first call loads libgcc_s): write(2), no allocation, no stdio.
constexpr int kCrashSignals[] = {SIGSEGV, SIGABRT, SIGBUS, SIGILL, SIGFPE, SIGTRAP};

void WriteStderr(const char* text) {
  for (size_t left = strlen(text); left > 0;) {
    const ssize_t wrote = write(STDERR_FILENO, text, left);
    if (wrote <= 0) return;
    text += wrote;
    left -= static_cast<size_t>(wrote);
  }
}

// "0x" and the hex digits of `value` into out (19 bytes at least).
void FormatHex(uintptr_t value, char* out) {
  char digits[16];
  int n = 0;
  do {
    digits[n++] = "0123456789abcdef"[value & 15];
    value >>= 4;
  } while (value != 0);
  *out++ = '0', *out++ = 'x';
  while (n > 0) *out++ = digits[--n];
  *out = '\0';
}

void OnCrash(int signal) {
  const char* abbrev = sigabbrev_np(signal);
  WriteStderr("*** SIG");
  WriteStderr(abbrev != nullptr ? abbrev : "?");
  WriteStderr(" received; the stack of the thread it reached, innermost first:\n");
  void* frames[64];
  const int n = backtrace(frames, 64);
  for (int i = 0; i < n; ++i) {
    char address[24], name[256];
    FormatHex(reinterpret_cast<uintptr_t>(frames[i]), address);
    if (!absl::Symbolize(frames[i], name, sizeof(name))) strcpy(name, "(unknown)");
    WriteStderr("    @ ");
    WriteStderr(address);
    WriteStderr(" ");
    WriteStderr(name);
    WriteStderr("\n");
  }
  raise(signal);  // SA_RESETHAND put the default action back: the process dies of the signal
}

void InstallCrashReport(const char* argv0) {
  absl::InitializeSymbolizer(argv0);
  void* warm[1];
  backtrace(warm, 1);
  struct sigaction action {};
  action.sa_handler = OnCrash;
  action.sa_flags = SA_RESETHAND;
  sigemptyset(&action.sa_mask);
  for (int signal : kCrashSignals) sigaction(signal, &action, nullptr);
}

}  // namespace

int RunDaemonMain(const DaemonMain& daemon, int argc, char** argv) {
  absl::SetProgramUsageMessage(daemon.usage);
  auto fail = [&daemon](const absl::Status& status, int code) {
    std::cerr << daemon.name << ": " << status.message() << "\n";
    return code;
  };
  if (absl::Status parsed = ParseDaemonFlags(argc, argv); !parsed.ok()) {
    return fail(parsed, kExitUsage);
  }
  RaiseOpenFileLimit();
  InstallCrashReport(argv[0]);
  // Before any thread starts: see common/stop_signals.h.
  absl::StatusOr<StopSignals> stop = StopSignals::Install({SIGINT, SIGTERM, SIGHUP});
  if (!stop.ok()) return fail(stop.status(), kExitFailure);
  absl::StatusOr<DaemonAddresses> addresses = daemon.start();
  if (!addresses.ok()) return fail(addresses.status(), ExitCodeFor(addresses.status()));
  if (const std::string path = absl::GetFlag(*daemon.address_file); !path.empty()) {
    if (absl::Status written = WriteAddressFile(path, *addresses); !written.ok()) {
      std::cerr << daemon.name << ": --address_file: " << written.message() << "\n";
      return kExitFailure;
    }
  }
  std::optional<int> signal = stop->Wait(absl::InfiniteDuration());
  for (; signal == SIGHUP; signal = stop->Wait(absl::InfiniteDuration())) Reload(daemon);
  std::cerr << daemon.name << ": signal " << signal.value_or(0) << ", shutting down\n";
  daemon.stop(signal.value_or(0));
  return kExitOk;
}

}  // namespace pp::common
