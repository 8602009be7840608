// `ppctl logs JOB [--rank=R] [--follow]`: the lines the workers wrote for a job's tasks, fetched
// through ppcoord (Coordinator.GetJobLogs; docs/jobs.md "Worker logs"). A server command of
// job_commands.cc, which hands it the stub and its call helpers.
//
// Contract:
// - Prints one line per log line, "WORKER rank R attempt A | TEXT", workers in name order, each
//   oldest first; asks for page after page until a page brings nothing new (its next_page_token
//   is the one sent). Lines the workers' buffers dropped, and workers that did not answer, are a
//   note on stderr ("ppctl logs: ..."), not an error.
// - --rank=R: only rank R's lines (default -1: every rank).
// - --follow: after that, asks again every 0.5 s from the last token until GetJob says the job
//   ended, then once more after 0.5 s (the other ranks' last lines), and returns 0. SIGINT or
//   SIGTERM (Ctrl-C) stops it at once, also returning 0.
// - Every call has its own --rpc_timeout deadline (the helpers' context); a refused or failed call
//   is one line on stderr and exit 1.
#ifndef PP_CLIENT_LOGS_COMMAND_H_
#define PP_CLIENT_LOGS_COMMAND_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "grpcpp/client_context.h"
#include "grpcpp/support/status.h"
#include "pp/v1/coordinator.grpc.pb.h"

namespace pp::client {

// What job_commands.cc gives its commands: a call's context (deadline, token) and the text of a
// refusal.
struct CallHelpers {
  std::function<std::unique_ptr<grpc::ClientContext>()> context;
  std::function<std::string(const grpc::Status&)> describe;
};

// "w1 rank 1 attempt 0 | text"
std::string LogLineText(const pp::v1::JobLogLine& line);

// `args`: the job id. Reads --rank and --follow; returns the exit code.
int RunLogsCommand(pp::v1::Coordinator::Stub& stub, const std::vector<std::string>& args,
                   const CallHelpers& calls);

}  // namespace pp::client

#endif  // PP_CLIENT_LOGS_COMMAND_H_
