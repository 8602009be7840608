// gRPC adapters of the Coordinator and WorkerRegistry services over JobManager, and the server.
#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "coordinator/coordinator.h"
#include "common/host_port.h"
#include "common/mesh.h"
#include "coordinator/jobs.h"
#include "coordinator/metrics.h"
#include "coordinator/peer_limit.h"
#include "coordinator/plan/render.h"
#include "coordinator/placement.h"
#include "coordinator/planning.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/resource_quota.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "pp/v1/coordinator.grpc.pb.h"

namespace pp::coordinator {
namespace {

// WatchJob streams one client host may hold open; each holds a server thread while it is open.
constexpr int kMaxWatchesPerHost = 16;

// Threads the gRPC server may run for calls (its thread quota). A watch and a rendezvous wait each
// hold one while open: this leaves room for every rank of the largest job (4096, as the spec
// limits allow) to wait in KvGet at once, with as many again for watches, reports and heartbeats.
constexpr int kMaxServerThreads = 8192;

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // absl and gRPC share the canonical code numbers.
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}


class CoordinatorService final : public pp::v1::Coordinator::Service {
 public:
  CoordinatorService(JobManager* jobs, CoordinatorMetrics* metrics)
      : jobs_(jobs), metrics_(metrics) {}

  grpc::Status SubmitJob(grpc::ServerContext*, const pp::v1::SubmitJobRequest* request,
                         pp::v1::SubmitJobResponse* response) override {
    absl::StatusOr<std::string> id = jobs_->Submit(request->spec());
    if (id.ok()) response->set_job_id(*id);
    return Answer("SubmitJob", id.status());
  }

  grpc::Status GetJob(grpc::ServerContext*, const pp::v1::GetJobRequest* request,
                      pp::v1::Job* response) override {
    absl::StatusOr<pp::v1::Job> job = jobs_->Get(request->job_id());
    if (job.ok()) *response = *std::move(job);
    return Answer("GetJob", job.status());
  }

  grpc::Status ListJobs(grpc::ServerContext*, const pp::v1::ListJobsRequest* request,
                        pp::v1::ListJobsResponse* response) override {
    absl::StatusOr<pp::v1::ListJobsResponse> page = jobs_->List(*request);
    if (page.ok()) *response = *std::move(page);
    return Answer("ListJobs", page.status());
  }

  grpc::Status WatchJob(grpc::ServerContext* context, const pp::v1::WatchJobRequest* request,
                        grpc::ServerWriter<pp::v1::JobEvent>* writer) override {
    absl::StatusOr<std::unique_ptr<PeerLimit::Slot>> slot = watches_.Acquire(context->peer());
    if (!slot.ok()) return Answer("WatchJob", slot.status());
    absl::Status status = jobs_->Watch(
        request->job_id(), [writer](const pp::v1::JobEvent& e) { return writer->Write(e); },
        [context] { return context->IsCancelled(); });
    return Answer("WatchJob",
                  status.code() == absl::StatusCode::kCancelled ? absl::OkStatus() : status);
  }

  grpc::Status CancelJob(grpc::ServerContext*, const pp::v1::CancelJobRequest* request,
                         pp::v1::Job* response) override {
    absl::StatusOr<pp::v1::Job> job = jobs_->Cancel(request->job_id());
    if (job.ok()) *response = *std::move(job);
    return Answer("CancelJob", job.status());
  }

  grpc::Status ResumeJob(grpc::ServerContext*, const pp::v1::ResumeJobRequest* request,
                         pp::v1::Job* response) override {
    absl::StatusOr<pp::v1::Job> job = jobs_->Resume(*request);
    if (job.ok()) *response = *std::move(job);
    return Answer("ResumeJob", job.status());
  }

  grpc::Status ListWorkers(grpc::ServerContext*, const pp::v1::ListWorkersRequest*,
                           pp::v1::ListWorkersResponse* response) override {
    for (pp::v1::WorkerInfo& w : jobs_->Workers()) *response->add_workers() = std::move(w);
    return grpc::Status::OK;
  }

  grpc::Status PlanJob(grpc::ServerContext*, const pp::v1::PlanJobRequest* request,
                       pp::v1::PlanJobResponse* response) override {
    absl::StatusOr<PlannedJob> planned = PlanJobSpec(request->spec());
    if (planned.ok()) {
      absl::StatusOr<std::string> ascii =
          pp::plan::RenderScheduleAscii(planned->schedule, PlanningCosts());
      if (ascii.ok()) response->set_ascii(*std::move(ascii));
      *response->mutable_schedule() = std::move(planned->schedule);
      response->mutable_stage_layers()->Assign(planned->stage_units.begin(),
                                               planned->stage_units.end());
      const std::vector<int> stage_to_rank(response->schedule().stage_to_rank().begin(),
                                           response->schedule().stage_to_rank().end());
      absl::StatusOr<common::Mesh> mesh = common::MeshOf(planned->spec);
      if (mesh.ok()) {
        for (pp::v1::RankPlacement& rank : MeshRanks(*mesh, stage_to_rank)) {
          *response->add_ranks() = std::move(rank);
        }
        response->set_mesh(mesh->ToString());
      }
      for (const pp::plan::RankMemory& rank : planned->memory) {
        *response->add_memory() = pp::plan::MemoryToProto(rank);
      }
    }
    return Answer("PlanJob", planned.status());
  }

  grpc::Status GetTrace(grpc::ServerContext*, const pp::v1::GetTraceRequest* request,
                        pp::v1::StepTrace* response) override {
    absl::StatusOr<pp::v1::StepTrace> trace = jobs_->Trace(request->job_id(), request->step());
    if (trace.ok()) *response = *std::move(trace);
    return Answer("GetTrace", trace.status());
  }

 private:
  grpc::Status Answer(const char* method, const absl::Status& status) {
    if (!status.ok()) metrics_->RpcError(absl::StrCat("pp.v1.Coordinator/", method));
    return ToGrpc(status);
  }

  JobManager* jobs_;
  CoordinatorMetrics* metrics_;
  PeerLimit watches_{kMaxWatchesPerHost, "WatchJob streams"};
};

class RegistryService final : public pp::v1::WorkerRegistry::Service {
 public:
  RegistryService(JobManager* jobs, CoordinatorMetrics* metrics) : jobs_(jobs), metrics_(metrics) {}

  grpc::Status RegisterWorker(grpc::ServerContext*, const pp::v1::RegisterWorkerRequest* request,
                              pp::v1::RegisterWorkerResponse* response) override {
    absl::StatusOr<pp::v1::RegisterWorkerResponse> r = jobs_->Register(request->worker());
    if (r.ok()) *response = *std::move(r);
    return Answer("RegisterWorker", r.status());
  }

  grpc::Status Heartbeat(grpc::ServerContext*, const pp::v1::HeartbeatRequest* request,
                         pp::v1::HeartbeatResponse* response) override {
    *response = jobs_->Heartbeat(*request);
    return grpc::Status::OK;
  }

  grpc::Status ReportStep(grpc::ServerContext*, const pp::v1::StepReport* request,
                          pp::v1::ReportResponse* response) override {
    *response = jobs_->ReportStep(*request);
    return grpc::Status::OK;
  }

  grpc::Status ReportTask(grpc::ServerContext*, const pp::v1::TaskReport* request,
                          pp::v1::ReportResponse* response) override {
    *response = jobs_->ReportTask(*request);
    return grpc::Status::OK;
  }

  grpc::Status ReportCheckpoint(grpc::ServerContext*, const pp::v1::CheckpointReport* request,
                                pp::v1::ReportResponse* response) override {
    *response = jobs_->ReportCheckpoint(*request);
    return grpc::Status::OK;
  }

  grpc::Status KvSet(grpc::ServerContext*, const pp::v1::KvSetRequest* request,
                     pp::v1::KvSetResponse*) override {
    if (request->key().empty()) {
      return Answer("KvSet", absl::InvalidArgumentError("key: must not be empty"));
    }
    return Answer("KvSet", jobs_->rendezvous().Set(request->key(), request->value()));
  }

  grpc::Status KvGet(grpc::ServerContext* context, const pp::v1::KvGetRequest* request,
                     pp::v1::KvGetResponse* response) override {
    if (!(request->timeout_seconds() >= 0)) {
      return Answer("KvGet",
                    absl::InvalidArgumentError(absl::StrCat("timeout_seconds: must be >= 0, got ",
                                                            request->timeout_seconds())));
    }
    const std::vector<std::string> keys(request->keys().begin(), request->keys().end());
    // The store caps the wait (kMaxRendezvousWait); absl::Seconds saturates a huge request.
    absl::StatusOr<std::vector<std::string>> values = jobs_->rendezvous().Get(
        keys, absl::Seconds(request->timeout_seconds()),
        [context] { return context->IsCancelled(); });
    if (values.ok()) {
      for (std::string& v : *values) response->add_values(std::move(v));
    }
    return Answer("KvGet", values.status());
  }

 private:
  grpc::Status Answer(const char* method, const absl::Status& status) {
    if (!status.ok()) metrics_->RpcError(absl::StrCat("pp.v1.WorkerRegistry/", method));
    return ToGrpc(status);
  }

  JobManager* jobs_;
  CoordinatorMetrics* metrics_;
};

}  // namespace

// Members in construction order; destruction runs the other way (server before what it uses).
struct CoordinatorServer::Impl {
  std::unique_ptr<CoordinatorMetrics> metrics;
  std::unique_ptr<JobManager> jobs;
  std::unique_ptr<CoordinatorService> coordinator;
  std::unique_ptr<RegistryService> registry;
  std::unique_ptr<grpc::Server> server;
  std::string grpc_address;
  std::string metrics_address;
  bool shut_down = false;
};

absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(
    const CoordinatorOptions& options) {
  if (options.data_dir.empty()) return absl::InvalidArgumentError("--data_dir: must be given");
  if (options.worker_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--worker_timeout: must be positive");
  }
  if (options.heartbeat_interval <= absl::ZeroDuration() ||
      options.heartbeat_interval >= options.worker_timeout) {
    return absl::InvalidArgumentError(
        "--heartbeat_interval: must be positive and shorter than --worker_timeout");
  }
  absl::StatusOr<common::HostPort> grpc_at = common::ParseHostPort(options.grpc_address, "grpc");
  if (!grpc_at.ok()) return grpc_at.status();
  absl::StatusOr<common::HostPort> metrics_at =
      common::ParseHostPort(options.metrics_address, "metrics");
  if (!metrics_at.ok()) return metrics_at.status();
  auto impl = std::make_unique<Impl>();
  absl::StatusOr<std::unique_ptr<CoordinatorMetrics>> metrics =
      CoordinatorMetrics::Serve(options.metrics_address);
  if (!metrics.ok()) return metrics.status();
  impl->metrics = *std::move(metrics);
  metrics_at->port = impl->metrics->port();  // the one port 0 picked
  impl->metrics_address = metrics_at->ToString();

  ManagerOptions manager;
  manager.data_dir = options.data_dir;
  manager.worker_timeout = options.worker_timeout;
  manager.heartbeat_interval = options.heartbeat_interval;
  absl::StatusOr<std::unique_ptr<JobManager>> jobs =
      JobManager::Create(manager, impl->metrics.get());
  if (!jobs.ok()) return jobs.status();
  impl->jobs = *std::move(jobs);
  impl->coordinator = std::make_unique<CoordinatorService>(impl->jobs.get(), impl->metrics.get());
  impl->registry = std::make_unique<RegistryService>(impl->jobs.get(), impl->metrics.get());

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  grpc::ResourceQuota quota("ppcoord");
  quota.SetMaxThreads(kMaxServerThreads);
  builder.SetResourceQuota(quota);
  int port = 0;
  builder.AddListeningPort(options.grpc_address, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(impl->coordinator.get());
  builder.RegisterService(impl->registry.get());
  impl->server = builder.BuildAndStart();
  if (!impl->server || port == 0) {
    impl->jobs->Stop();
    return absl::UnavailableError(absl::StrCat("--grpc: cannot listen on ", options.grpc_address));
  }
  grpc_at->port = port;
  impl->grpc_address = grpc_at->ToString();
  return std::unique_ptr<CoordinatorServer>(new CoordinatorServer(std::move(impl)));
}

CoordinatorServer::CoordinatorServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CoordinatorServer::~CoordinatorServer() { Shutdown(); }

std::string CoordinatorServer::grpc_address() const { return impl_->grpc_address; }
std::string CoordinatorServer::metrics_address() const { return impl_->metrics_address; }

void CoordinatorServer::Shutdown() {
  if (impl_->shut_down) return;
  impl_->shut_down = true;
  impl_->server->GetHealthCheckService()->Shutdown();
  impl_->jobs->Stop();  // ends watch streams and rendezvous waits first
  impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  impl_->server->Wait();
}

}  // namespace pp::coordinator
