#include "worker/daemon/daemon.h"

#include <unistd.h>

#include <chrono>
#include <exception>
#include <iostream>
#include <memory>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/device.h"
#include "common/host_port.h"
#include "common/metrics_server.h"
#include "common/tls.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "pp/v1/coordinator.grpc.pb.h"
#include "pp/v1/worker.grpc.pb.h"
#include "prometheus/registry.h"
#include "worker/calibrate/calibrate.h"
#include "worker/daemon/access.h"
#include "worker/daemon/metrics.h"
#include "worker/daemon/report.h"
#include "worker/daemon/task.h"
#include "worker/daemon/task_log.h"

namespace pp::daemon {
namespace {

constexpr absl::Duration kMaxBackoff = absl::Seconds(2);

std::string MachineName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

int64_t HostMemoryBytes() {
  return static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
}

class Daemon : public WorkerDaemon, public pp::v1::Worker::Service {
 public:
  explicit Daemon(const DaemonOptions& options)
      : options_(options),
        metrics_(*registry_),
        slowdown_(options.test_slow_after_steps, options.test_slow_factor) {}

  ~Daemon() override { Shutdown(); }

  absl::Status Init() {
    absl::StatusOr<common::HostPort> grpc_at = common::ParseHostPort(options_.grpc, "grpc");
    if (!grpc_at.ok()) return grpc_at.status();
    absl::StatusOr<common::HostPort> metrics_at =
        common::ParseHostPort(options_.metrics, "metrics");
    if (!metrics_at.ok()) return metrics_at.status();
    if (options_.coordinator.empty()) {
      return absl::InvalidArgumentError("--coordinator=HOST:PORT is required");
    }
    if (auto c = common::ParseHostPort(options_.coordinator, "coordinator"); !c.ok()) {
      return c.status();
    }
    if (auto device = common::ParseDevice(options_.device, "device"); !device.ok()) {
      return device.status();
    }
    if (absl::Status security = LoadSecurity(); !security.ok()) return security;
    advertise_host_ = !options_.advertise_host.empty() ? options_.advertise_host
                      : grpc_at->IsWildcard()          ? MachineName()
                                                       : grpc_at->host;
    absl::StatusOr<std::unique_ptr<common::MetricsServer>> metrics_server =
        common::MetricsServer::Serve(*metrics_at, registry_);
    if (!metrics_server.ok()) return metrics_server.status();
    metrics_server_ = *std::move(metrics_server);
    metrics_address_ = absl::StrCat(metrics_at->IsWildcard() ? advertise_host_ : metrics_at->host,
                                    ":", metrics_server_->port());
    if (absl::Status served = ServeGrpc(*grpc_at); !served.ok()) return served;

    registry_stub_ = pp::v1::WorkerRegistry::NewStub(grpc::CreateChannel(
        options_.coordinator,
        tls_.has_value() ? common::ChannelCredentials(*tls_) : grpc::InsecureChannelCredentials()));
    kv_ = comm::NewCoordinatorKvStore(registry_stub_.get());
    heartbeat_thread_ = std::thread([this] { HeartbeatLoop(); });
    return absl::OkStatus();
  }

  std::string grpc_address() const override { return grpc_address_; }
  std::string metrics_address() const override { return metrics_address_; }

  void Shutdown() override {
    std::shared_ptr<Task> task;
    {
      absl::MutexLock lock(&mu_);
      if (shutdown_) return;
      shutdown_ = true;
      task = task_;
      if (calibration_ != nullptr) calibration_->Abort("the worker is shutting down");
      if (heartbeat_call_ != nullptr) heartbeat_call_->TryCancel();
    }
    if (task != nullptr) task->Abort("the worker is shutting down");
    {
      // An aborted task ends within its comm timeout; its report is bounded too.
      absl::MutexLock lock(&mu_);
      auto done = [this] { return task_threads_ == 0; };
      mu_.AwaitWithTimeout(absl::Condition(&done), options_.comm_timeout + absl::Seconds(30));
    }
    if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
    if (server_ != nullptr) server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
    metrics_server_.reset();
  }

  void Drain(absl::Duration timeout) override {
    std::shared_ptr<Task> task;
    {
      absl::MutexLock lock(&mu_);
      draining_ = true;
      if (busy_) task = task_;
    }
    if (task == nullptr) return;
    task->Note("draining: the task stops at a checkpoint");
    task->Drain();
    absl::MutexLock lock(&mu_);
    auto done = [this] { return task_threads_ == 0; };
    mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
  }

  // ---- pp.v1.Worker -------------------------------------------------------------------------
  grpc::Status RunTask(grpc::ServerContext* context, const pp::v1::TaskPlan* plan,
                       pp::v1::RunTaskResponse*) override {
    if (absl::Status from = CheckCoordinator(*context, "RunTask"); !from.ok()) return ToGrpc(from);
    if (absl::Status paths = CheckPlanPaths(*plan, options_.data_roots, options_.checkpoint_roots);
        !paths.ok()) {
      return ToGrpc(paths);
    }
    absl::MutexLock lock(&mu_);
    if (shutdown_ || draining_) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          absl::StrCat("worker ", name_, " is shutting down"));
    }
    if (busy_) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          absl::StrCat("worker ", name_, " is busy with job ",
                                       task_->plan().job_id(), " rank ", task_->plan().rank()));
    }
    TaskEnv env;
    env.kv = kv_.get();
    env.device = options_.device;
    env.rehearse = options_.device != "cpu";  // checked by ParseDevice: cuda:N
    env.hostname = advertise_host_;
    env.comm_timeout = options_.comm_timeout;
    env.async_checkpoints = options_.async_checkpoints;
    env.pause_shard_step = options_.pause_shard_step;
    env.pause_shard_for = options_.pause_shard_for;
    env.slowdown = &slowdown_;
    env.data_roots = options_.data_roots;
    env.log = &task_log_;
    task_ = std::make_shared<Task>(*plan, env);
    busy_ = true;
    metrics_.StartTask(plan->job_id(), plan->rank());
    ++task_threads_;
    std::thread([this, task = task_] { RunTaskThread(task); }).detach();
    return grpc::Status::OK;
  }

  grpc::Status AbortTask(grpc::ServerContext* context, const pp::v1::AbortTaskRequest* request,
                         pp::v1::AbortTaskResponse*) override {
    if (absl::Status from = CheckCoordinator(*context, "AbortTask"); !from.ok()) {
      return ToGrpc(from);
    }
    std::shared_ptr<Task> task;
    {
      absl::MutexLock lock(&mu_);
      // An abort of an earlier attempt may arrive after this worker started the next one.
      if (busy_ && task_->plan().job_id() == request->job_id() &&
          task_->plan().attempt() <= request->attempt()) {
        task = task_;
      }
    }
    if (task != nullptr) {
      task->Abort(request->reason().empty() ? "aborted by the coordinator" : request->reason());
    }
    return grpc::Status::OK;
  }

  grpc::Status Calibrate(grpc::ServerContext* context, const pp::v1::CalibrateRequest* request,
                         pp::v1::RankCalibration* answer) override {
    if (absl::Status from = CheckCoordinator(*context, "Calibrate"); !from.ok()) {
      return ToGrpc(from);
    }
    if (absl::Status s = CheckSpecPaths(request->spec(), options_.data_roots, "calibrate request");
        !s.ok()) {
      return ToGrpc(s);
    }
    if (absl::Status s = calibrate::CheckRequest(*request); !s.ok()) return ToGrpc(s);
    std::shared_ptr<calibrate::Calibration> calibration;
    {
      absl::MutexLock lock(&mu_);
      if (shutdown_ || draining_) {
        return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                            absl::StrCat("worker ", name_, " is shutting down"));
      }
      if (busy_ || calibration_ != nullptr) {
        return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                            absl::StrCat("worker ", name_, " is busy ",
                                         busy_ ? "with a task" : "calibrating"));
      }
      calibration_ = std::make_shared<calibrate::Calibration>(
          *request, calibrate::CalibrateEnv{kv_.get(), options_.device, advertise_host_, name_,
                                            MemoryBytes(), &slowdown_});
      calibration = calibration_;
    }
    absl::StatusOr<pp::v1::RankCalibration> result = calibration->Run();
    {
      absl::MutexLock lock(&mu_);
      calibration_ = nullptr;
    }
    if (!result.ok()) return ToGrpc(result.status());
    *answer = *std::move(result);
    return grpc::Status::OK;
  }

  // The lines this worker's tasks wrote for a job (task_log.h), for the coordinator only.
  grpc::Status ReadTaskLog(grpc::ServerContext* context, const pp::v1::ReadTaskLogRequest* request,
                           pp::v1::ReadTaskLogResponse* response) override {
    if (absl::Status from = CheckCoordinator(*context, "ReadTaskLog"); !from.ok()) {
      return ToGrpc(from);
    }
    absl::StatusOr<pp::v1::ReadTaskLogResponse> read = task_log_.Read(*request);
    if (!read.ok()) return ToGrpc(read.status());
    *response = *std::move(read);
    return grpc::Status::OK;
  }

  grpc::Status GetStatus(grpc::ServerContext* context, const pp::v1::GetStatusRequest*,
                         pp::v1::WorkerStatus* status) override {
    if (absl::Status from = CheckCoordinator(*context, "GetStatus"); !from.ok()) {
      return ToGrpc(from);
    }
    absl::MutexLock lock(&mu_);
    status->set_name(name_);
    status->set_state(busy_ ? "BUSY" : "IDLE");
    if (task_ != nullptr) {
      status->set_job_id(task_->plan().job_id());
      status->set_rank(task_->plan().rank());
      status->set_step(task_->completed_steps());
    }
    return grpc::Status::OK;
  }

 private:
  static grpc::Status ToGrpc(const absl::Status& status) {
    return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                        std::string(status.message()));
  }

  // The listen rule (plaintext only on loopback, unless --insecure), then the TLS files.
  absl::Status LoadSecurity() {
    absl::StatusOr<std::optional<common::TlsConfig>> tls =
        common::LoadDaemonTls("ppworker", options_.grpc, options_.tls, options_.insecure);
    if (!tls.ok()) return tls.status();
    tls_ = *std::move(tls);
    if (absl::Status roots = common::CheckRootsGiven(
            options_.grpc, options_.insecure,
            {{"data_root", &options_.data_roots}, {"checkpoint_root", &options_.checkpoint_roots}});
        !roots.ok()) {
      return roots;
    }
    absl::MutexLock lock(&mu_);
    coordinator_identity_ = options_.coordinator_identity;
    return absl::OkStatus();
  }

  // With TLS, tasks, calibrations, status probes and log reads come only from the coordinator
  // (worker/daemon/access.h).
  absl::Status CheckCoordinator(const grpc::ServerContext& context, absl::string_view method) {
    if (!tls_.has_value()) return absl::OkStatus();
    std::string coordinator;
    {
      absl::MutexLock lock(&mu_);
      coordinator = coordinator_identity_;
    }
    return CheckCallerIs(context, coordinator, method, options_.deny_certs.get());
  }

  // Serves pp.v1.Worker (+ health, reflection) on `at`; sets grpc_address_ and the default name.
  absl::Status ServeGrpc(const common::HostPort& at) {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();
    grpc::ServerBuilder builder;
    int port = 0;
    // Only ppcoord calls a worker: with TLS, no handshake without a client certificate.
    builder.AddListeningPort(options_.grpc,
                             tls_.has_value() ? common::ServerCredentials(*tls_, true)
                                              : grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    if (server_ == nullptr || port == 0) {
      return absl::UnavailableError(absl::StrCat("--grpc=", options_.grpc, ": cannot listen"));
    }
    grpc_address_ = absl::StrCat(at.IsWildcard() ? advertise_host_ : at.host, ":", port);
    absl::MutexLock lock(&mu_);
    name_ = !options_.name.empty() ? options_.name
            : tls_.has_value() && !tls_->common_name.empty()
                ? tls_->common_name
                : absl::StrCat(advertise_host_, "-", port);
    return absl::OkStatus();
  }

  void RunTaskThread(std::shared_ptr<Task> task) {
    RegistryReporter reporter(registry_stub_.get(), &metrics_);
    absl::Status status;
    try {
      status = task->Run(reporter);
    } catch (const std::exception& e) {
      status = absl::InternalError(absl::StrCat("job ", task->plan().job_id(), " rank ",
                                                task->plan().rank(), ": ", e.what()));
    }
    task->Note(EndLine(*task, status));
    const pp::v1::TaskReport report = EndReport(*task, status, name());
    {
      // Free before the report: the coordinator may place the next task as soon as it reads it.
      absl::MutexLock lock(&mu_);
      busy_ = false;
    }
    SendEndReport(registry_stub_.get(), &metrics_, report);
    absl::MutexLock lock(&mu_);
    --task_threads_;  // the last touch of `this` by this thread
  }

  // What this worker announces (and calibration reports) as its memory; 0: unknown.
  int64_t MemoryBytes() const {
    return options_.memory_bytes >= 0 ? options_.memory_bytes
           : options_.device == "cpu"  ? HostMemoryBytes()
                                       : 0;
  }

  std::string name() {
    absl::MutexLock lock(&mu_);
    return name_;
  }

  bool draining() {
    absl::MutexLock lock(&mu_);
    return draining_;
  }

  // Sleeps up to `d`; returns false when shutting down.
  bool Sleep(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&shutdown_), d);
    return !shutdown_;
  }

  // A coordinator that refuses this worker's credentials says why, once per reason: retrying
  // will not help until the certificate or --name is fixed.
  void NoteRefusal(const grpc::Status& status) {
    if (status.error_code() != grpc::StatusCode::UNAUTHENTICATED &&
        status.error_code() != grpc::StatusCode::PERMISSION_DENIED) {
      return;
    }
    absl::MutexLock lock(&mu_);
    if (status.error_message() == last_refusal_) return;
    last_refusal_ = status.error_message();
    std::cerr << "ppworker: the coordinator refuses this worker: " << last_refusal_ << "\n";
  }

  // With TLS and no --coordinator_identity: the common name of the certificate ppcoord presents,
  // read from a heartbeat (which registers nothing) before the first registration, because ppcoord
  // may push a task the moment it has registered this worker. False while it cannot be read.
  bool LearnCoordinatorIdentity() {
    {
      absl::MutexLock lock(&mu_);
      if (!tls_.has_value() || !coordinator_identity_.empty()) return true;
    }
    grpc::ClientContext context;
    SetDeadline(context, kRpcDeadline);
    pp::v1::HeartbeatRequest request;
    request.set_name(name());
    pp::v1::HeartbeatResponse response;
    if (grpc::Status status = registry_stub_->Heartbeat(&context, request, &response);
        !status.ok()) {
      NoteRefusal(status);
      return false;
    }
    std::string identity;
    for (const grpc::string_ref& cn :
         context.auth_context()->FindPropertyValues("x509_common_name")) {
      identity.assign(cn.data(), cn.size());
    }
    absl::MutexLock lock(&mu_);
    coordinator_identity_ = identity;
    return !identity.empty();
  }

  bool Register() {
    if (!LearnCoordinatorIdentity()) {
      metrics_.RpcError("RegisterWorker");
      return false;
    }
    pp::v1::RegisterWorkerRequest request;
    pp::v1::WorkerInfo* info = request.mutable_worker();
    info->set_name(name());
    info->set_address(grpc_address_);
    info->set_device(options_.device);
    info->set_memory_bytes(MemoryBytes());
    info->set_host(advertise_host_);
    {
      // A coordinator that restarted learns what this worker still runs.
      absl::MutexLock lock(&mu_);
      if (busy_) {
        info->set_job_id(task_->plan().job_id());
        info->set_attempt(task_->plan().attempt());
      }
    }
    grpc::ClientContext context;
    SetDeadline(context, kRpcDeadline);
    pp::v1::RegisterWorkerResponse response;
    if (grpc::Status status = registry_stub_->RegisterWorker(&context, request, &response);
        !status.ok()) {
      NoteRefusal(status);
      metrics_.RpcError("RegisterWorker");
      return false;
    }
    absl::MutexLock lock(&mu_);
    if (!response.name().empty()) name_ = response.name();
    heartbeat_ = response.heartbeat_seconds() > 0 ? absl::Seconds(response.heartbeat_seconds())
                                                  : absl::Seconds(1);
    return true;
  }

  void HeartbeatLoop() {
    absl::Duration backoff = absl::Milliseconds(100);
    bool registered = false;
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        if (shutdown_) return;
      }
      // A draining worker leaves: a coordinator that forgot it must not place work on it.
      if (!registered && draining()) {
        if (!Sleep(kMaxBackoff)) return;
        continue;
      }
      if (!registered) {
        registered = Register();
        if (!registered) {
          if (!Sleep(backoff)) return;
          backoff = std::min(backoff * 2, kMaxBackoff);
          continue;
        }
        backoff = absl::Milliseconds(100);
      }
      absl::Duration interval;
      const std::optional<bool> known = Heartbeat(&interval);
      if (!known.has_value()) return;
      registered = *known;
      if (registered && !Sleep(interval)) return;
    }
  }

  // One heartbeat; aborts the running task when the answer names its job. Returns nullopt when
  // shutting down, else whether the coordinator still knows this worker (a failed call says
  // nothing, so it counts as known), and sets *interval to the heartbeat period.
  std::optional<bool> Heartbeat(absl::Duration* interval) {
    pp::v1::HeartbeatRequest request;
    std::shared_ptr<Task> task;
    grpc::ClientContext context;
    SetDeadline(context, kRpcDeadline);
    {
      absl::MutexLock lock(&mu_);
      if (shutdown_) return std::nullopt;
      request.set_name(name_);
      if (busy_) {
        task = task_;
        request.set_job_id(task_->plan().job_id());
        request.set_attempt(task_->plan().attempt());
      }
      *interval = heartbeat_;
      heartbeat_call_ = &context;  // Shutdown cancels it rather than wait for its deadline
    }
    pp::v1::HeartbeatResponse response;
    const grpc::Status status = registry_stub_->Heartbeat(&context, request, &response);
    {
      absl::MutexLock lock(&mu_);
      heartbeat_call_ = nullptr;
    }
    if (!status.ok()) {
      metrics_.RpcError("Heartbeat");
      return true;
    }
    for (const std::string& job : response.abort_jobs()) {
      if (task != nullptr && task->plan().job_id() == job) {
        task->Abort("the coordinator aborted the job");
      }
    }
    return response.known();
  }

  DaemonOptions options_;
  std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();
  WorkerMetrics metrics_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<common::MetricsServer> metrics_server_;
  std::unique_ptr<pp::v1::WorkerRegistry::Stub> registry_stub_;
  std::unique_ptr<comm::KvStore> kv_;
  std::string advertise_host_;
  std::string grpc_address_;
  std::string metrics_address_;
  std::thread heartbeat_thread_;
  std::optional<common::TlsConfig> tls_;  // set by Init, then read only
  executor::Slowdown slowdown_;           // test hook, shared by every task and calibration
  TaskLog task_log_;                      // every task's lines (locks itself)

  absl::Mutex mu_;
  std::string name_ ABSL_GUARDED_BY(mu_);
  std::string coordinator_identity_ ABSL_GUARDED_BY(mu_);
  std::string last_refusal_ ABSL_GUARDED_BY(mu_);
  absl::Duration heartbeat_ ABSL_GUARDED_BY(mu_) = absl::Seconds(1);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  int task_threads_ ABSL_GUARDED_BY(mu_) = 0;  // detached task threads still running
  std::shared_ptr<Task> task_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<calibrate::Calibration> calibration_ ABSL_GUARDED_BY(mu_);  // while one runs
  grpc::ClientContext* heartbeat_call_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace

absl::StatusOr<std::unique_ptr<WorkerDaemon>> WorkerDaemon::Start(const DaemonOptions& options) {
  auto daemon = std::make_unique<Daemon>(options);
  if (absl::Status s = daemon->Init(); !s.ok()) return s;
  return daemon;
}

}  // namespace pp::daemon
