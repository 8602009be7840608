#include "client/report_command.h"

#include <iostream>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/exit_code.h"
#include "common/file_io.h"

ABSL_FLAG(std::string, out, "", "report: the HTML file to write (default: JOB.html here)");

namespace pp::client {
namespace {

absl::Status Refused(const grpc::Status& status, const ReportRpc& rpc) {
  // absl and gRPC share the canonical code numbers.
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), rpc.describe(status));
}

absl::Status FetchSteps(pp::v1::Coordinator::Stub& stub, const std::string& job_id,
                        const ReportRpc& rpc, std::vector<pp::v1::JobStepRecord>* steps) {
  pp::v1::ListJobStepsRequest request;
  request.set_job_id(job_id);
  do {
    pp::v1::ListJobStepsResponse page;
    grpc::Status status = stub.ListJobSteps(rpc.context().get(), request, &page);
    if (!status.ok()) return Refused(status, rpc);
    steps->insert(steps->end(), page.steps().begin(), page.steps().end());
    request.set_page_token(page.next_page_token());
  } while (!request.page_token().empty());
  return absl::OkStatus();
}

// The job's schedule as ppcoord compiles its spec now (a resized or auto-planned job's spec holds
// the layout it last ran), or why there is none.
absl::StatusOr<pp::v1::PlanJobResponse> FetchPlan(pp::v1::Coordinator::Stub& stub,
                                                  const pp::v1::Job& job, const ReportRpc& rpc) {
  pp::v1::PlanJobRequest request;
  *request.mutable_spec() = job.spec();
  // The stored spec says steps; epochs only say where they came from, and a spec sets one.
  request.mutable_spec()->mutable_train()->clear_epochs();
  pp::v1::PlanJobResponse plan;
  grpc::Status status = stub.PlanJob(rpc.context().get(), request, &plan);
  if (!status.ok()) return Refused(status, rpc);
  return plan;
}

// `trace`'s step as the simulator runs the schedule under that step's own measured costs
// (plan.h CostsFromTrace): where the measured step lost time the costs alone do not explain.
absl::StatusOr<pp::plan::Timeline> SimulateTraced(const pp::v1::Schedule& schedule,
                                                  const pp::v1::StepTrace& trace) {
  absl::StatusOr<prog::Schedule> plain = pp::plan::ScheduleFromProto(schedule);
  if (!plain.ok()) return plain.status();
  absl::StatusOr<pp::plan::CostModel> costs = pp::plan::CostsFromTrace(*plain, trace);
  if (!costs.ok()) return costs.status();
  absl::StatusOr<pp::plan::Simulation> simulation = pp::plan::Simulate(*plain, *costs);
  if (!simulation.ok()) return simulation.status();
  return pp::plan::TimelineFromSimulation(*plain, *simulation);
}

// The trace and its simulation, or notes on why not: neither is an error.
void AddTrace(pp::v1::Coordinator::Stub& stub, const ReportRpc& rpc,
              const absl::StatusOr<pp::v1::PlanJobResponse>& plan, ReportInput* in) {
  pp::v1::GetTraceRequest request;
  request.set_job_id(in->job.id());
  pp::v1::StepTrace trace;
  if (!stub.GetTrace(rpc.context().get(), request, &trace).ok()) return;
  in->trace = trace;
  if (!plan.ok()) {
    in->simulation_note = absl::StrCat("PlanJob of the job's spec: ", plan.status().message());
    return;
  }
  absl::StatusOr<pp::plan::Timeline> simulated = SimulateTraced(plan->schedule(), trace);
  if (simulated.ok()) {
    in->simulated = *std::move(simulated);
  } else {
    in->simulation_note = std::string(simulated.status().message());
  }
}

}  // namespace

absl::StatusOr<ReportInput> FetchReport(pp::v1::Coordinator::Stub& stub, const std::string& job_id,
                                        const ReportRpc& rpc) {
  ReportInput in;
  pp::v1::GetJobRequest request;
  request.set_job_id(job_id);
  if (grpc::Status got = stub.GetJob(rpc.context().get(), request, &in.job); !got.ok()) {
    return Refused(got, rpc);
  }
  if (absl::Status listed = FetchSteps(stub, job_id, rpc, &in.steps); !listed.ok()) return listed;
  const absl::StatusOr<pp::v1::PlanJobResponse> plan = FetchPlan(stub, in.job, rpc);
  if (plan.ok()) {
    in.stage_layers.assign(plan->stage_layers().begin(), plan->stage_layers().end());
    in.planned_bubble = plan->schedule().simulation().bubble_fraction();
  }
  AddTrace(stub, rpc, plan, &in);
  in.generated = absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", absl::Now(), absl::UTCTimeZone());
  return in;
}

absl::Status WriteReport(pp::v1::Coordinator::Stub& stub, const std::string& job_id,
                         const std::string& path, const ReportRpc& rpc) {
  absl::StatusOr<ReportInput> in = FetchReport(stub, job_id, rpc);
  if (!in.ok()) return in.status();
  if (absl::Status written = common::WriteFileAtomic(path, RenderReport(*in)); !written.ok()) {
    return absl::Status(written.code(),
                        absl::StrCat("cannot write the report to ", path, ": ", written.message()));
  }
  return absl::OkStatus();
}

int RunReport(pp::v1::Coordinator::Stub& stub, const std::string& job_id, const ReportRpc& rpc) {
  std::string path = absl::GetFlag(FLAGS_out);
  if (path.empty()) path = job_id + ".html";
  if (absl::Status written = WriteReport(stub, job_id, path, rpc); !written.ok()) {
    std::cerr << "ppctl report: " << written.message() << "\n";
    return common::kExitFailure;
  }
  std::cout << "report: " << path << "\n";
  return common::kExitOk;
}

}  // namespace pp::client
