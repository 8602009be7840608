// The two KvStore implementations: an in-process map and the coordinator's rendezvous RPCs.
#include <algorithm>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "worker/comm/transport.h"

namespace pp::comm {
namespace {

class MemoryKvStore : public KvStore {
 public:
  absl::Status Set(const std::string& key, const std::string& value) override {
    absl::MutexLock lock(&mu_);
    values_[key] = value;
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override {
    absl::MutexLock lock(&mu_);
    auto present = [&] { return values_.count(key) > 0; };
    if (!mu_.AwaitWithTimeout(absl::Condition(&present), timeout)) {
      return absl::DeadlineExceededError(
          absl::StrCat("rendezvous key '", key, "' not set within ", absl::FormatDuration(timeout)));
    }
    return values_[key];
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
};

// ppcoord's refusals (a key outside the caller's attempt, over a limit, malformed, no credentials)
// keep their code, so the task fails with them; any other failure reads as a lost coordinator or
// a peer that never published (`otherwise`), which ppcoord answers by probing its workers.
absl::Status Failure(const grpc::Status& status, absl::StatusCode otherwise, std::string message) {
  switch (status.error_code()) {
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::UNAUTHENTICATED:
      return absl::Status(static_cast<absl::StatusCode>(status.error_code()), message);
    default:
      return absl::Status(otherwise, message);
  }
}

class CoordinatorKvStore : public KvStore {
 public:
  explicit CoordinatorKvStore(pp::v1::WorkerRegistry::StubInterface* registry)
      : registry_(registry) {}

  absl::Status Set(const std::string& key, const std::string& value) override {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    pp::v1::KvSetRequest request;
    request.set_key(key);
    request.set_value(value);
    pp::v1::KvSetResponse response;
    grpc::Status status = registry_->KvSet(&context, request, &response);
    if (!status.ok()) {
      return Failure(status, absl::StatusCode::kUnavailable,
                     absl::StrCat("rendezvous KvSet '", key, "' failed: ", status.error_message()));
    }
    return absl::OkStatus();
  }

  // ppcoord answers one KvGet within its own cap (kMaxRendezvousWait there, 10 s) with
  // DEADLINE_EXCEEDED while a key is not set yet: ask again until this call's own deadline, so a
  // rendezvous may wait longer than one server wait.
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override {
    const absl::Time deadline = absl::Now() + timeout;
    while (true) {
      const absl::Duration left = std::max(deadline - absl::Now(), absl::ZeroDuration());
      grpc::ClientContext context;
      // The server waits up to `left`; the RPC deadline leaves it room to answer.
      context.set_deadline(absl::ToChronoTime(absl::Now() + left + absl::Seconds(5)));
      pp::v1::KvGetRequest request;
      request.add_keys(key);
      request.set_timeout_seconds(absl::ToDoubleSeconds(left));
      pp::v1::KvGetResponse response;
      grpc::Status status = registry_->KvGet(&context, request, &response);
      if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED && absl::Now() < deadline) {
        continue;  // not set yet
      }
      if (!status.ok()) {
        return Failure(status, absl::StatusCode::kDeadlineExceeded,
                       absl::StrCat("rendezvous key '", key, "' not available within ",
                                    absl::FormatDuration(timeout), ": ", status.error_message()));
      }
      if (response.values_size() != 1) {
        return absl::DeadlineExceededError(absl::StrCat(
            "rendezvous key '", key, "' not set within ", absl::FormatDuration(timeout)));
      }
      return response.values(0);
    }
  }

 private:
  pp::v1::WorkerRegistry::StubInterface* registry_;
};

}  // namespace

std::unique_ptr<KvStore> NewMemoryKvStore() { return std::make_unique<MemoryKvStore>(); }

std::unique_ptr<KvStore> NewCoordinatorKvStore(pp::v1::WorkerRegistry::StubInterface* registry) {
  return std::make_unique<CoordinatorKvStore>(registry);
}

}  // namespace pp::comm
