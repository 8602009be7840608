// ppcoord: the coordinator daemon. Flags below; see coordinator/coordinator.h for what it does.
#include <iostream>
#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "common/address_file.h"
#include "common/daemon_flags.h"
#include "common/exit_code.h"
#include "common/host_port.h"
#include "common/stop_signals.h"
#include "coordinator/coordinator.h"

ABSL_FLAG(std::string, grpc, "127.0.0.1:50051",
          "HOST:PORT of the gRPC services (Coordinator, WorkerRegistry); port 0 = a free port");
ABSL_FLAG(std::string, metrics, "127.0.0.1:9090",
          "HOST:PORT of the Prometheus /metrics endpoint; port 0 = a free port");
ABSL_FLAG(std::string, data_dir, "",
          "folder for the job store (ppcoord.db) and checkpoints (checkpoints/<job>/step-<N>/)");
ABSL_FLAG(std::string, address_file, "",
          "once serving, write {\"grpc\":\"h:p\",\"metrics\":\"h:p\"} to this file");
ABSL_FLAG(absl::Duration, worker_timeout, absl::Seconds(5),
          "a worker silent this long is DOWN: its job restarts from its newest checkpoint "
          "(spec.max_restarts) or FAILS");
ABSL_FLAG(absl::Duration, heartbeat_interval, absl::Seconds(1),
          "how often workers are told to heartbeat");

namespace {

// The flags as options; a malformed address is a usage error (InvalidArgument).
absl::StatusOr<pp::coordinator::CoordinatorOptions> OptionsFromFlags() {
  pp::coordinator::CoordinatorOptions options;
  options.grpc_address = absl::GetFlag(FLAGS_grpc);
  options.metrics_address = absl::GetFlag(FLAGS_metrics);
  if (auto grpc = pp::common::ParseHostPort(options.grpc_address, "grpc"); !grpc.ok()) {
    return grpc.status();
  }
  if (auto metrics = pp::common::ParseHostPort(options.metrics_address, "metrics"); !metrics.ok()) {
    return metrics.status();
  }
  options.data_dir = absl::GetFlag(FLAGS_data_dir);
  options.worker_timeout = absl::GetFlag(FLAGS_worker_timeout);
  options.heartbeat_interval = absl::GetFlag(FLAGS_heartbeat_interval);
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "ppcoord --grpc=HOST:PORT --metrics=HOST:PORT --data_dir=DIR [--address_file=PATH]\n"
      "The coordinator daemon of the pipeline-parallel training service.");
  if (absl::Status parsed = pp::common::ParseDaemonFlags(argc, argv); !parsed.ok()) {
    std::cerr << "ppcoord: " << parsed.message() << "\n";
    return pp::common::kExitUsage;
  }
  // Before any thread starts: see common/stop_signals.h.
  absl::StatusOr<pp::common::StopSignals> stop = pp::common::StopSignals::Install();
  if (!stop.ok()) {
    std::cerr << "ppcoord: " << stop.status().message() << "\n";
    return pp::common::kExitFailure;
  }
  absl::StatusOr<pp::coordinator::CoordinatorOptions> options = OptionsFromFlags();
  if (!options.ok()) {
    std::cerr << "ppcoord: " << options.status().message() << "\n";
    return pp::common::ExitCodeFor(options.status());
  }
  absl::StatusOr<std::unique_ptr<pp::coordinator::CoordinatorServer>> server =
      pp::coordinator::CoordinatorServer::Start(*options);
  if (!server.ok()) {
    std::cerr << "ppcoord: " << server.status().message() << "\n";
    return pp::common::ExitCodeFor(server.status());
  }
  const pp::common::DaemonAddresses addresses{(*server)->grpc_address(),
                                              (*server)->metrics_address()};
  if (const std::string path = absl::GetFlag(FLAGS_address_file); !path.empty()) {
    if (absl::Status written = pp::common::WriteAddressFile(path, addresses); !written.ok()) {
      std::cerr << "ppcoord: --address_file: " << written.message() << "\n";
      return pp::common::kExitFailure;
    }
  }
  std::cerr << "ppcoord: serving " << addresses.ToJson();
  const std::optional<int> signal = stop->Wait(absl::InfiniteDuration());
  std::cerr << "ppcoord: signal " << signal.value_or(0) << ", shutting down\n";
  (*server)->Shutdown();
  return pp::common::kExitOk;
}
