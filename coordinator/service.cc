// The gRPC adapter of the Coordinator service over JobManager, and the server that serves it with
// WorkerRegistry (registry_service.h).
#include <algorithm>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/host_port.h"
#include "common/job_spec.h"
#include "common/mesh.h"
#include "common/spec_bounds.h"
#include "common/tls.h"
#include "coordinator/auth.h"
#include "coordinator/coordinator.h"
#include "coordinator/grpc_status.h"
#include "coordinator/job_logs.h"
#include "coordinator/jobs.h"
#include "coordinator/kv_access.h"
#include "coordinator/metrics.h"
#include "coordinator/peer_limit.h"
#include "coordinator/placement.h"
#include "coordinator/plan/render.h"
#include "coordinator/planning.h"
#include "coordinator/registry_service.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/resource_quota.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "pp/v1/coordinator.grpc.pb.h"

namespace pp::coordinator {
namespace {

// WatchJob streams one client (a user, or an anonymous caller's host: peer_limit.h) may hold open;
// each holds a server thread while it is open.
constexpr int kMaxWatchesPerClient = 16;

// Threads the gRPC server may run for calls (its thread quota). A watch and a rendezvous wait each
// hold one while open: this leaves room for every rank of the largest job (4096, as the spec
// limits allow) to wait in KvGet at once, with as many again for watches, reports and heartbeats.
constexpr int kMaxServerThreads = 8192;

class CoordinatorService final : public pp::v1::Coordinator::Service {
 public:
  // `worker_credentials`: how GetJobLogs dials the workers (null: plaintext).
  CoordinatorService(JobManager* jobs, CoordinatorMetrics* metrics, const Authorizer* auth,
                     std::vector<std::string> data_roots,
                     std::shared_ptr<grpc::ChannelCredentials> worker_credentials)
      : jobs_(jobs),
        metrics_(metrics),
        auth_(auth),
        data_roots_(std::move(data_roots)),
        logs_(std::move(worker_credentials)) {}

  grpc::Status SubmitJob(grpc::ServerContext* context, const pp::v1::SubmitJobRequest* request,
                         pp::v1::SubmitJobResponse* response) override {
    absl::StatusOr<Caller> caller = auth_->Authorize(*context, "SubmitJob");
    if (!caller.ok()) return Answer("SubmitJob", caller.status());
    // First: nothing else reads a spec that is too large or carries fields no one checked.
    if (absl::Status s = common::CheckSpecBytes(request->spec()); !s.ok()) {
      return Answer("SubmitJob", s);
    }
    // The roots and the files are checked in Submit, as in PlanJob (planning.h PlanClientSpec).
    absl::StatusOr<std::string> id = jobs_->Submit(request->spec(), *caller);
    if (id.ok()) response->set_job_id(*id);
    return Answer("SubmitJob", id.status());
  }

  grpc::Status GetJob(grpc::ServerContext* context, const pp::v1::GetJobRequest* request,
                      pp::v1::Job* response) override {
    absl::StatusOr<Caller> caller = auth_->Authorize(*context, "GetJob");
    if (!caller.ok()) return Answer("GetJob", caller.status());
    absl::StatusOr<pp::v1::Job> job = jobs_->Get(request->job_id());
    if (job.ok()) *response = *std::move(job);
    return Answer("GetJob", job.status());
  }

  grpc::Status ListJobs(grpc::ServerContext* context, const pp::v1::ListJobsRequest* request,
                        pp::v1::ListJobsResponse* response) override {
    absl::StatusOr<Caller> caller = auth_->Authorize(*context, "ListJobs");
    if (!caller.ok()) return Answer("ListJobs", caller.status());
    absl::StatusOr<pp::v1::ListJobsResponse> page = jobs_->List(*request);
    if (page.ok()) *response = *std::move(page);
    return Answer("ListJobs", page.status());
  }

  grpc::Status ListJobSteps(grpc::ServerContext* context,
                            const pp::v1::ListJobStepsRequest* request,
                            pp::v1::ListJobStepsResponse* response) override {
    absl::StatusOr<Caller> caller = auth_->Authorize(*context, "ListJobSteps");
    if (!caller.ok()) return Answer("ListJobSteps", caller.status());
    absl::StatusOr<pp::v1::ListJobStepsResponse> page = jobs_->ListSteps(*request);
    if (page.ok()) *response = *std::move(page);
    return Answer("ListJobSteps", page.status());
  }

  grpc::Status GetJobLogs(grpc::ServerContext* context, const pp::v1::GetJobLogsRequest* request,
                          pp::v1::GetJobLogsResponse* response) override {
    absl::StatusOr<Caller> caller = auth_->Authorize(*context, "GetJobLogs");
    if (!caller.ok()) return Answer("GetJobLogs", caller.status());
    absl::StatusOr<pp::v1::GetJobLogsResponse> page = logs_.Read(*jobs_, *request);
    if (page.ok()) *response = *std::move(page);
    return Answer("GetJobLogs", page.status());
  }

  grpc::Status WatchJob(grpc::ServerContext* context, const pp::v1::WatchJobRequest* request,
                        grpc::ServerWriter<pp::v1::JobEvent>* writer) override {
    absl::StatusOr<Caller> caller = auth_->Authorize(*context, "WatchJob");
    if (!caller.ok()) return Answer("WatchJob", caller.status());
    absl::StatusOr<std::unique_ptr<PeerLimit::Slot>> slot =
        watches_.Acquire(ClientOf(caller->name, context->peer()));
    if (!slot.ok()) return Answer("WatchJob", slot.status());
    absl::Status status = jobs_->Watch(
        request->job_id(), [writer](const pp::v1::JobEvent& e) { return writer->Write(e); },
        [context] { return context->IsCancelled(); });
    return Answer("WatchJob",
                  status.code() == absl::StatusCode::kCancelled ? absl::OkStatus() : status);
  }

  grpc::Status CancelJob(grpc::ServerContext* context, const pp::v1::CancelJobRequest* request,
                         pp::v1::Job* response) override {
    if (absl::StatusOr<Caller> allowed = MayChange(*context, "CancelJob", request->job_id());
        !allowed.ok()) {
      return Answer("CancelJob", allowed.status());
    }
    absl::StatusOr<pp::v1::Job> job = jobs_->Cancel(request->job_id());
    if (job.ok()) *response = *std::move(job);
    return Answer("CancelJob", job.status());
  }

  grpc::Status ResumeJob(grpc::ServerContext* context, const pp::v1::ResumeJobRequest* request,
                         pp::v1::Job* response) override {
    absl::StatusOr<Caller> caller = MayChange(*context, "ResumeJob", request->job_id());
    if (!caller.ok()) return Answer("ResumeJob", caller.status());
    // The new layout becomes the job's spec, which is checked whole (CheckSpecBytes) once planned.
    if (absl::Status s = common::CheckNoUnknownFields(request->parallel(), "parallel"); !s.ok()) {
      return Answer("ResumeJob", s);
    }
    absl::StatusOr<pp::v1::Job> job = jobs_->Resume(*request, *caller);
    if (job.ok()) *response = *std::move(job);
    return Answer("ResumeJob", job.status());
  }

  grpc::Status ListWorkers(grpc::ServerContext* context, const pp::v1::ListWorkersRequest*,
                           pp::v1::ListWorkersResponse* response) override {
    absl::StatusOr<Caller> caller = auth_->Authorize(*context, "ListWorkers");
    if (!caller.ok()) return Answer("ListWorkers", caller.status());
    for (pp::v1::WorkerInfo& w : jobs_->Workers()) *response->add_workers() = std::move(w);
    return grpc::Status::OK;
  }

  grpc::Status PlanJob(grpc::ServerContext* context, const pp::v1::PlanJobRequest* request,
                       pp::v1::PlanJobResponse* response) override {
    absl::StatusOr<Caller> caller = auth_->Authorize(*context, "PlanJob");
    if (!caller.ok()) return Answer("PlanJob", caller.status());
    if (absl::Status s = common::CheckSpecBytes(request->spec()); !s.ok()) {
      return Answer("PlanJob", s);
    }
    // The checks SubmitJob makes, --data_root first: a view token learns nothing of the files
    // outside it.
    absl::StatusOr<PlannedJob> planned = PlanClientSpec(
        request->spec(), data_roots_,
        request->spec().parallel().recompute() == "auto" ? jobs_->RegisteredMemoryFits() : nullptr);
    if (planned.ok()) {
      response->set_recompute(planned->spec.parallel().recompute());
      response->set_recompute_reason(planned->recompute_reason);
      absl::StatusOr<std::string> ascii =
          pp::plan::RenderScheduleAscii(planned->schedule, planned->costs);
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

  grpc::Status GetTrace(grpc::ServerContext* context, const pp::v1::GetTraceRequest* request,
                        pp::v1::StepTrace* response) override {
    absl::StatusOr<Caller> caller = auth_->Authorize(*context, "GetTrace");
    if (!caller.ok()) return Answer("GetTrace", caller.status());
    absl::StatusOr<pp::v1::StepTrace> trace = jobs_->Trace(request->job_id(), request->step());
    if (trace.ok()) *response = *std::move(trace);
    return Answer("GetTrace", trace.status());
  }

 private:
  grpc::Status Answer(const char* method, const absl::Status& status) {
    if (!status.ok()) metrics_->RpcError(absl::StrCat("pp.v1.Coordinator/", method));
    return ToGrpc(status);
  }

  // The caller, when it may call `method` on job `job_id`: its role allows the method and the job
  // is its own, or it is an admin.
  absl::StatusOr<Caller> MayChange(const grpc::ServerContext& context, const char* method,
                                   const std::string& job_id) {
    absl::StatusOr<Caller> caller = auth_->Authorize(context, method);
    if (!caller.ok() || caller->role == Role::kAdmin) return caller;
    absl::StatusOr<pp::v1::Job> job = jobs_->Get(job_id);
    if (!job.ok()) return job.status();
    if (absl::Status own = CheckOwner(*caller, job->owner(), method, job_id); !own.ok()) return own;
    return caller;
  }

  JobManager* jobs_;
  CoordinatorMetrics* metrics_;
  const Authorizer* auth_;
  const std::vector<std::string> data_roots_;
  PeerLimit watches_{kMaxWatchesPerClient, "WatchJob streams"};
  JobLogReader logs_;  // locks itself
};

// Applies the listen rule (plaintext only on loopback, unless --insecure), then reads the TLS
// files into *tls (none without options.tls) and the token file into *auth.
absl::Status LoadSecurity(const CoordinatorOptions& options, std::optional<common::TlsConfig>* tls,
                          Authorizer* auth) {
  absl::StatusOr<std::optional<common::TlsConfig>> loaded =
      common::LoadDaemonTls("ppcoord", options.grpc_address, options.tls, options.insecure);
  if (!loaded.ok()) return loaded.status();
  *tls = *std::move(loaded);
  if (absl::Status roots = common::CheckRootsGiven(options.grpc_address, options.insecure,
                                                   {{"data_root", &options.data_roots}});
      !roots.ok()) {
    return roots;
  }
  std::optional<TokenTable> tokens;
  if (!options.auth_tokens.empty()) {
    absl::StatusOr<TokenTable> table = TokenTable::Load(options.auth_tokens);
    if (!table.ok()) return table.status();
    tokens = *std::move(table);
  }
  *auth = Authorizer(std::move(tokens), tls->has_value(), options.deny_certs);
  return absl::OkStatus();
}

}  // namespace

// Members in construction order; destruction runs the other way (server before what it uses).
struct CoordinatorServer::Impl {
  std::optional<common::TlsConfig> tls;
  Authorizer auth;
  std::unique_ptr<CoordinatorMetrics> metrics;
  std::unique_ptr<JobManager> jobs;
  std::unique_ptr<CoordinatorService> coordinator;
  std::unique_ptr<pp::v1::WorkerRegistry::Service> registry;
  std::unique_ptr<grpc::Server> server;
  std::string grpc_address;
  std::string metrics_address;
  std::string policy_path;  // --policy; empty: the default policy, nothing to reload
  bool shut_down = false;
};

namespace {

absl::Status CheckTimes(const CoordinatorOptions& options) {
  if (options.data_dir.empty()) return absl::InvalidArgumentError("--data_dir: must be given");
  if (options.worker_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--worker_timeout: must be positive");
  }
  if (options.heartbeat_interval <= absl::ZeroDuration() ||
      options.heartbeat_interval >= options.worker_timeout) {
    return absl::InvalidArgumentError(
        "--heartbeat_interval: must be positive and shorter than --worker_timeout");
  }
  return absl::OkStatus();
}

// The job manager's options: the daemon's, its TLS for dialling workers, and its policy file read.
absl::StatusOr<ManagerOptions> ManagerOptionsOf(const CoordinatorOptions& options,
                                                const std::optional<common::TlsConfig>& tls) {
  ManagerOptions manager;
  manager.data_dir = options.data_dir;
  manager.worker_timeout = options.worker_timeout;
  manager.heartbeat_interval = options.heartbeat_interval;
  manager.retain_jobs = options.retain_jobs;
  if (tls.has_value()) manager.worker_credentials = common::ChannelCredentials(*tls);
  manager.data_roots = options.data_roots;
  if (!options.policy.empty()) {
    absl::StatusOr<Policy> policy = Policy::Load(options.policy);
    if (!policy.ok()) return policy.status();
    manager.policy = std::make_shared<const Policy>(*std::move(policy));
  }
  return manager;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(
    const CoordinatorOptions& options) {
  if (absl::Status valid = CheckTimes(options); !valid.ok()) return valid;
  absl::StatusOr<common::HostPort> grpc_at = common::ParseHostPort(options.grpc_address, "grpc");
  if (!grpc_at.ok()) return grpc_at.status();
  absl::StatusOr<common::HostPort> metrics_at =
      common::ParseHostPort(options.metrics_address, "metrics");
  if (!metrics_at.ok()) return metrics_at.status();
  auto impl = std::make_unique<Impl>();
  if (absl::Status s = LoadSecurity(options, &impl->tls, &impl->auth); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<CoordinatorMetrics>> metrics =
      CoordinatorMetrics::Serve(options.metrics_address);
  if (!metrics.ok()) return metrics.status();
  impl->metrics = *std::move(metrics);
  metrics_at->port = impl->metrics->port();  // the one port 0 picked
  impl->metrics_address = metrics_at->ToString();

  absl::StatusOr<ManagerOptions> manager = ManagerOptionsOf(options, impl->tls);
  if (!manager.ok()) return manager.status();
  impl->policy_path = options.policy;
  absl::StatusOr<std::unique_ptr<JobManager>> jobs =
      JobManager::Create(*manager, impl->metrics.get());
  if (!jobs.ok()) return jobs.status();
  impl->jobs = *std::move(jobs);
  impl->coordinator =
      std::make_unique<CoordinatorService>(impl->jobs.get(), impl->metrics.get(), &impl->auth,
                                           options.data_roots, manager->worker_credentials);
  impl->registry = NewRegistryService(impl->jobs.get(), impl->metrics.get(), &impl->auth);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  grpc::ResourceQuota quota("ppcoord");
  quota.SetMaxThreads(kMaxServerThreads);
  builder.SetResourceQuota(quota);
  int port = 0;
  // Users with tokens call the same port as the workers: a client certificate is verified when
  // presented but not required here; RegistryService and Authorizer decide per call.
  builder.AddListeningPort(options.grpc_address,
                           impl->tls.has_value() ? common::ServerCredentials(*impl->tls, false)
                                                 : grpc::InsecureServerCredentials(),
                           &port);
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

absl::StatusOr<std::string> CoordinatorServer::ReloadPolicy() {
  if (impl_->policy_path.empty()) return std::string("no --policy: nothing to reload");
  absl::StatusOr<Policy> policy = Policy::Load(impl_->policy_path);
  if (!policy.ok()) return policy.status();
  impl_->jobs->SetPolicy(std::make_shared<const Policy>(*std::move(policy)));
  return absl::StrCat("scheduling policy reloaded from ", impl_->policy_path);
}

void CoordinatorServer::Shutdown() {
  if (impl_->shut_down) return;
  impl_->shut_down = true;
  impl_->server->GetHealthCheckService()->Shutdown();
  impl_->jobs->Stop();  // ends watch streams and rendezvous waits first
  impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  impl_->server->Wait();
}

}  // namespace pp::coordinator
