#include "tests/coordinator/test_support.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "google/protobuf/unknown_field_set.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/impl/codegen/client_unary_call.h"
#include "grpcpp/impl/codegen/sync_stream.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/support/byte_buffer.h"

namespace pp::coordinator::testing {
namespace {

using google::protobuf::UnknownField;
using google::protobuf::UnknownFieldSet;

grpc::ByteBuffer ToBuffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

std::string FromBuffer(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  (void)buffer.Dump(&slices);
  std::string out;
  for (const grpc::Slice& s : slices)
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

}  // namespace

FakeWorker::FakeWorker(const std::string& name, const std::string& coordinator,
                       int64_t memory_bytes)
    : name_(name), memory_bytes_(memory_bytes) {
  registry_ = pp::v1::WorkerRegistry::NewStub(
      grpc::CreateChannel(coordinator, grpc::InsecureChannelCredentials()));
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(this);
  server_ = builder.BuildAndStart();
  address_ = absl::StrCat("127.0.0.1:", port);
  Register();
  heartbeat_ = std::thread([this] { HeartbeatLoop(); });
}

FakeWorker::~FakeWorker() {
  {
    absl::MutexLock lock(&mu_);
    done_ = true;
  }
  heartbeat_.join();
  if (serving_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
}

void FakeWorker::Register() {
  pp::v1::RegisterWorkerRequest request;
  request.mutable_worker()->set_name(name_);
  request.mutable_worker()->set_address(address_);
  request.mutable_worker()->set_device("cpu");
  request.mutable_worker()->set_memory_bytes(memory_bytes_);
  pp::v1::RegisterWorkerResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  (void)registry_->RegisterWorker(&context, request, &response);
}

void FakeWorker::HeartbeatLoop() {
  while (true) {
    pp::v1::HeartbeatRequest request;
    {
      absl::MutexLock lock(&mu_);
      auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done_; };
      mu_.AwaitWithTimeout(absl::Condition(&wake), absl::Milliseconds(50));
      if (done_) return;
      if (!heartbeating_) continue;
      request.set_name(name_);
      request.set_job_id(job_);
      request.set_attempt(attempt_);
    }
    pp::v1::HeartbeatResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
    if (!registry_->Heartbeat(&context, request, &response).ok()) continue;
    if (!response.known()) Register();
    absl::MutexLock lock(&mu_);
    for (const std::string& job : response.abort_jobs()) {
      if (job == job_) job_.clear();
    }
  }
}

void FakeWorker::StopHeartbeats() {
  absl::MutexLock lock(&mu_);
  heartbeating_ = false;
}

void FakeWorker::Vanish() {
  StopHeartbeats();
  // New calls are refused from here on; the answers of calls already handled (the RunTask that
  // WaitForTask saw arrive) still go out, so the test's "running job" is running on both sides. An
  // immediate deadline cancelled such an answer under load, and the job failed on that RunTask
  // instead of on the lost peer the test is about.
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  serving_ = false;
}

bool FakeWorker::WaitForTask(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto arrived = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !tasks_.empty(); };
  return mu_.AwaitWithTimeout(absl::Condition(&arrived), timeout);
}

std::vector<pp::v1::TaskPlan> FakeWorker::tasks() {
  absl::MutexLock lock(&mu_);
  return tasks_;
}

std::vector<std::string> FakeWorker::aborted_jobs() {
  absl::MutexLock lock(&mu_);
  return aborted_;
}

std::string FakeWorker::job() {
  absl::MutexLock lock(&mu_);
  return job_;
}

void FakeWorker::FinishTask(bool ok, const std::string& error, absl::StatusCode code,
                            bool drained) {
  pp::v1::TaskReport report;
  {
    absl::MutexLock lock(&mu_);
    const pp::v1::TaskPlan& plan = tasks_.back();
    report.set_job_id(plan.job_id());
    report.set_attempt(plan.attempt());
    report.set_rank(plan.rank());
    report.set_ok(ok);
    report.set_error(error);
    if (!ok) report.set_error_code(static_cast<int>(code));
    report.set_worker(name_);
    report.set_drained(drained);
    job_.clear();
  }
  pp::v1::ReportResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  (void)registry_->ReportTask(&context, report, &response);
}

int FakeWorker::calibrations() {
  absl::MutexLock lock(&mu_);
  return calibrations_;
}

grpc::Status FakeWorker::Calibrate(grpc::ServerContext*, const pp::v1::CalibrateRequest* request,
                                   pp::v1::RankCalibration* answer) {
  {
    absl::MutexLock lock(&mu_);
    ++calibrations_;
  }
  answer->set_rank(request->rank());
  for (const auto& [unit, weight] :
       {std::pair<const char*, double>{"embedding", 0.1}, {"block", 1}, {"head", 1.5}}) {
    for (int n : request->sequences()) {
      pp::v1::UnitCost* c = answer->add_units();
      c->set_unit(unit);
      c->set_sequences(n);
      c->set_forward(1e-3 * weight * n);
      c->set_backward(2e-3 * weight * n);
      c->set_backward_input(1e-3 * weight * n);
      c->set_backward_weight(1e-3 * weight * n);
      c->set_optimizer(1e-5);
    }
  }
  if (request->rank() + 1 < request->world_size()) {
    answer->set_link_latency_seconds(1e-5);
    answer->set_link_bytes_per_second(1e10);
  }
  answer->set_seconds(0.01);
  return grpc::Status::OK;
}

grpc::Status FakeWorker::RunTask(grpc::ServerContext*, const pp::v1::TaskPlan* plan,
                                 pp::v1::RunTaskResponse*) {
  absl::MutexLock lock(&mu_);
  if (!job_.empty()) return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "busy");
  tasks_.push_back(*plan);
  job_ = plan->job_id();
  attempt_ = plan->attempt();
  return grpc::Status::OK;
}

grpc::Status FakeWorker::AbortTask(grpc::ServerContext*, const pp::v1::AbortTaskRequest* request,
                                   pp::v1::AbortTaskResponse*) {
  absl::MutexLock lock(&mu_);
  aborted_.push_back(request->job_id());
  if (job_ == request->job_id()) job_.clear();
  return grpc::Status::OK;
}

absl::StatusOr<int> HealthCheck(const std::shared_ptr<grpc::Channel>& channel) {
  const grpc::internal::RpcMethod method("/grpc.health.v1.Health/Check",
                                         grpc::internal::RpcMethod::NORMAL_RPC);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::ByteBuffer response;
  grpc::Status status = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
      channel.get(), method, &context, ToBuffer(""), &response);
  if (!status.ok()) return absl::UnavailableError(status.error_message());
  UnknownFieldSet fields;
  if (!fields.ParseFromString(FromBuffer(response))) return absl::DataLossError("bad response");
  for (int i = 0; i < fields.field_count(); ++i) {
    if (fields.field(i).number() == 1) return static_cast<int>(fields.field(i).varint());
  }
  return 0;  // proto3 default: UNKNOWN
}

absl::StatusOr<std::vector<std::string>> ReflectionServices(
    const std::shared_ptr<grpc::Channel>& channel) {
  const grpc::internal::RpcMethod method(
      "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
      grpc::internal::RpcMethod::BIDI_STREAMING);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> stream(
      grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
          channel.get(), method, &context));
  UnknownFieldSet request;
  request.AddLengthDelimited(7, "");  // list_services
  std::string bytes;
  request.SerializeToString(&bytes);
  grpc::ByteBuffer response;
  const bool exchanged =
      stream->Write(ToBuffer(bytes)) && stream->WritesDone() && stream->Read(&response);
  grpc::Status status = stream->Finish();
  if (!exchanged || !status.ok()) return absl::UnavailableError(status.error_message());
  UnknownFieldSet fields;
  if (!fields.ParseFromString(FromBuffer(response))) return absl::DataLossError("bad response");
  std::vector<std::string> names;
  for (int i = 0; i < fields.field_count(); ++i) {
    if (fields.field(i).number() != 6) continue;  // list_services_response
    UnknownFieldSet list;
    list.ParseFromString(fields.field(i).length_delimited());
    for (int j = 0; j < list.field_count(); ++j) {
      UnknownFieldSet service;
      service.ParseFromString(list.field(j).length_delimited());
      for (int k = 0; k < service.field_count(); ++k) {
        if (service.field(k).number() == 1) names.push_back(service.field(k).length_delimited());
      }
    }
  }
  return names;
}

absl::StatusOr<std::string> HttpGet(const std::string& address, const std::string& path) {
  std::vector<std::string> parts = absl::StrSplit(address, ':');
  int port = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[1], &port)) {
    return absl::InvalidArgumentError(absl::StrCat("bad address ", address));
  }
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  timeval timeout{.tv_sec = 5, .tv_usec = 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, parts[0] == "localhost" ? "127.0.0.1" : parts[0].c_str(), &addr.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("cannot connect to ", address));
  }
  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: ", address, "\r\n\r\n");
  (void)!write(fd, request.data(), request.size());
  std::string answer;
  char buffer[4096];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof(buffer))) > 0) answer.append(buffer, n);
  close(fd);
  const size_t body = answer.find("\r\n\r\n");
  if (answer.rfind("HTTP/1.1 200", 0) != 0 && answer.rfind("HTTP/1.0 200", 0) != 0) {
    return absl::UnavailableError(absl::StrCat("GET ", path, ": ", answer.substr(0, 40)));
  }
  return body == std::string::npos ? "" : answer.substr(body + 4);
}

bool WaitUntil(const std::function<bool()>& condition, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!condition()) {
    if (absl::Now() >= deadline) return condition();
    absl::SleepFor(absl::Milliseconds(20));
  }
  return true;
}

}  // namespace pp::coordinator::testing
