#include "tests/integration/cluster.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

extern char** environ;

namespace pp::integration {
namespace {

constexpr absl::Duration kPoll = absl::Milliseconds(20);

std::chrono::system_clock::time_point DeadlineAfter(absl::Duration timeout) {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout);
}

// posix_spawn with stdout to `out` and stderr to `err` (appended; may be the same file).
absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv, const std::string& out,
                            const std::string& err) {
  if (argv.empty()) return absl::InvalidArgumentError("empty command line");
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (err == out) {
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
  } else {
    posix_spawn_file_actions_addopen(&actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  }
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    return absl::InternalError(absl::StrCat("cannot start ", argv[0], ": ", std::strerror(rc)));
  }
  return pid;
}

// The exit code of `pid` (128 + signal when killed) once it ends, or nullopt after `timeout`.
std::optional<int> WaitPid(pid_t pid, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    int status = 0;
    const pid_t got = waitpid(pid, &status, WNOHANG);
    if (got == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (got < 0) return -1;  // not our child any more: nothing to wait for
    if (absl::Now() >= deadline) return std::nullopt;
    absl::SleepFor(kPoll);
  }
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

}  // namespace

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

absl::StatusOr<std::unique_ptr<Process>> Process::Start(const std::vector<std::string>& argv,
                                                        const std::string& log) {
  absl::StatusOr<pid_t> pid = Spawn(argv, log, log);
  if (!pid.ok()) return pid.status();
  return std::unique_ptr<Process>(new Process(*pid, log));
}

Process::~Process() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

void Process::Signal(int signal) {
  if (pid_ > 0) kill(pid_, signal);
}

absl::StatusOr<int> Process::Wait(absl::Duration timeout) {
  if (pid_ <= 0) return absl::FailedPreconditionError("process already reaped");
  std::optional<int> code = WaitPid(pid_, timeout);
  if (!code) {
    return absl::DeadlineExceededError(
        absl::StrCat("pid ", pid_, " still runs after ", absl::FormatDuration(timeout)));
  }
  pid_ = -1;
  return *code;
}

std::string Process::LogTail(size_t bytes) const {
  const std::string text = ReadFile(log_);
  return text.size() <= bytes ? text : text.substr(text.size() - bytes);
}

absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         absl::Duration timeout) {
  char out_path[] = "/tmp/pp_integration_out_XXXXXX";
  char err_path[] = "/tmp/pp_integration_err_XXXXXX";
  const int out_fd = mkstemp(out_path), err_fd = mkstemp(err_path);
  if (out_fd >= 0) close(out_fd);
  if (err_fd >= 0) close(err_fd);
  if (out_fd < 0 || err_fd < 0) return absl::InternalError("mkstemp failed");
  absl::StatusOr<pid_t> pid = Spawn(argv, out_path, err_path);
  CommandResult result;
  absl::Status status;
  if (pid.ok()) {
    std::optional<int> code = WaitPid(*pid, timeout);
    if (!code) {
      kill(*pid, SIGKILL);
      waitpid(*pid, nullptr, 0);
      status = absl::DeadlineExceededError(absl::StrCat(
          absl::StrJoin(argv, " "), " still runs after ", absl::FormatDuration(timeout)));
    } else {
      result.exit_code = *code;
    }
  } else {
    status = pid.status();
  }
  result.out = ReadFile(out_path);
  result.err = ReadFile(err_path);
  unlink(out_path);
  unlink(err_path);
  if (!status.ok()) return status;
  return result;
}

absl::StatusOr<std::unique_ptr<Cluster>> Cluster::Start(const ClusterOptions& options) {
  std::unique_ptr<Cluster> cluster(new Cluster(options));
  std::error_code ec;
  std::filesystem::create_directories(options.dir, ec);
  if (ec)
    return absl::InternalError(absl::StrCat("cannot create ", options.dir, ": ", ec.message()));
  const std::string address_file = options.dir + "/ppcoord.json";
  std::vector<std::string> argv = {options.bin_dir + "/ppcoord", "--grpc=127.0.0.1:0",
                                   "--metrics=127.0.0.1:0", "--data_dir=" + cluster->data_dir(),
                                   "--address_file=" + address_file};
  argv.insert(argv.end(), options.coordinator_flags.begin(), options.coordinator_flags.end());
  absl::StatusOr<std::unique_ptr<Process>> process =
      Process::Start(argv, options.dir + "/ppcoord.log");
  if (!process.ok()) return process.status();
  cluster->coordinator_ = std::move(*process);
  absl::StatusOr<Addresses> addresses =
      cluster->WaitForAddresses(*cluster->coordinator_, address_file);
  if (!addresses.ok()) return addresses.status();
  cluster->coordinator_address_ = *addresses;
  cluster->stub_ = pp::v1::Coordinator::NewStub(
      grpc::CreateChannel(addresses->grpc, grpc::InsecureChannelCredentials()));
  return cluster;
}

Cluster::~Cluster() {
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  for (auto& worker : workers_) worker->Signal(SIGTERM);
  if (coordinator_) coordinator_->Signal(SIGTERM);
  for (auto& worker : workers_) {
    if (worker->running())
      (void)worker->Wait(std::max(deadline - absl::Now(), absl::ZeroDuration()));
  }
  if (coordinator_ && coordinator_->running()) {
    (void)coordinator_->Wait(std::max(deadline - absl::Now(), absl::ZeroDuration()));
  }
  // Whatever still runs is SIGKILLed and reaped by ~Process.
}

absl::StatusOr<Addresses> Cluster::WaitForAddresses(Process& process, const std::string& file) {
  const absl::Time deadline = absl::Now() + options_.startup_timeout;
  while (absl::Now() < deadline) {
    if (std::filesystem::exists(file)) return ParseAddresses(ReadFile(file));
    if (absl::StatusOr<int> code = process.Wait(absl::ZeroDuration()); code.ok()) {
      return absl::InternalError(
          absl::StrCat("exited with ", *code, " before writing ", file, ":\n", process.LogTail()));
    }
    absl::SleepFor(kPoll);
  }
  return absl::DeadlineExceededError(absl::StrCat("no ", file, " after ",
                                                  absl::FormatDuration(options_.startup_timeout),
                                                  ":\n", process.LogTail()));
}

absl::Status Cluster::AddWorkers(int n) {
  std::vector<std::string> names;
  for (int k = 0; k < n; ++k) {
    const int i = num_workers();
    const std::string name = absl::StrCat("w", i);
    const std::string address_file = absl::StrCat(options_.dir, "/", name, ".json");
    std::vector<std::string> argv = {options_.bin_dir + "/ppworker",
                                     "--coordinator=" + coordinator_address_.grpc,
                                     "--grpc=127.0.0.1:0",
                                     "--metrics=127.0.0.1:0",
                                     "--device=cpu",
                                     "--name=" + name,
                                     "--address_file=" + address_file};
    argv.insert(argv.end(), options_.worker_flags.begin(), options_.worker_flags.end());
    absl::StatusOr<std::unique_ptr<Process>> process =
        Process::Start(argv, absl::StrCat(options_.dir, "/", name, ".log"));
    if (!process.ok()) return process.status();
    workers_.push_back(std::move(*process));
    absl::StatusOr<Addresses> addresses = WaitForAddresses(*workers_.back(), address_file);
    if (!addresses.ok()) return addresses.status();
    worker_addresses_.push_back(*addresses);
    names.push_back(name);
  }
  const absl::Time deadline = absl::Now() + options_.startup_timeout;
  while (true) {
    absl::StatusOr<std::vector<pp::v1::WorkerInfo>> workers = ListWorkers(*stub_);
    int idle = 0;
    if (workers.ok()) {
      for (const pp::v1::WorkerInfo& w : *workers) {
        if (w.state() == pp::v1::IDLE && absl::c_linear_search(names, w.name())) ++idle;
      }
    }
    if (idle == n) return absl::OkStatus();
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(idle, " of workers ", absl::StrJoin(names, ","), " IDLE after ",
                       absl::FormatDuration(options_.startup_timeout), "\n", Logs()));
    }
    absl::SleepFor(kPoll);
  }
}

std::string Cluster::Logs() const {
  std::string out;
  if (coordinator_) absl::StrAppend(&out, "--- ppcoord\n", coordinator_->LogTail());
  for (size_t i = 0; i < workers_.size(); ++i) {
    absl::StrAppend(&out, "--- w", i, "\n", workers_[i]->LogTail());
  }
  return out;
}

absl::StatusOr<std::vector<pp::v1::WorkerInfo>> ListWorkers(pp::v1::Coordinator::Stub& stub) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(absl::Seconds(5)));
  pp::v1::ListWorkersResponse response;
  grpc::Status status = stub.ListWorkers(&context, {}, &response);
  if (!status.ok()) return absl::UnavailableError("ListWorkers: " + status.error_message());
  return std::vector<pp::v1::WorkerInfo>(response.workers().begin(), response.workers().end());
}

absl::StatusOr<pp::v1::Job> GetJob(pp::v1::Coordinator::Stub& stub, const std::string& job_id) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(absl::Seconds(5)));
  pp::v1::GetJobRequest request;
  request.set_job_id(job_id);
  pp::v1::Job job;
  grpc::Status status = stub.GetJob(&context, request, &job);
  if (!status.ok()) return absl::UnavailableError("GetJob: " + status.error_message());
  return job;
}

absl::StatusOr<std::string> SubmitJob(pp::v1::Coordinator::Stub& stub,
                                      const pp::v1::JobSpec& spec) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(absl::Seconds(10)));
  pp::v1::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  pp::v1::SubmitJobResponse response;
  grpc::Status status = stub.SubmitJob(&context, request, &response);
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  }
  return response.job_id();
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

}  // namespace pp::integration
