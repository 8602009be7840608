#include "client/job_commands.h"

#include <unistd.h>

#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <utility>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/clock_text.h"
#include "client/credentials.h"
#include "client/history_table.h"
#include "client/logs_command.h"
#include "client/queue_table.h"
#include "client/report_command.h"
#include "common/data_spec.h"
#include "common/epoch.h"
#include "common/exit_code.h"
#include "common/host_port.h"
#include "common/job_spec.h"
#include "common/proto_io.h"
#include "coordinator/plan/plan.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "pp/v1/coordinator.grpc.pb.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:50051",
          "HOST:PORT of ppcoord (submit, get, list, queue, watch, cancel, resume, workers, trace)");
ABSL_FLAG(absl::Duration, rpc_timeout, absl::Seconds(10),
          "how long a server command waits to reach ppcoord and for each answer");
ABSL_FLAG(
    int32_t, step, 0,
    "trace: the step to draw (0: the newest traced); resume: the checkpoint step (0: newest)");
ABSL_FLAG(int32_t, steps, 0, "resume: the new total of training steps (0: keep the spec's)");
ABSL_FLAG(int32_t, epoch, 0,
          "resume: from the newest checkpoint at or before the start of this epoch (its first "
          "step, docs/jobs.md \"Data windows\"); exclusive with --step");
ABSL_FLAG(std::string, parallel, "",
          "resume: a new layout, the proto3 JSON of pp.v1.ParallelSpec, e.g. "
          "'{\"pipeline\":2,\"chunks\":2,\"schedule\":\"interleaved-1f1b\"}'");
// Shared with `ppctl plan`, which defines it: ascii | json | chrome.
ABSL_DECLARE_FLAG(std::string, format);

namespace pp::client {
namespace {

struct Command {
  std::string usage;
  int positional;  // required positional arguments
  std::function<int(pp::v1::Coordinator::Stub&, const std::vector<std::string>&)> run;
};

int Fail(const std::string& command, const std::string& message, int code = common::kExitFailure) {
  std::cerr << "ppctl " << command << ": " << message << "\n";
  return code;
}

// The bearer token every call carries (--token_file); empty: none. Set once by RunJobCommand.
std::string& BearerToken() {
  static std::string* token = new std::string();
  return *token;
}

std::string Describe(const grpc::Status& status) {
  if (status.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
    return absl::StrCat("not authenticated: ", status.error_message(),
                        " (see --token_file, or --ca with --cert and --key)");
  }
  if (status.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
    return absl::StrCat("permission denied: ", status.error_message());
  }
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE ||
      status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return absl::StrCat("coordinator at ", absl::GetFlag(FLAGS_coordinator),
                        " did not answer: ", status.error_message());
  }
  return status.error_message();
}

std::unique_ptr<grpc::ClientContext> Context() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(absl::Now() + absl::GetFlag(FLAGS_rpc_timeout)));
  if (!BearerToken().empty()) context->AddMetadata("authorization", "Bearer " + BearerToken());
  return context;
}

std::string Json(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(message, &json, options);
  return json;
}

std::string ProgressLine(const pp::v1::JobEvent& e) {
  std::string line =
      absl::StrFormat("%s %s step %d/%d", e.job_id(), pp::v1::JobEventKind_Name(e.kind()).substr(6),
                      e.step(), e.total_steps());
  // A preempted or resized job stops and queues again: the last step's rates and an ETA would
  // mislead.
  if (e.step() > 0 && e.kind() != pp::v1::EVENT_PREEMPTED && e.kind() != pp::v1::EVENT_RESIZED) {
    absl::StrAppendFormat(&line, "  loss %.4f  lr %.3g  %.0f tok/s  bubble %.1f%%", e.loss(),
                          e.learning_rate(), e.tokens_per_second(), 100 * e.bubble_ratio());
    if (e.has_eval()) absl::StrAppendFormat(&line, "  EVAL loss %.4f", e.eval_loss());
    if (e.has_epoch()) absl::StrAppend(&line, "  epoch ", common::EpochText(e.epoch()));
    if (e.step_seconds() > 0 && e.step() < e.total_steps()) {
      absl::StrAppend(&line, "  ETA ", ClockText(e.step_seconds() * (e.total_steps() - e.step())));
    }
  }
  if (!e.message().empty() && e.kind() != pp::v1::EVENT_STEP)
    absl::StrAppend(&line, "  ", e.message());
  return line;
}

int Submit(pp::v1::Coordinator::Stub& stub, const std::vector<std::string>& args) {
  absl::StatusOr<pp::v1::JobSpec> spec = pp::common::LoadJobSpec(args[0]);
  if (!spec.ok()) return Fail("submit", std::string(spec.status().message()));
  // The daemons open the data files: give them paths that do not depend on our directory.
  pp::common::AbsoluteDataPaths(&*spec);
  pp::v1::SubmitJobRequest request;
  *request.mutable_spec() = *std::move(spec);
  pp::v1::SubmitJobResponse response;
  grpc::Status status = stub.SubmitJob(Context().get(), request, &response);
  if (!status.ok()) return Fail("submit", Describe(status));
  std::cout << response.job_id() << "\n";
  return common::kExitOk;
}

int Get(pp::v1::Coordinator::Stub& stub, const std::vector<std::string>& args) {
  pp::v1::GetJobRequest request;
  request.set_job_id(args[0]);
  pp::v1::Job job;
  grpc::Status status = stub.GetJob(Context().get(), request, &job);
  if (!status.ok()) return Fail("get", Describe(status));
  std::cout << Json(job);
  return common::kExitOk;
}

std::string JobLine(const pp::v1::Job& job) {
  const pp::v1::ParallelSpec& p = job.spec().parallel();
  return absl::StrFormat(
      "%-24s %-10s %-11s %-9s %-18s %s\n", job.id(), pp::v1::JobState_Name(job.state()),
      absl::StrCat(job.step(), "/", job.spec().train().steps()),
      job.step() > 0 ? absl::StrFormat("%.4f", job.loss()) : "-",
      absl::StrCat(common::ScheduleLabel(p), " D=", p.pipeline(), " V=", p.chunks()), job.reason());
}

// Follows the pages to the last one, each call with its own deadline, so the list is whole.
// `page` sees each page as it comes.
grpc::Status ListEveryPage(pp::v1::Coordinator::Stub& stub,
                           const std::function<void(const pp::v1::ListJobsResponse&)>& page) {
  pp::v1::ListJobsRequest request;
  do {
    pp::v1::ListJobsResponse response;
    grpc::Status status = stub.ListJobs(Context().get(), request, &response);
    if (!status.ok()) return status;
    page(response);
    request.set_page_token(response.next_page_token());
  } while (!request.page_token().empty());
  return grpc::Status::OK;
}

int List(pp::v1::Coordinator::Stub& stub, const std::vector<std::string>&) {
  bool first = true;
  grpc::Status status = ListEveryPage(stub, [&first](const pp::v1::ListJobsResponse& response) {
    if (std::exchange(first, false)) {
      std::cout << absl::StrFormat("%-24s %-10s %-11s %-9s %-18s %s\n", "JOB", "STATE", "STEP",
                                   "LOSS", "SCHEDULE", "REASON");
    }
    for (const pp::v1::Job& job : response.jobs()) std::cout << JobLine(job);
  });
  if (!status.ok()) return Fail("list", Describe(status));
  return common::kExitOk;
}

int History(pp::v1::Coordinator::Stub& stub, const std::vector<std::string>& args) {
  // --format is shared with plan and trace, whose default is "ascii": here that is the table.
  std::string format = absl::GetFlag(FLAGS_format);
  if (format == "ascii") format = "table";
  if (!IsHistoryFormat(format)) {
    return Fail("history", absl::StrCat("--format: unknown \"", format, "\" (table, csv, json)"),
                common::kExitUsage);
  }
  std::vector<pp::v1::JobStepRecord> steps;
  pp::v1::ListJobStepsRequest request;
  request.set_job_id(args[0]);
  do {
    pp::v1::ListJobStepsResponse page;
    grpc::Status status = stub.ListJobSteps(Context().get(), request, &page);
    if (!status.ok()) return Fail("history", Describe(status));
    steps.insert(steps.end(), page.steps().begin(), page.steps().end());
    request.set_page_token(page.next_page_token());
  } while (!request.page_token().empty());
  std::cout << HistoryText(steps, format);
  return common::kExitOk;
}

int Queue(pp::v1::Coordinator::Stub& stub, const std::vector<std::string>&) {
  // The order spans every page, so nothing prints until the last one is in.
  std::vector<pp::v1::Job> jobs;
  grpc::Status status = ListEveryPage(stub, [&jobs](const pp::v1::ListJobsResponse& response) {
    jobs.insert(jobs.end(), response.jobs().begin(), response.jobs().end());
  });
  if (!status.ok()) return Fail("queue", Describe(status));
  std::cout << QueueTable(jobs, absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
  return common::kExitOk;
}

int Watch(pp::v1::Coordinator::Stub& stub, const std::vector<std::string>& args) {
  // No deadline on the stream (jobs run for hours); reachability was checked before.
  grpc::ClientContext context;
  pp::v1::WatchJobRequest request;
  request.set_job_id(args[0]);
  std::unique_ptr<grpc::ClientReader<pp::v1::JobEvent>> reader = stub.WatchJob(&context, request);
  const bool live = isatty(STDOUT_FILENO);
  pp::v1::JobEvent event;
  pp::v1::JobEventKind last = pp::v1::JOB_EVENT_KIND_UNSPECIFIED;
  while (reader->Read(&event)) {
    last = event.kind();
    // On a terminal one line is redrawn in place, but a preemption or a resize stays on screen:
    // the events that follow would hide why the job stopped or what it runs on. Otherwise each
    // event is a line of a log.
    const bool keep = !live || event.kind() == pp::v1::EVENT_PREEMPTED ||
                      event.kind() == pp::v1::EVENT_RESIZED;
    std::cout << (live ? "\r\033[K" : "") << ProgressLine(event) << (keep ? "\n" : "")
              << std::flush;
  }
  if (live) std::cout << "\n";
  grpc::Status status = reader->Finish();
  if (!status.ok()) return Fail("watch", Describe(status));
  if (last == pp::v1::EVENT_FINISHED) return common::kExitOk;
  if (last == pp::v1::EVENT_FAILED || last == pp::v1::EVENT_CANCELLED) return common::kExitFailure;
  return Fail("watch", "the stream ended before the job did");
}

int Cancel(pp::v1::Coordinator::Stub& stub, const std::vector<std::string>& args) {
  pp::v1::CancelJobRequest request;
  request.set_job_id(args[0]);
  pp::v1::Job job;
  grpc::Status status = stub.CancelJob(Context().get(), request, &job);
  if (!status.ok()) return Fail("cancel", Describe(status));
  std::cout << job.id() << " " << pp::v1::JobState_Name(job.state()) << "\n";
  return common::kExitOk;
}

int Resume(pp::v1::Coordinator::Stub& stub, const std::vector<std::string>& args) {
  pp::v1::ResumeJobRequest request;
  request.set_job_id(args[0]);
  request.set_step(absl::GetFlag(FLAGS_step));
  request.set_steps(absl::GetFlag(FLAGS_steps));
  request.set_epoch(absl::GetFlag(FLAGS_epoch));
  if (const std::string parallel = absl::GetFlag(FLAGS_parallel); !parallel.empty()) {
    if (absl::Status parsed = pp::common::JsonToMessage(parallel, request.mutable_parallel());
        !parsed.ok()) {
      return Fail("resume", absl::StrCat("--parallel: ", parsed.message()), common::kExitUsage);
    }
  }
  pp::v1::Job job;
  grpc::Status status = stub.ResumeJob(Context().get(), request, &job);
  if (!status.ok()) return Fail("resume", Describe(status));
  std::cout << job.id() << " " << pp::v1::JobState_Name(job.state()) << "\n";
  return common::kExitOk;
}

int Workers(pp::v1::Coordinator::Stub& stub, const std::vector<std::string>&) {
  pp::v1::ListWorkersResponse response;
  grpc::Status status = stub.ListWorkers(Context().get(), {}, &response);
  if (!status.ok()) return Fail("workers", Describe(status));
  const double now = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  std::cout << absl::StrFormat("%-16s %-6s %-24s %-8s %-22s %s\n", "WORKER", "STATE", "JOB",
                               "DEVICE", "ADDRESS", "LAST HEARTBEAT");
  for (const pp::v1::WorkerInfo& w : response.workers()) {
    std::cout << absl::StrFormat("%-16s %-6s %-24s %-8s %-22s %.1fs ago\n", w.name(),
                                 pp::v1::WorkerState_Name(w.state()),
                                 w.job_id().empty() ? "-" : w.job_id(), w.device(), w.address(),
                                 now - w.last_heartbeat_unix());
  }
  return common::kExitOk;
}

int Trace(pp::v1::Coordinator::Stub& stub, const std::vector<std::string>& args) {
  const std::string format = absl::GetFlag(FLAGS_format);
  if (format != "ascii" && format != "chrome" && format != "json") {
    return Fail("trace", absl::StrCat("--format: unknown \"", format, "\" (ascii, chrome, json)"),
                common::kExitUsage);
  }
  pp::v1::GetTraceRequest request;
  request.set_job_id(args[0]);
  request.set_step(absl::GetFlag(FLAGS_step));
  pp::v1::StepTrace trace;
  grpc::Status status = stub.GetTrace(Context().get(), request, &trace);
  if (!status.ok()) return Fail("trace", Describe(status));
  if (format == "json") {
    std::cout << Json(trace);
    return common::kExitOk;
  }
  // The planner's renderers: a measured step reads like `ppctl plan`'s timeline.
  const pp::plan::Timeline timeline = pp::plan::TimelineFromTrace(trace);
  if (format == "ascii") {
    std::cout << "job " << trace.job_id() << " step " << trace.step() << " (measured)\n"
              << pp::plan::RenderAscii(timeline, pp::plan::TimeUnit::kSeconds);
  } else {
    std::cout << pp::plan::RenderChrome(timeline, 1e6);
  }
  return common::kExitOk;
}

const std::map<std::string, Command>& Commands() {
  static const auto* commands = new std::map<std::string, Command>{
      {"submit",
       {"submit FILE: submit the job spec FILE (proto3 JSON or text); prints the job id", 1,
        Submit}},
      {"get",
       {"get JOB: the job as proto3 JSON (state, reason, step, loss, placement, priority, queue "
        "position)",
        1, Get}},
      {"list", {"list: every job, one line each", 0, List}},
      {"logs",
       {"logs JOB [--rank=R] [--follow]: the lines each worker wrote for the job's tasks (start, "
        "steps, checkpoints, the end or the error in full), fetched through ppcoord",
        1,
        [](pp::v1::Coordinator::Stub& stub, const std::vector<std::string>& args) {
          return RunLogsCommand(stub, args, {Context, Describe});
        }}},
      {"history",
       {"history JOB [--format=table|csv|json]: every recorded step (loss, learning rate, "
        "step seconds, tokens/s, bubble, eval loss, skipped), oldest first",
        1, History}},
      {"queue",
       {"queue: the queued jobs in the order ppcoord will try them (priority, owner, wait, "
        "estimated start, reason), then what runs",
        0, Queue}},
      {"watch",
       {"watch JOB: live progress until the job ends; exit 0 only if it SUCCEEDED", 1, Watch}},
      {"cancel", {"cancel JOB: stop a queued or running job", 1, Cancel}},
      {"resume",
       {"resume JOB [--step=N] [--epoch=N] [--steps=N] [--parallel=JSON]: queue an ended job "
        "again from its newest (or step N's, or the newest at or before epoch N's start; at "
        "most one of --step and --epoch) verified checkpoint, optionally on a new layout",
        1, Resume}},
      {"workers", {"workers: registered workers and their state", 0, Workers}},
      {"trace",
       {"trace JOB [--step=N] [--format=ascii|chrome|json]: the measured timeline of a "
        "step",
        1, Trace}},
      {"report",
       {"report JOB [--out=FILE.html]: one self-contained HTML page of the job: loss, eval, "
        "learning-rate, tokens/s and bubble curves with restarts and resizes marked, its layout, "
        "and its last traced step beside that step simulated",
        1,
        [](pp::v1::Coordinator::Stub& stub, const std::vector<std::string>& args) {
          return RunReport(stub, args[0], {Context, Describe});
        }}},
  };
  return *commands;
}

}  // namespace

std::vector<std::string> JobCommandNames() {
  return {"submit", "get",    "list",   "history", "logs",  "queue",
          "watch",  "cancel", "resume", "workers", "trace", "report"};
}

std::string JobCommandUsage(const std::string& command) {
  auto it = Commands().find(command);
  return it == Commands().end() ? "" : it->second.usage;
}

std::vector<std::string> JobCommandFlags(const std::string& command) {
  if (command == "trace") return {"step", "format"};
  if (command == "history") return {"format"};
  if (command == "logs") return {"rank", "follow"};
  if (command == "report") return {"out"};
  if (command == "resume") return {"step", "epoch", "steps", "parallel"};
  return {};
}

int RunJobCommand(const std::string& command, const std::vector<std::string>& args) {
  auto it = Commands().find(command);
  if (it == Commands().end()) return Fail(command, "unknown command", common::kExitUsage);
  const Command& c = it->second;
  if (static_cast<int>(args.size()) != c.positional) {
    return Fail(command,
                absl::StrCat("expected ", c.positional, " argument(s), got ", args.size(),
                             "; usage: ppctl ", c.usage),
                common::kExitUsage);
  }
  const std::string address = absl::GetFlag(FLAGS_coordinator);
  if (absl::StatusOr<common::HostPort> at = common::ParseHostPort(address, "coordinator");
      !at.ok() || at->port == 0) {
    return Fail(command,
                absl::StrCat("--coordinator=", address,
                             ": want HOST:PORT of ppcoord, e.g. 127.0.0.1:50051"),
                common::kExitUsage);
  }
  absl::StatusOr<ClientCredentials> credentials = ClientCredentialsFromFlags();
  if (!credentials.ok()) {
    return Fail(command, std::string(credentials.status().message()), common::kExitUsage);
  }
  BearerToken() = credentials->token;
  std::shared_ptr<grpc::Channel> channel = grpc::CreateChannel(address, credentials->channel);
  const absl::Duration timeout = absl::GetFlag(FLAGS_rpc_timeout);
  if (!channel->WaitForConnected(absl::ToChronoTime(absl::Now() + timeout))) {
    return Fail(
        command,
        absl::StrCat("cannot reach the coordinator at ", address, " within ",
                     absl::FormatDuration(timeout), " (is ppcoord running? see --coordinator",
                     credentials->tls ? "; with TLS: does --ca hold the CA that signed "
                                        "ppcoord's certificate, and does it name this host?"
                                      : "; a TLS ppcoord needs --ca",
                     ")"));
  }
  std::unique_ptr<pp::v1::Coordinator::Stub> stub = pp::v1::Coordinator::NewStub(channel);
  return c.run(*stub, args);
}

}  // namespace pp::client
