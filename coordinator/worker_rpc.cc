#include "coordinator/worker_rpc.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "coordinator/log.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace pp::coordinator {

WorkerRpc::WorkerRpc(absl::Mutex* mu, CoordinatorMetrics* metrics,
                     std::shared_ptr<grpc::ChannelCredentials> credentials,
                     absl::Duration rpc_deadline, absl::Duration probe_deadline, DoneFn done)
    : mu_(mu),
      metrics_(metrics),
      credentials_(credentials != nullptr ? std::move(credentials)
                                          : grpc::InsecureChannelCredentials()),
      rpc_deadline_(rpc_deadline),
      probe_deadline_(probe_deadline),
      done_(std::move(done)) {}

void WorkerRpc::Queue(Outbound rpc) { queued_.push_back(std::move(rpc)); }

bool WorkerRpc::HasQueued() const { return !queued_.empty(); }

std::deque<Outbound> WorkerRpc::TakeQueued() { return std::exchange(queued_, {}); }

void WorkerRpc::AwaitIdle(absl::Duration timeout) {
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return in_flight_.empty(); };
  mu_->AwaitWithTimeout(absl::Condition(&idle), timeout);
}

pp::v1::Worker::Stub* WorkerRpc::StubFor(const std::string& address) {
  std::unique_ptr<pp::v1::Worker::Stub>& stub = stubs_[address];
  if (!stub) {
    stub = pp::v1::Worker::NewStub(grpc::CreateChannel(address, credentials_));
  }
  return stub.get();
}

// One RPC's state: it lives until its callback ran.
struct WorkerRpc::Call {
  grpc::ClientContext context;
  pp::v1::AbortTaskRequest abort;
  pp::v1::RunTaskResponse run_response;
  pp::v1::AbortTaskResponse abort_response;
  pp::v1::GetStatusRequest status_request;
  pp::v1::WorkerStatus status_response;
  Outbound rpc;
};

WorkerRpc::~WorkerRpc() = default;

void WorkerRpc::Issue(Outbound rpc) {
  auto owned = std::make_unique<Call>();
  Call* call = owned.get();
  call->rpc = std::move(rpc);
  const Outbound::Kind kind = call->rpc.kind;
  absl::Duration deadline = kind == Outbound::Kind::kProbe ? probe_deadline_ : rpc_deadline_;
  if (kind == Outbound::Kind::kCalibrate) {
    deadline += absl::Seconds(call->rpc.calibrate.budget_seconds());
  }
  call->context.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
  pp::v1::Worker::Stub* stub;
  {
    absl::MutexLock lock(mu_);
    stub = StubFor(call->rpc.address);
    in_flight_.emplace(call, std::move(owned));
  }
  // The callback holds no reference to the call: see in_flight_.
  auto done = [this, call](grpc::Status status) { Completed(call, status); };
  switch (kind) {
    case Outbound::Kind::kRun:
      stub->async()->RunTask(&call->context, &call->rpc.plan, &call->run_response, done);
      break;
    case Outbound::Kind::kProbe:
      stub->async()->GetStatus(&call->context, &call->status_request, &call->status_response, done);
      break;
    case Outbound::Kind::kCalibrate:
      stub->async()->Calibrate(&call->context, &call->rpc.calibrate, &call->rpc.answer, done);
      break;
    case Outbound::Kind::kAbort:
      call->abort.set_job_id(call->rpc.job_id);
      call->abort.set_reason(call->rpc.reason);
      call->abort.set_attempt(call->rpc.attempt);
      stub->async()->AbortTask(&call->context, &call->abort, &call->abort_response, done);
      break;
  }
}

void WorkerRpc::Completed(Call* call, const grpc::Status& status) {
  absl::MutexLock lock(mu_);
  const Outbound& rpc = call->rpc;
  if (rpc.kind != Outbound::Kind::kProbe && !status.ok()) {
    const char* method = rpc.kind == Outbound::Kind::kRun         ? "RunTask"
                         : rpc.kind == Outbound::Kind::kCalibrate ? "Calibrate"
                                                                  : "AbortTask";
    metrics_->RpcError(absl::StrCat("pp.v1.Worker/", method));
    Log(absl::StrCat(method, " to ", rpc.worker, " at ", rpc.address,
                     " failed: ", status.error_message()));
  }
  done_(rpc, status);
  in_flight_.erase(call);  // its ClientContext and channel reference go before AwaitIdle returns
}

}  // namespace pp::coordinator
