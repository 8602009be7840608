// ppcoord: the coordinator daemon. Flags below; see coordinator/coordinator.h for what it does.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/daemon_flags.h"
#include "common/daemon_main.h"
#include "common/host_port.h"
#include "coordinator/coordinator.h"

ABSL_FLAG(std::string, grpc, "127.0.0.1:50051",
          "HOST:PORT of the gRPC services (Coordinator, WorkerRegistry); port 0 = a free port");
ABSL_FLAG(std::string, metrics, "127.0.0.1:9090",
          "HOST:PORT of the Prometheus /metrics endpoint; port 0 = a free port");
ABSL_FLAG(std::string, data_dir, "",
          "folder for the job store (ppcoord.db) and checkpoints (checkpoints/<job>/step-<N>/); "
          "ppcoord.lock in it keeps a second ppcoord out");
ABSL_FLAG(std::string, address_file, "",
          "once serving, write {\"grpc\":\"h:p\",\"metrics\":\"h:p\"} to this file");
ABSL_FLAG(absl::Duration, worker_timeout, absl::Seconds(5),
          "a worker silent this long is DOWN: its job restarts from its newest checkpoint "
          "(spec.max_restarts) or FAILS");
ABSL_FLAG(absl::Duration, heartbeat_interval, absl::Seconds(1),
          "how often workers are told to heartbeat");
ABSL_FLAG(std::string, retain_jobs, "30d",
          "an ended job (SUCCEEDED, FAILED, CANCELLED) unchanged this long is deleted from the "
          "store and memory, its checkpoints kept: whole days (30d) or a duration (12h, 2s); "
          "0 keeps ended jobs forever");
ABSL_FLAG(std::string, auth_tokens, "",
          "file of 'TOKEN ROLE NAME' lines (roles admin, submit, view): pp.v1.Coordinator then "
          "needs 'authorization: Bearer TOKEN' or an admin client certificate of "
          "--tls_ca (subject OU=pipeline-admin); needs the --tls_* flags (or --insecure)");
ABSL_FLAG(std::string, policy, "",
          "scheduling policy in proto text format (pp.v1.SchedulingPolicy: priority classes and "
          "who may use them, per-owner quotas, aging, preemption; docs/jobs.md), read again on "
          "SIGHUP; empty: classes low/normal/high open to all, no quotas");
ABSL_FLAG(std::vector<std::string>, data_root, {},
          "comma-separated folders a job's data.path must lie in (after resolving symlinks); "
          "empty: anywhere");

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
  absl::StatusOr<absl::Duration> retain =
      pp::coordinator::ParseRetention(absl::GetFlag(FLAGS_retain_jobs));
  if (!retain.ok()) return retain.status();
  options.retain_jobs = *retain;
  const pp::common::SecurityFlags security = pp::common::SecurityFromFlags();
  options.tls = security.tls;
  options.insecure = security.insecure;
  options.auth_tokens = absl::GetFlag(FLAGS_auth_tokens);
  options.data_roots = absl::GetFlag(FLAGS_data_root);
  options.policy = absl::GetFlag(FLAGS_policy);
  return options;
}

// Tokens guard pp.v1.Coordinator only: without TLS anyone reaching --grpc still registers as a
// worker (and is sent task plans) and reports on jobs, so tokens alone would only look safe.
absl::Status CheckTokensHaveTls(const pp::coordinator::CoordinatorOptions& options) {
  if (options.auth_tokens.empty() || !options.tls.empty()) return absl::OkStatus();
  if (!options.insecure) {
    return absl::InvalidArgumentError(
        "--auth_tokens needs --tls_cert, --tls_key and --tls_ca: without TLS the tokens travel in "
        "plaintext and anyone reaching --grpc can register as a worker and report on jobs; give "
        "the --tls_* flags, or --insecure to run so all the same");
  }
  std::cerr << "ppcoord: WARNING: --insecure: --auth_tokens without TLS: tokens travel in "
               "plaintext and anyone reaching --grpc can register as a worker and report on jobs\n";
  return absl::OkStatus();
}

// Takes the exclusive lock DIR/ppcoord.lock (flock: held until the process ends, a crash
// included) and writes this pid into it, because two ppcoords on one folder would both write its
// store and prune its checkpoints. FailedPrecondition naming the folder and the holder's pid.
absl::Status LockDataDir(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat("--data_dir: cannot create ", dir, ": ", error.message()));
  }
  const std::string path = (std::filesystem::path(dir) / "ppcoord.lock").string();
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--data_dir: cannot open ", path, ": ", std::strerror(errno)));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int why = errno;
    char holder[32] = {};
    const ssize_t n = pread(fd, holder, sizeof(holder) - 1, 0);
    close(fd);
    if (why != EWOULDBLOCK) {
      return absl::FailedPreconditionError(
          absl::StrCat("--data_dir: cannot lock ", path, ": ", std::strerror(why)));
    }
    const std::string pid(absl::StripAsciiWhitespace(std::string(holder, n > 0 ? n : 0)));
    return absl::FailedPreconditionError(
        absl::StrCat("--data_dir ", dir, " is in use by another ppcoord",
                     pid.empty() ? "" : absl::StrCat(" (pid ", pid, ")"), ", which holds ", path));
  }
  const std::string pid = absl::StrCat(getpid(), "\n");
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    std::cerr << "ppcoord: cannot write the pid into " << path << ": " << std::strerror(errno)
              << "\n";  // the lock holds all the same
  }
  return absl::OkStatus();  // fd stays open: the lock lasts as long as the process
}

}  // namespace

int main(int argc, char** argv) {
  std::unique_ptr<pp::coordinator::CoordinatorServer> server;
  std::shared_ptr<pp::common::CertDenyList> deny;  // set by start; SIGHUP reloads it
  pp::common::DaemonMain daemon;
  daemon.name = "ppcoord";
  daemon.usage =
      "ppcoord --grpc=HOST:PORT --metrics=HOST:PORT --data_dir=DIR [--address_file=PATH]\n"
      "        [--tls_cert=PEM --tls_key=PEM --tls_ca=PEM] [--auth_tokens=FILE] "
      "[--deny_certs=FILE] [--data_root=DIRS]\n"
      "        [--retain_jobs=30d] [--policy=FILE]\n"
      "The coordinator daemon of the pipeline-parallel training service.";
  daemon.address_file = &FLAGS_address_file;
  daemon.start = [&server, &deny]() -> absl::StatusOr<pp::common::DaemonAddresses> {
    absl::StatusOr<pp::coordinator::CoordinatorOptions> options = OptionsFromFlags();
    if (!options.ok()) return options.status();
    absl::StatusOr<std::shared_ptr<pp::common::CertDenyList>> loaded =
        pp::common::CertDenyList::Load(pp::common::SecurityFromFlags().deny_certs);
    if (!loaded.ok()) return loaded.status();
    deny = *std::move(loaded);
    options->deny_certs = deny;
    if (absl::Status tokens = CheckTokensHaveTls(*options); !tokens.ok()) return tokens;
    if (!options->data_dir.empty()) {
      if (absl::Status locked = LockDataDir(options->data_dir); !locked.ok()) return locked;
    }
    absl::StatusOr<std::unique_ptr<pp::coordinator::CoordinatorServer>> started =
        pp::coordinator::CoordinatorServer::Start(*options);
    if (!started.ok()) return started.status();
    server = *std::move(started);
    const pp::common::DaemonAddresses addresses{server->grpc_address(), server->metrics_address()};
    std::cerr << "ppcoord: serving " << addresses.ToJson();
    return addresses;
  };
  daemon.stop = [&server](int) { server->Shutdown(); };
  // SIGHUP: the deny-list and the scheduling policy, each kept as it was when its file is bad;
  // the line says what became of each.
  daemon.reload = [&deny, &server]() -> absl::StatusOr<std::string> {
    const absl::StatusOr<std::string> denied = deny->Reload();
    const absl::StatusOr<std::string> policy = server->ReloadPolicy();
    const std::string line = absl::StrCat(denied.ok() ? *denied : denied.status().message(), "; ",
                                          policy.ok() ? *policy : policy.status().message());
    if (denied.ok() && policy.ok()) return line;
    return absl::InvalidArgumentError(line);
  };
  return pp::common::RunDaemonMain(daemon, argc, argv);
}
