// ppworker: one pipeline rank per process (or GPU). See daemon.h.
#include <signal.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/daemon_flags.h"
#include "common/daemon_main.h"
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
ABSL_FLAG(absl::Duration, comm_timeout, absl::Seconds(30),
          "how long a rendezvous, receive or collective may wait for a peer before the task fails");
ABSL_FLAG(absl::Duration, drain_timeout, absl::Seconds(120),
          "on SIGTERM, how long the running task may take to reach a common step, checkpoint and "
          "end");
ABSL_FLAG(int64_t, memory_bytes, -1,
          "bytes this worker announces for a job's rank (the coordinator places no rank whose "
          "estimated peak exceeds it, and refuses jobs that fit no worker); 0 = unknown; "
          "negative: detect (physical memory on cpu, unknown on cuda)");
ABSL_FLAG(bool, async_checkpoints, true,
          "write checkpoint shards on a background thread while training continues");
ABSL_FLAG(std::string, coordinator_identity, "",
          "with TLS: the certificate common name RunTask, AbortTask, Calibrate and GetStatus must "
          "come from; default: the common name of the certificate ppcoord presents");
ABSL_FLAG(std::vector<std::string>, data_root, {},
          "comma-separated folders a task's data.path must lie in (after resolving symlinks "
          "and ..); empty: anywhere");
ABSL_FLAG(std::vector<std::string>, checkpoint_root, {},
          "comma-separated folders a task's checkpoint folder must lie in; empty: anywhere");
ABSL_FLAG(int, test_slow_after_steps, -1,
          "test only: once this process has completed this many training steps, every compute "
          "action and calibration timing takes --test_slow_factor times as long; negative: off");
ABSL_FLAG(double, test_slow_factor, 1, "test only: see --test_slow_after_steps; 1 to 100");

namespace {

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

// The flags as options; a bad value is InvalidArgument (a usage error).
absl::StatusOr<pp::daemon::DaemonOptions> OptionsFromFlags() {
  pp::daemon::DaemonOptions options;
  options.coordinator = absl::GetFlag(FLAGS_coordinator);
  options.grpc = absl::GetFlag(FLAGS_grpc);
  options.metrics = absl::GetFlag(FLAGS_metrics);
  options.device = absl::GetFlag(FLAGS_device);
  options.name = absl::GetFlag(FLAGS_name);
  options.advertise_host = absl::GetFlag(FLAGS_advertise_host);
  options.comm_timeout = absl::GetFlag(FLAGS_comm_timeout);
  options.async_checkpoints = absl::GetFlag(FLAGS_async_checkpoints);
  options.memory_bytes = absl::GetFlag(FLAGS_memory_bytes);
  const pp::common::SecurityFlags security = pp::common::SecurityFromFlags();
  options.tls = security.tls;
  options.insecure = security.insecure;
  options.coordinator_identity = absl::GetFlag(FLAGS_coordinator_identity);
  options.data_roots = absl::GetFlag(FLAGS_data_root);
  options.checkpoint_roots = absl::GetFlag(FLAGS_checkpoint_root);
  options.test_slow_after_steps = absl::GetFlag(FLAGS_test_slow_after_steps);
  options.test_slow_factor = absl::GetFlag(FLAGS_test_slow_factor);
  if (!(options.test_slow_factor >= 1 && options.test_slow_factor <= 100)) {
    return absl::InvalidArgumentError("--test_slow_factor must be in [1, 100]");
  }
  if (options.comm_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--comm_timeout must be positive");
  }
  if (!ParseShardPause(options)) {
    return absl::InvalidArgumentError(
        absl::StrCat("PP_TEST_SHARD_WRITE_PAUSE: want STEP:SECONDS, got \"",
                     std::getenv("PP_TEST_SHARD_WRITE_PAUSE"), "\""));
  }
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  std::unique_ptr<pp::daemon::WorkerDaemon> worker;
  std::shared_ptr<pp::common::CertDenyList> deny;  // set by start; SIGHUP reloads it
  pp::common::DaemonMain daemon;
  daemon.name = "ppworker";
  daemon.usage =
      "ppworker --coordinator=HOST:PORT [--grpc=HOST:PORT] [--metrics=HOST:PORT] "
      "[--device=cpu|cuda:N] [--name=NAME] [--address_file=PATH] [--memory_bytes=N] "
      "[--tls_cert=PEM --tls_key=PEM --tls_ca=PEM] [--deny_certs=FILE] [--data_root=DIRS] "
      "[--checkpoint_root=DIRS]";
  daemon.address_file = &FLAGS_address_file;
  daemon.start = [&worker, &deny]() -> absl::StatusOr<pp::common::DaemonAddresses> {
    absl::StatusOr<pp::daemon::DaemonOptions> options = OptionsFromFlags();
    if (!options.ok()) return options.status();
    absl::StatusOr<std::shared_ptr<pp::common::CertDenyList>> loaded =
        pp::common::CertDenyList::Load(pp::common::SecurityFromFlags().deny_certs);
    if (!loaded.ok()) return loaded.status();
    deny = *std::move(loaded);
    options->deny_certs = deny;
    absl::StatusOr<std::unique_ptr<pp::daemon::WorkerDaemon>> started =
        pp::daemon::WorkerDaemon::Start(*options);
    if (!started.ok()) return started.status();
    worker = *std::move(started);
    std::cerr << "ppworker: serving gRPC on " << worker->grpc_address() << ", metrics on "
              << worker->metrics_address() << ", coordinator " << options->coordinator << "\n";
    return pp::common::DaemonAddresses{worker->grpc_address(), worker->metrics_address()};
  };
  daemon.stop = [&worker](int signal) {
    // SIGTERM (Kubernetes drains a node): the running job stops at a checkpoint first.
    if (signal == SIGTERM) worker->Drain(absl::GetFlag(FLAGS_drain_timeout));
    worker->Shutdown();
  };
  daemon.reload = [&deny] { return deny->Reload(); };
  return pp::common::RunDaemonMain(daemon, argc, argv);
}
