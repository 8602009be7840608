// `ppctl report JOB [--out=FILE.html]` (registered with the server commands, job_commands.cc) and
// the report `ppctl up` writes when its job ends: fetches what client/report_html.h draws from
// ppcoord (GetJob, every page of ListJobSteps, PlanJob of the job's spec, GetTrace of its newest
// traced step), simulates that step's schedule under the step's measured costs, and writes the
// page atomically (a temporary file in the same folder, renamed over FILE).
// What may be missing: no trace or no plan leaves its section a note; an unknown job, a refused
// call or an unwritable FILE is an error. Each call gets its own context (and deadline) from
// ReportRpc.context.
#ifndef PP_CLIENT_REPORT_COMMAND_H_
#define PP_CLIENT_REPORT_COMMAND_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/report_html.h"
#include "pp/v1/coordinator.grpc.pb.h"

namespace pp::client {

// How the caller talks to ppcoord: a fresh context per call (deadline, credentials), and the text
// of a failed call for the error message.
struct ReportRpc {
  std::function<std::unique_ptr<grpc::ClientContext>()> context;
  std::function<std::string(const grpc::Status&)> describe;
};

// What RenderReport draws for job `job_id`. The GetJob and ListJobSteps errors are returned (the
// status code of the call, the message from `describe`); a missing trace or plan is not an error.
absl::StatusOr<ReportInput> FetchReport(pp::v1::Coordinator::Stub& stub, const std::string& job_id,
                                        const ReportRpc& rpc);

// Fetches, renders and writes the report of `job_id` to `path`.
absl::Status WriteReport(pp::v1::Coordinator::Stub& stub, const std::string& job_id,
                         const std::string& path, const ReportRpc& rpc);

// The command: writes --out (default JOB.html in the current folder) and prints "report: PATH";
// returns the exit code (0; 1 when ppcoord refuses or the file cannot be written), errors as one
// "ppctl report: ..." line on stderr.
int RunReport(pp::v1::Coordinator::Stub& stub, const std::string& job_id, const ReportRpc& rpc);

}  // namespace pp::client

#endif  // PP_CLIENT_REPORT_COMMAND_H_
