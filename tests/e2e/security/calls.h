// The calls the security tests make as an attacker or a user would: one RPC each, on the caller's
// own stub, within kCallTimeout, returning the status for the test to judge.
// Thread-safe: free functions, each with its own ClientContext.
#ifndef PP_TESTS_E2E_SECURITY_CALLS_H_
#define PP_TESTS_E2E_SECURITY_CALLS_H_

#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/client_context.h"
#include "pp/v1/coordinator.grpc.pb.h"

namespace pp::security_test {

inline constexpr absl::Duration kCallTimeout = absl::Seconds(10);

inline void SetDeadline(grpc::ClientContext& context) {
  context.set_deadline(absl::ToChronoTime(absl::Now() + kCallTimeout));
}

inline grpc::Status ListJobs(pp::v1::Coordinator::Stub& stub) {
  grpc::ClientContext context;
  SetDeadline(context);
  pp::v1::ListJobsResponse response;
  return stub.ListJobs(&context, pp::v1::ListJobsRequest(), &response);
}

// SubmitJob of `spec`; the new job's id in *id when not null.
inline grpc::Status Submit(pp::v1::Coordinator::Stub& stub, const pp::v1::JobSpec& spec,
                           std::string* id = nullptr) {
  grpc::ClientContext context;
  SetDeadline(context);
  pp::v1::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  pp::v1::SubmitJobResponse response;
  grpc::Status status = stub.SubmitJob(&context, request, &response);
  if (id != nullptr) *id = response.job_id();
  return status;
}

inline grpc::Status Cancel(pp::v1::Coordinator::Stub& stub, const std::string& id) {
  grpc::ClientContext context;
  SetDeadline(context);
  pp::v1::CancelJobRequest request;
  request.set_job_id(id);
  pp::v1::Job job;
  return stub.CancelJob(&context, request, &job);
}

// RegisterWorker as `name`, a CPU worker at an address nothing listens on.
inline grpc::Status Register(pp::v1::WorkerRegistry::Stub& stub, const std::string& name) {
  grpc::ClientContext context;
  SetDeadline(context);
  pp::v1::RegisterWorkerRequest request;
  request.mutable_worker()->set_name(name);
  request.mutable_worker()->set_address("127.0.0.1:1");
  request.mutable_worker()->set_device("cpu");
  pp::v1::RegisterWorkerResponse response;
  return stub.RegisterWorker(&context, request, &response);
}

inline grpc::Status Heartbeat(pp::v1::WorkerRegistry::Stub& stub, const std::string& name) {
  grpc::ClientContext context;
  SetDeadline(context);
  pp::v1::HeartbeatRequest request;
  request.set_name(name);
  pp::v1::HeartbeatResponse response;
  return stub.Heartbeat(&context, request, &response);
}

}  // namespace pp::security_test

#endif  // PP_TESTS_E2E_SECURITY_CALLS_H_
