#include "worker/daemon/report.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace pp::daemon {

void SetDeadline(grpc::ClientContext& context, absl::Duration deadline) {
  context.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
}

pp::v1::ReportResponse RegistryReporter::ReportStep(const pp::v1::StepReport& report,
                                                    const executor::StepResult& result) {
  metrics_->RecordStep(result, report.tokens());
  grpc::ClientContext context;
  SetDeadline(context, kRpcDeadline);
  pp::v1::ReportResponse response;
  if (!stub_->ReportStep(&context, report, &response).ok()) {
    metrics_->RpcError("ReportStep");
    return {};
  }
  return response;
}

void RegistryReporter::ReportCheckpoint(const pp::v1::CheckpointReport& report, double seconds) {
  metrics_->RecordCheckpoint(seconds);
  grpc::ClientContext context;
  SetDeadline(context, kRpcDeadline);
  pp::v1::ReportResponse response;
  if (!stub_->ReportCheckpoint(&context, report, &response).ok()) {
    metrics_->RpcError("ReportCheckpoint");
  }
}

pp::v1::TaskReport EndReport(const Task& task, const absl::Status& status,
                             const std::string& worker) {
  pp::v1::TaskReport report;
  report.set_job_id(task.plan().job_id());
  report.set_attempt(task.plan().attempt());
  report.set_rank(task.plan().rank());
  report.set_ok(status.ok());
  report.set_error(std::string(status.message()));
  report.set_error_code(static_cast<int>(status.code()));
  report.set_worker(worker);
  report.set_drained(status.ok() && task.drained());
  return report;
}

std::string EndLine(const Task& task, const absl::Status& status) {
  if (!status.ok()) {
    return absl::StrCat("task failed: ", absl::StatusCodeToString(status.code()), ": ",
                        status.message());
  }
  return absl::StrCat("task ended: ok after step ", task.completed_steps(),
                      task.drained() ? ", drained" : "");
}

bool SendEndReport(pp::v1::WorkerRegistry::Stub* stub, WorkerMetrics* metrics,
                   const pp::v1::TaskReport& report) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    grpc::ClientContext context;
    SetDeadline(context, absl::Seconds(2));
    pp::v1::ReportResponse response;
    if (stub->ReportTask(&context, report, &response).ok()) return true;
    metrics->RpcError("ReportTask");
    absl::SleepFor(absl::Milliseconds(200));
  }
  return false;
}

}  // namespace pp::daemon
