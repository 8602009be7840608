#include "common/daemon_main.h"

#include <signal.h>
#include <sys/resource.h>

#include <iostream>
#include <optional>
#include <string>

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
