#include "tests/recovery/cluster.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/checkpoint.h"
#include "coordinator/store.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace pp::recovery {
namespace {

namespace fs = std::filesystem;

constexpr absl::Duration kRpcDeadline = absl::Seconds(5);
constexpr absl::Duration kStartTimeout = absl::Seconds(20);

std::unique_ptr<grpc::ClientContext> Context() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(absl::Now() + kRpcDeadline));
  return context;
}

absl::Status FromGrpc(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

// The "grpc" address of an --address_file, once the file exists.
absl::StatusOr<std::string> WaitForAddress(const std::string& path, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    const std::string json = text.str();
    const size_t key = json.find("\"grpc\":\"");
    if (key != std::string::npos) {
      const size_t start = key + 8;
      return json.substr(start, json.find('"', start) - start);
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::DeadlineExceededError(absl::StrCat("no address file ", path));
}

int PortOf(const std::string& address) {
  int port = 0;
  (void)absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port);
  return port;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Process>> Process::Start(
    const std::vector<std::string>& argv, const std::string& log,
    const std::map<std::string, std::string>& env) {
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot open ", log));
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fd);
    return absl::InternalError("fork failed");
  }
  if (pid == 0) {
    ::dup2(fd, STDOUT_FILENO);
    ::dup2(fd, STDERR_FILENO);
    for (const auto& [key, value] : env) ::setenv(key.c_str(), value.c_str(), 1);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(fd);
  return std::unique_ptr<Process>(new Process(pid));
}

Process::~Process() {
  if (reaped_) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
}

void Process::Signal(int signal) {
  if (!reaped_) ::kill(pid_, signal);
}

absl::StatusOr<int> Process::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!reaped_) {
    int status = 0;
    const pid_t done = ::waitpid(pid_, &status, WNOHANG);
    if (done == pid_) {
      reaped_ = true;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("process ", pid_, " still runs"));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::FailedPreconditionError("already reaped");
}

absl::Status Cluster::StartCoordinator(int port) {
  fs::create_directories(data_dir());
  const std::string address_file = dir_ + "/ppcoord.address";
  fs::remove(address_file);
  absl::StatusOr<std::unique_ptr<Process>> process = Process::Start(
      {PPCOORD_PATH, absl::StrCat("--grpc=127.0.0.1:", port), "--metrics=127.0.0.1:0",
       "--data_dir=" + data_dir(), "--address_file=" + address_file, "--worker_timeout=2s",
       "--heartbeat_interval=200ms"},
      dir_ + "/ppcoord.log");
  if (!process.ok()) return process.status();
  coordinator_ = *std::move(process);
  absl::StatusOr<std::string> address = WaitForAddress(address_file, kStartTimeout);
  if (!address.ok()) return address.status();
  port_ = PortOf(*address);
  stub_ = pp::v1::Coordinator::NewStub(
      grpc::CreateChannel(*address, grpc::InsecureChannelCredentials()));
  return absl::OkStatus();
}

void Cluster::KillCoordinator() {
  coordinator_->Signal(SIGKILL);
  (void)coordinator_->Wait(absl::Seconds(10));
}

absl::Status Cluster::StartWorker(const std::string& name,
                                  const std::map<std::string, std::string>& env) {
  absl::StatusOr<std::unique_ptr<Process>> process = Process::Start(
      {PPWORKER_PATH, absl::StrCat("--coordinator=127.0.0.1:", port_), "--grpc=127.0.0.1:0",
       "--metrics=127.0.0.1:0", "--device=cpu", "--name=" + name, "--comm_timeout=10",
       "--drain_timeout=30"},
      absl::StrCat(dir_, "/", name, ".log"), env);
  if (!process.ok()) return process.status();
  workers_[name] = *std::move(process);
  const absl::Time deadline = absl::Now() + kStartTimeout;
  while (absl::Now() < deadline) {
    pp::v1::ListWorkersResponse listed;
    if (stub_->ListWorkers(Context().get(), {}, &listed).ok()) {
      for (const pp::v1::WorkerInfo& w : listed.workers()) {
        if (w.name() == name && w.state() == pp::v1::IDLE) return absl::OkStatus();
      }
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::DeadlineExceededError(absl::StrCat("worker ", name, " did not register"));
}

absl::StatusOr<std::string> Cluster::Submit(const pp::v1::JobSpec& spec) {
  pp::v1::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  pp::v1::SubmitJobResponse response;
  grpc::Status status = stub_->SubmitJob(Context().get(), request, &response);
  if (!status.ok()) return FromGrpc(status);
  return response.job_id();
}

absl::StatusOr<pp::v1::Job> Cluster::Get(const std::string& job_id) {
  pp::v1::GetJobRequest request;
  request.set_job_id(job_id);
  pp::v1::Job job;
  grpc::Status status = stub_->GetJob(Context().get(), request, &job);
  if (!status.ok()) return FromGrpc(status);
  return job;
}

absl::StatusOr<pp::v1::Job> Cluster::WaitFor(const std::string& job_id,
                                             const std::function<bool(const pp::v1::Job&)>& done,
                                             absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  pp::v1::Job last;
  while (absl::Now() < deadline) {
    absl::StatusOr<pp::v1::Job> job = Get(job_id);
    if (job.ok()) {
      if (done(*job)) return job;
      last = *std::move(job);
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::DeadlineExceededError(absl::StrCat("job ", job_id, " is ",
                                                  pp::v1::JobState_Name(last.state()), " at step ",
                                                  last.step(), ": ", last.reason()));
}

absl::StatusOr<pp::v1::Job> Cluster::WaitSucceeded(const std::string& job_id,
                                                   absl::Duration timeout) {
  absl::StatusOr<pp::v1::Job> job = WaitFor(
      job_id,
      [](const pp::v1::Job& j) {
        return j.state() == pp::v1::SUCCEEDED || j.state() == pp::v1::FAILED ||
               j.state() == pp::v1::CANCELLED;
      },
      timeout);
  if (job.ok() && job->state() != pp::v1::SUCCEEDED) {
    return absl::InternalError(absl::StrCat("job ", job_id, " ended ",
                                            pp::v1::JobState_Name(job->state()), ": ",
                                            job->reason()));
  }
  return job;
}

std::string Cluster::LogTails() const {
  std::string out;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir_)) {
    if (entry.path().extension() != ".log") continue;
    std::ifstream in(entry.path());
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    absl::StrAppend(&out, "==== ", entry.path().filename().string(), "\n");
    for (size_t i = lines.size() > 15 ? lines.size() - 15 : 0; i < lines.size(); ++i) {
      absl::StrAppend(&out, lines[i], "\n");
    }
  }
  return out;
}

absl::StatusOr<std::map<std::string, std::vector<float>>> CheckpointValues(
    const std::string& root, const std::string& job, int step) {
  absl::StatusOr<common::Checkpoint> checkpoint =
      common::LoadCheckpoint(common::StepDir(root, job, step));
  if (!checkpoint.ok()) return checkpoint.status();
  std::map<std::string, std::vector<float>> values;
  for (auto& [name, tensor] : checkpoint->tensors) values[name] = std::move(tensor.data);
  return values;
}

absl::StatusOr<std::vector<double>> StoredLosses(const std::string& data_dir,
                                                 const std::string& job) {
  absl::StatusOr<std::unique_ptr<coordinator::JobStore>> store =
      coordinator::JobStore::Open(data_dir + "/ppcoord.db");
  if (!store.ok()) return store.status();
  absl::StatusOr<std::vector<coordinator::StepRecord>> steps = (*store)->Steps(job);
  if (!steps.ok()) return steps.status();
  std::vector<double> losses;
  for (const coordinator::StepRecord& s : *steps) {
    if (s.step != static_cast<int>(losses.size()) + 1) {
      return absl::DataLossError(absl::StrCat("job ", job, ": step ", s.step, " stored after ",
                                              losses.size(), " steps"));
    }
    losses.push_back(s.loss);
  }
  return losses;
}

}  // namespace pp::recovery
