// WorkerRegistry's gRPC adapter (registry_service.h).
#include "coordinator/registry_service.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/host_port.h"
#include "coordinator/grpc_status.h"
#include "coordinator/kv_access.h"

namespace pp::coordinator {
namespace {

class RegistryService final : public pp::v1::WorkerRegistry::Service {
 public:
  RegistryService(JobManager* jobs, CoordinatorMetrics* metrics, const Authorizer* auth)
      : jobs_(jobs), metrics_(metrics), auth_(auth) {}

  grpc::Status RegisterWorker(grpc::ServerContext* context,
                              const pp::v1::RegisterWorkerRequest* request,
                              pp::v1::RegisterWorkerResponse* response) override {
    if (absl::Status s =
            auth_->AuthorizeWorker(*context, "RegisterWorker", &request->worker().name());
        !s.ok()) {
      return Answer("RegisterWorker", s);
    }
    absl::StatusOr<pp::v1::RegisterWorkerResponse> r = jobs_->Register(request->worker());
    if (r.ok()) *response = *std::move(r);
    return Answer("RegisterWorker", r.status());
  }

  grpc::Status Heartbeat(grpc::ServerContext* context, const pp::v1::HeartbeatRequest* request,
                         pp::v1::HeartbeatResponse* response) override {
    if (absl::Status s = auth_->AuthorizeWorker(*context, "Heartbeat", &request->name()); !s.ok())
      return Answer("Heartbeat", s);
    *response = jobs_->Heartbeat(*request);
    return grpc::Status::OK;
  }

  grpc::Status ReportStep(grpc::ServerContext* context, const pp::v1::StepReport* request,
                          pp::v1::ReportResponse* response) override {
    if (absl::Status s = auth_->AuthorizeWorker(*context, "ReportStep", nullptr); !s.ok()) {
      return Answer("ReportStep", s);
    }
    if (absl::Status s = CheckReporter(*context, *request); !s.ok()) {
      return Answer("ReportStep", s);
    }
    *response = jobs_->ReportStep(*request);
    return grpc::Status::OK;
  }

  grpc::Status ReportTask(grpc::ServerContext* context, const pp::v1::TaskReport* request,
                          pp::v1::ReportResponse* response) override {
    if (absl::Status s = auth_->AuthorizeWorker(*context, "ReportTask", &request->worker());
        !s.ok()) {
      return Answer("ReportTask", s);
    }
    if (absl::Status s = CheckReporter(*context, *request); !s.ok()) {
      return Answer("ReportTask", s);
    }
    *response = jobs_->ReportTask(*request);
    return grpc::Status::OK;
  }

  grpc::Status ReportCheckpoint(grpc::ServerContext* context,
                                const pp::v1::CheckpointReport* request,
                                pp::v1::ReportResponse* response) override {
    if (absl::Status s = auth_->AuthorizeWorker(*context, "ReportCheckpoint", nullptr); !s.ok())
      return Answer("ReportCheckpoint", s);
    if (absl::Status s = CheckReporter(*context, *request); !s.ok()) {
      return Answer("ReportCheckpoint", s);
    }
    *response = jobs_->ReportCheckpoint(*request);
    return grpc::Status::OK;
  }

  grpc::Status KvSet(grpc::ServerContext* context, const pp::v1::KvSetRequest* request,
                     pp::v1::KvSetResponse*) override {
    if (absl::Status s = auth_->AuthorizeWorker(*context, "KvSet", nullptr); !s.ok()) {
      return Answer("KvSet", s);
    }
    if (request->key().empty()) {
      return Answer("KvSet", absl::InvalidArgumentError("key: must not be empty"));
    }
    if (absl::Status s = CheckKeys(*context, {request->key()}); !s.ok()) return Answer("KvSet", s);
    return Answer("KvSet", jobs_->rendezvous().Set(request->key(), request->value()));
  }

  grpc::Status KvGet(grpc::ServerContext* context, const pp::v1::KvGetRequest* request,
                     pp::v1::KvGetResponse* response) override {
    if (absl::Status s = auth_->AuthorizeWorker(*context, "KvGet", nullptr); !s.ok()) {
      return Answer("KvGet", s);
    }
    if (!(request->timeout_seconds() >= 0)) {
      return Answer("KvGet",
                    absl::InvalidArgumentError(absl::StrCat("timeout_seconds: must be >= 0, got ",
                                                            request->timeout_seconds())));
    }
    const std::vector<std::string> keys(request->keys().begin(), request->keys().end());
    if (absl::Status s = CheckKeys(*context, keys); !s.ok()) return Answer("KvGet", s);
    // The store caps the wait (kMaxRendezvousWait); absl::Seconds saturates a huge request.
    absl::StatusOr<std::vector<std::string>> values =
        jobs_->rendezvous().Get(keys, absl::Seconds(request->timeout_seconds()),
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

  // With TLS, a rendezvous key is only for the workers of its job's live attempt (kv_access.h).
  // Checked once, before a KvGet waits: an attempt that ends meanwhile drops its keys anyway.
  absl::Status CheckKeys(const grpc::ServerContext& context,
                         const std::vector<std::string>& keys) const {
    if (!auth_->tls()) return absl::OkStatus();
    const std::string caller = common::PeerName(context);
    for (const std::string& key : keys) {
      const std::optional<KeyScope> scope = ScopeOfKey(key);
      const std::optional<LiveAttempt> live =
          scope.has_value() ? jobs_->LiveAttemptOf(scope->job_id) : std::nullopt;
      if (absl::Status s = CheckKvAccess(key, live, caller); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // With TLS, a report on a rank of the live attempt comes from the worker placed on that rank
  // (kv_access.h CheckReportAccess): another certificate of the CA cannot fail, finish or drain
  // someone else's job.
  template <typename Report>
  absl::Status CheckReporter(const grpc::ServerContext& context, const Report& report) const {
    if (!auth_->tls()) return absl::OkStatus();
    return CheckReportAccess(report.job_id(), report.attempt(), report.rank(),
                             jobs_->LiveAttemptOf(report.job_id()), common::PeerName(context));
  }

  JobManager* jobs_;
  CoordinatorMetrics* metrics_;
  const Authorizer* auth_;  // AuthorizeWorker; tls()
};

}  // namespace

std::unique_ptr<pp::v1::WorkerRegistry::Service> NewRegistryService(JobManager* jobs,
                                                                    CoordinatorMetrics* metrics,
                                                                    const Authorizer* auth) {
  return std::make_unique<RegistryService>(jobs, metrics, auth);
}

}  // namespace pp::coordinator
