// ppworker: one pipeline rank per process (or GPU). See daemon.h and docs/workerd.md.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "worker/daemon/daemon.h"

ABSL_FLAG(std::string, coordinator, "", "HOST:PORT of ppcoord's gRPC service (required)");
ABSL_FLAG(std::string, grpc, "127.0.0.1:0", "HOST:PORT to serve pp.v1.Worker on; port 0: free");
ABSL_FLAG(std::string, metrics, "127.0.0.1:0", "HOST:PORT to serve Prometheus /metrics on");
ABSL_FLAG(std::string, device, "cpu", "cpu, or cuda:N for GPU N (NCCL transport)");
ABSL_FLAG(std::string, name, "", "worker name; default <host>-<grpc port>");
ABSL_FLAG(std::string, address_file, "",
          "once serving, write {\"grpc\":\"h:p\",\"metrics\":\"h:p\"} to this path");
ABSL_FLAG(std::string, advertise_host, "",
          "host peers and the coordinator reach this worker at; default: the --grpc host, or "
          "this machine's name when that is 0.0.0.0");
ABSL_FLAG(double, comm_timeout, 30,
          "seconds a rendezvous, receive or collective may wait for a peer before the task fails");
ABSL_FLAG(double, drain_timeout, 120,
          "on SIGTERM, seconds to let the running task reach a common step, checkpoint and end");
ABSL_FLAG(bool, async_checkpoints, true,
          "write checkpoint shards on a background thread while training continues");

namespace {

// Written to a temporary name and renamed, so readers never see half a file.
bool WriteAddressFile(const std::string& path, const std::string& grpc,
                      const std::string& metrics) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << "{\"grpc\":\"" << grpc << "\",\"metrics\":\"" << metrics << "\"}\n";
    if (!out.good()) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

// PP_TEST_SHARD_WRITE_PAUSE=STEP:SECONDS (tests only): pause before writing that step's shard.
bool ParseShardPause(pp::daemon::DaemonOptions& options) {
  const char* value = std::getenv("PP_TEST_SHARD_WRITE_PAUSE");
  if (value == nullptr) return true;
  std::pair<std::string, std::string> parts = absl::StrSplit(value, ':');
  double seconds = 0;
  if (!absl::SimpleAtoi(parts.first, &options.pause_shard_step) ||
      !absl::SimpleAtod(parts.second, &seconds) || options.pause_shard_step < 1 || seconds < 0) {
    return false;
  }
  options.pause_shard_for = absl::Seconds(seconds);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "ppworker --coordinator=HOST:PORT [--grpc=HOST:PORT] [--metrics=HOST:PORT] "
      "[--device=cpu|cuda:N] [--name=NAME] [--address_file=PATH]");
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_comm_timeout) <= 0) {
    std::cerr << "ppworker: --comm_timeout must be positive\n";
    return 2;
  }

  // Every thread inherits the blocked set; main alone takes the signals, with sigwait.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  pp::daemon::DaemonOptions options;
  options.coordinator = absl::GetFlag(FLAGS_coordinator);
  options.grpc = absl::GetFlag(FLAGS_grpc);
  options.metrics = absl::GetFlag(FLAGS_metrics);
  options.device = absl::GetFlag(FLAGS_device);
  options.name = absl::GetFlag(FLAGS_name);
  options.advertise_host = absl::GetFlag(FLAGS_advertise_host);
  options.comm_timeout = absl::Seconds(absl::GetFlag(FLAGS_comm_timeout));
  options.async_checkpoints = absl::GetFlag(FLAGS_async_checkpoints);
  if (!ParseShardPause(options)) {
    std::cerr << "ppworker: PP_TEST_SHARD_WRITE_PAUSE: want STEP:SECONDS, got \""
              << std::getenv("PP_TEST_SHARD_WRITE_PAUSE") << "\"\n";
    return 2;
  }
  absl::StatusOr<std::unique_ptr<pp::daemon::WorkerDaemon>> daemon =
      pp::daemon::WorkerDaemon::Start(options);
  if (!daemon.ok()) {
    std::cerr << "ppworker: " << daemon.status().message() << "\n";
    return 2;
  }
  std::cerr << "ppworker: serving gRPC on " << (*daemon)->grpc_address() << ", metrics on "
            << (*daemon)->metrics_address() << ", coordinator " << options.coordinator << "\n";
  const std::string address_file = absl::GetFlag(FLAGS_address_file);
  if (!address_file.empty() &&
      !WriteAddressFile(address_file, (*daemon)->grpc_address(), (*daemon)->metrics_address())) {
    std::cerr << "ppworker: cannot write --address_file=" << address_file << "\n";
    return 1;
  }

  int signal = 0;
  sigwait(&signals, &signal);
  std::cerr << "ppworker: signal " << signal << ", shutting down\n";
  // SIGTERM (Kubernetes drains a node): the running job stops at a checkpoint first.
  if (signal == SIGTERM) (*daemon)->Drain(absl::Seconds(absl::GetFlag(FLAGS_drain_timeout)));
  (*daemon)->Shutdown();
  return 0;
}
