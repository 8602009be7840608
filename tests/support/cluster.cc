#include "tests/support/cluster.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/host_port.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace pp::testing_support {
namespace {

constexpr absl::Duration kPoll = absl::Milliseconds(20);
constexpr absl::Duration kRpcDeadline = absl::Seconds(10);

std::chrono::system_clock::time_point DeadlineAfter(absl::Duration timeout) {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout);
}

absl::Status FromGrpc(const std::string& call, const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(call, ": ", status.error_message()));
}

absl::StatusOr<Addresses> ParseAddresses(const std::string& json) {
  google::protobuf::Struct fields;
  if (!google::protobuf::util::JsonStringToMessage(json, &fields).ok()) {
    return absl::InvalidArgumentError(absl::StrCat("address file is not JSON: ", json));
  }
  Addresses a;
  for (auto [key, out] : {std::pair{"grpc", &a.grpc}, std::pair{"metrics", &a.metrics}}) {
    auto it = fields.fields().find(key);
    if (it == fields.fields().end() || it->second.string_value().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("address file lacks \"", key, "\": ", json));
    }
    *out = it->second.string_value();
  }
  return a;
}

// The address file once `process` wrote it (a daemon writes it once it serves).
absl::StatusOr<Addresses> WaitForAddresses(Process& process, const std::string& file,
                                           absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (std::filesystem::exists(file)) return ParseAddresses(ReadFile(file));
    if (absl::StatusOr<int> code = process.Wait(absl::ZeroDuration()); code.ok()) {
      return absl::InternalError(
          absl::StrCat("exited with ", *code, " before writing ", file, ":\n", process.LogTail()));
    }
    absl::SleepFor(kPoll);
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "no ", file, " after ", absl::FormatDuration(timeout), ":\n", process.LogTail()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Cluster>> Cluster::Start(const ClusterOptions& options) {
  std::unique_ptr<Cluster> cluster(new Cluster(options));
  std::error_code ec;
  std::filesystem::create_directories(cluster->data_dir(), ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot create ", cluster->data_dir(), ": ", ec.message()));
  }
  if (absl::Status started = cluster->StartCoordinator(0); !started.ok()) return started;
  return cluster;
}

Cluster::~Cluster() {
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  std::vector<Process*> daemons;
  for (auto& [name, worker] : workers_) daemons.push_back(worker.process.get());
  if (coordinator_.process) daemons.push_back(coordinator_.process.get());
  for (Process* daemon : daemons) daemon->Signal(SIGTERM);
  for (Process* daemon : daemons) {
    (void)daemon->Wait(std::max(deadline - absl::Now(), absl::ZeroDuration()));
  }
  // Whatever still runs is SIGKILLed and reaped by ~Process.
}

absl::StatusOr<Cluster::Daemon> Cluster::Launch(const std::string& name,
                                                std::vector<std::string> argv,
                                                const std::map<std::string, std::string>& env) {
  const std::string address_file = absl::StrCat(options_.dir, "/", name, ".json");
  std::filesystem::remove(address_file);  // a restarted daemon's predecessor wrote one
  argv.push_back("--address_file=" + address_file);
  ProcessOptions process_options;
  process_options.env = env;
  absl::StatusOr<std::unique_ptr<Process>> process =
      Process::Start(argv, absl::StrCat(options_.dir, "/", name, ".log"), process_options);
  Daemon daemon;
  if (!process.ok()) return process.status();
  daemon.process = *std::move(process);
  absl::StatusOr<Addresses> addresses =
      WaitForAddresses(*daemon.process, address_file, options_.startup_timeout);
  if (!addresses.ok()) {
    return absl::Status(addresses.status().code(),
                        absl::StrCat(name, ": ", addresses.status().message()));
  }
  daemon.addresses = *addresses;
  return daemon;
}

absl::Status Cluster::StartCoordinator(int port) {
  const std::string& host = options_.coordinator_host;
  std::vector<std::string> argv = {options_.bin_dir + "/ppcoord",
                                   absl::StrCat("--grpc=", host, ":", port),
                                   absl::StrCat("--metrics=", host, ":0"),
                                   "--data_dir=" + data_dir()};
  argv.insert(argv.end(), options_.coordinator_flags.begin(), options_.coordinator_flags.end());
  absl::StatusOr<Daemon> coordinator = Launch("ppcoord", argv, options_.coordinator_env);
  if (!coordinator.ok()) return coordinator.status();
  coordinator_ = *std::move(coordinator);
  stub_ = pp::v1::Coordinator::NewStub(grpc::CreateChannel(
      coordinator_.addresses.grpc,
      options_.credentials != nullptr ? options_.credentials : grpc::InsecureChannelCredentials()));
  return absl::OkStatus();
}

void Cluster::KillCoordinator() {
  coordinator_.process->Signal(SIGKILL);
  (void)coordinator_.process->Wait(absl::Seconds(10));
}

absl::Status Cluster::RestartCoordinator() {
  absl::StatusOr<pp::common::HostPort> grpc =
      pp::common::ParseHostPort(coordinator_.addresses.grpc);
  if (!grpc.ok()) return grpc.status();
  return StartCoordinator(grpc->port);
}

absl::Status Cluster::LaunchWorker(const std::string& name, const WorkerOptions& options) {
  std::vector<std::string> argv = options.run_in;
  argv.insert(argv.end(), {options_.bin_dir + "/ppworker",
                           "--coordinator=" + coordinator_.addresses.grpc,
                           absl::StrCat("--grpc=", options.host, ":0"),
                           absl::StrCat("--metrics=", options.host, ":0"), "--device=cpu",
                           "--name=" + name});
  argv.insert(argv.end(), options_.worker_flags.begin(), options_.worker_flags.end());
  argv.insert(argv.end(), options.flags.begin(), options.flags.end());
  std::map<std::string, std::string> env = options.env;
  env.insert(options_.worker_env.begin(), options_.worker_env.end());  // keeps options.env's
  absl::StatusOr<Daemon> worker = Launch(name, argv, env);
  if (!worker.ok()) return worker.status();
  workers_[name] = *std::move(worker);
  return absl::OkStatus();
}

absl::Status Cluster::WaitIdle(const std::vector<std::string>& names) {
  const absl::Time deadline = absl::Now() + options_.startup_timeout;
  while (true) {
    absl::StatusOr<std::vector<pp::v1::WorkerInfo>> workers = ListWorkers(*stub_);
    size_t idle = 0;
    if (workers.ok()) {
      for (const pp::v1::WorkerInfo& w : *workers) {
        if (w.state() == pp::v1::IDLE && absl::c_linear_search(names, w.name())) ++idle;
      }
    }
    if (idle == names.size()) return absl::OkStatus();
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(idle, " of workers ", absl::StrJoin(names, ","), " IDLE after ",
                       absl::FormatDuration(options_.startup_timeout), "\n", Logs()));
    }
    absl::SleepFor(kPoll);
  }
}

absl::Status Cluster::StartWorker(const std::string& name, const WorkerOptions& options) {
  if (absl::Status launched = LaunchWorker(name, options); !launched.ok()) return launched;
  return WaitIdle({name});
}

absl::Status Cluster::AddWorkers(int n) {
  std::vector<std::string> names;
  for (int k = 0; k < n; ++k) {
    names.push_back(absl::StrCat("w", workers_.size()));
    if (absl::Status launched = LaunchWorker(names.back(), {}); !launched.ok()) return launched;
  }
  return WaitIdle(names);
}

std::vector<std::string> Cluster::worker_names() const {
  std::vector<std::string> names;
  for (const auto& [name, worker] : workers_) names.push_back(name);
  return names;
}

std::string Cluster::Logs() const {
  std::string out;
  if (coordinator_.process) absl::StrAppend(&out, "--- ppcoord\n", coordinator_.process->LogTail());
  for (const auto& [name, worker] : workers_) {
    absl::StrAppend(&out, "--- ", name, "\n", worker.process->LogTail());
  }
  return out;
}

absl::StatusOr<std::vector<pp::v1::WorkerInfo>> ListWorkers(pp::v1::Coordinator::Stub& stub) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(kRpcDeadline));
  pp::v1::ListWorkersResponse response;
  grpc::Status status = stub.ListWorkers(&context, {}, &response);
  if (!status.ok()) return FromGrpc("ListWorkers", status);
  return std::vector<pp::v1::WorkerInfo>(response.workers().begin(), response.workers().end());
}

absl::StatusOr<pp::v1::Job> GetJob(pp::v1::Coordinator::Stub& stub, const std::string& job_id) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(kRpcDeadline));
  pp::v1::GetJobRequest request;
  request.set_job_id(job_id);
  pp::v1::Job job;
  grpc::Status status = stub.GetJob(&context, request, &job);
  if (!status.ok()) return FromGrpc("GetJob", status);
  return job;
}

absl::StatusOr<std::string> SubmitJob(pp::v1::Coordinator::Stub& stub,
                                      const pp::v1::JobSpec& spec) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(kRpcDeadline));
  pp::v1::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  pp::v1::SubmitJobResponse response;
  grpc::Status status = stub.SubmitJob(&context, request, &response);
  if (!status.ok()) return FromGrpc("SubmitJob", status);
  return response.job_id();
}

absl::StatusOr<pp::v1::Job> ResumeJob(pp::v1::Coordinator::Stub& stub,
                                      const pp::v1::ResumeJobRequest& request) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(kRpcDeadline));
  pp::v1::Job job;
  grpc::Status status = stub.ResumeJob(&context, request, &job);
  if (!status.ok()) return FromGrpc("ResumeJob", status);
  return job;
}

absl::StatusOr<pp::v1::Job> WaitForJob(pp::v1::Coordinator::Stub& stub, const std::string& job_id,
                                       const std::function<bool(const pp::v1::Job&)>& done,
                                       absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  pp::v1::Job last;
  while (absl::Now() < deadline) {
    absl::StatusOr<pp::v1::Job> job = GetJob(stub, job_id);
    if (job.ok()) {
      if (done(*job)) return job;
      last = *std::move(job);
    }
    absl::SleepFor(kPoll);
  }
  return absl::DeadlineExceededError(
      absl::StrCat("job ", job_id, " is ", pp::v1::JobState_Name(last.state()), " at step ",
                   last.step(), " after ", absl::FormatDuration(timeout), ": ", last.reason()));
}

absl::StatusOr<pp::v1::Job> WaitSucceeded(pp::v1::Coordinator::Stub& stub,
                                          const std::string& job_id, absl::Duration timeout) {
  absl::StatusOr<pp::v1::Job> job = WaitForJob(
      stub, job_id,
      [](const pp::v1::Job& j) {
        return j.state() == pp::v1::SUCCEEDED || j.state() == pp::v1::FAILED ||
               j.state() == pp::v1::CANCELLED;
      },
      timeout);
  if (job.ok() && job->state() != pp::v1::SUCCEEDED) {
    return absl::InternalError(absl::StrCat(
        "job ", job_id, " ended ", pp::v1::JobState_Name(job->state()), ": ", job->reason()));
  }
  return job;
}

absl::StatusOr<std::unique_ptr<JobWatch>> JobWatch::Open(pp::v1::Coordinator::Stub& stub,
                                                         const std::string& job_id,
                                                         absl::Duration timeout) {
  std::unique_ptr<JobWatch> watch(new JobWatch());
  watch->context_.set_deadline(DeadlineAfter(timeout));
  pp::v1::WatchJobRequest request;
  request.set_job_id(job_id);
  watch->reader_ = stub.WatchJob(&watch->context_, request);
  pp::v1::JobEvent first;
  if (!watch->reader_->Read(&first)) {
    grpc::Status status = watch->reader_->Finish();
    watch->reader_.reset();
    return absl::UnavailableError(absl::StrCat("WatchJob ", job_id, ": ", status.error_message()));
  }
  watch->events_.push_back(first);
  return watch;
}

JobWatch::~JobWatch() {
  if (reader_) {
    context_.TryCancel();
    (void)reader_->Finish();
  }
}

absl::StatusOr<std::vector<pp::v1::JobEvent>> JobWatch::Rest() {
  auto ended = [](const pp::v1::JobEvent& e) {
    return e.kind() == pp::v1::EVENT_FINISHED || e.kind() == pp::v1::EVENT_FAILED ||
           e.kind() == pp::v1::EVENT_CANCELLED;
  };
  pp::v1::JobEvent event;
  while (!ended(events_.back()) && reader_->Read(&event)) events_.push_back(event);
  grpc::Status status = reader_->Finish();
  reader_.reset();
  if (!ended(events_.back())) {
    return absl::DeadlineExceededError(
        absl::StrCat("WatchJob ended before the job did (", status.error_message(), ")"));
  }
  return events_;
}

}  // namespace pp::testing_support
