// ppcoord: the coordinator daemon. Flags below; see coordinator/coordinator.h for what it does.
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "common/file_io.h"
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
int g_signal_pipe[2];
}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "ppcoord --grpc=HOST:PORT --metrics=HOST:PORT --data_dir=DIR [--address_file=PATH]\n"
      "The coordinator daemon of the pipeline-parallel training service.");
  const std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    std::cerr << "ppcoord: unexpected argument \"" << rest[1] << "\" (see --help)\n";
    return 2;
  }
  // Some library threads unblock signals, so a handler (not sigwait) catches them; it only
  // writes to a pipe that main() waits on.
  if (pipe(g_signal_pipe) != 0) {
    std::cerr << "ppcoord: cannot create a pipe for signals\n";
    return 1;
  }
  struct sigaction action {};
  action.sa_handler = [](int signal) {
    const char byte = static_cast<char>(signal);
    (void)!write(g_signal_pipe[1], &byte, 1);
  };
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);

  pp::coordinator::CoordinatorOptions options;
  options.grpc_address = absl::GetFlag(FLAGS_grpc);
  options.metrics_address = absl::GetFlag(FLAGS_metrics);
  options.data_dir = absl::GetFlag(FLAGS_data_dir);
  options.worker_timeout = absl::GetFlag(FLAGS_worker_timeout);
  options.heartbeat_interval = absl::GetFlag(FLAGS_heartbeat_interval);
  absl::StatusOr<std::unique_ptr<pp::coordinator::CoordinatorServer>> server =
      pp::coordinator::CoordinatorServer::Start(options);
  if (!server.ok()) {
    std::cerr << "ppcoord: " << server.status().message() << "\n";
    return 1;
  }
  const std::string addresses =
      absl::StrCat("{\"grpc\":\"", (*server)->grpc_address(), "\",\"metrics\":\"",
                   (*server)->metrics_address(), "\"}\n");
  if (const std::string path = absl::GetFlag(FLAGS_address_file); !path.empty()) {
    if (absl::Status written = pp::common::WriteFileAtomic(path, addresses); !written.ok()) {
      std::cerr << "ppcoord: --address_file: " << written.message() << "\n";
      return 1;
    }
  }
  std::cerr << "ppcoord: serving " << addresses;
  char signal = 0;
  while (read(g_signal_pipe[0], &signal, 1) < 0 && errno == EINTR) {
  }
  std::cerr << "ppcoord: signal " << static_cast<int>(signal) << ", shutting down\n";
  (*server)->Shutdown();
  return 0;
}
