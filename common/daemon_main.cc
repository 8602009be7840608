#include "common/daemon_main.h"

#include <iostream>
#include <optional>

#include "absl/flags/usage.h"
#include "common/daemon_flags.h"
#include "common/exit_code.h"
#include "common/stop_signals.h"

namespace pp::common {

int RunDaemonMain(const DaemonMain& daemon, int argc, char** argv) {
  absl::SetProgramUsageMessage(daemon.usage);
  auto fail = [&daemon](const absl::Status& status, int code) {
    std::cerr << daemon.name << ": " << status.message() << "\n";
    return code;
  };
  if (absl::Status parsed = ParseDaemonFlags(argc, argv); !parsed.ok()) {
    return fail(parsed, kExitUsage);
  }
  // Before any thread starts: see common/stop_signals.h.
  absl::StatusOr<StopSignals> stop = StopSignals::Install();
  if (!stop.ok()) return fail(stop.status(), kExitFailure);
  absl::StatusOr<DaemonAddresses> addresses = daemon.start();
  if (!addresses.ok()) return fail(addresses.status(), ExitCodeFor(addresses.status()));
  if (const std::string path = absl::GetFlag(*daemon.address_file); !path.empty()) {
    if (absl::Status written = WriteAddressFile(path, *addresses); !written.ok()) {
      std::cerr << daemon.name << ": --address_file: " << written.message() << "\n";
      return kExitFailure;
    }
  }
  const std::optional<int> signal = stop->Wait(absl::InfiniteDuration());
  std::cerr << daemon.name << ": signal " << signal.value_or(0) << ", shutting down\n";
  daemon.stop(signal.value_or(0));
  return kExitOk;
}

}  // namespace pp::common
