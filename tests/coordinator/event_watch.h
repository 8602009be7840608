// A watch of one job's events of one kind (WatchJob on a thread of its own), for the ppcoord
// tests: subscribed once it answered with the job's state; the events of `kind` it read since, in
// order; cancelled and joined on destruction, so it ends on every exit of a test. Header-only; test
// code only. Thread-safe.
#ifndef PP_TESTS_COORDINATOR_EVENT_WATCH_H_
#define PP_TESTS_COORDINATOR_EVENT_WATCH_H_

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "grpcpp/client_context.h"
#include "pp/v1/coordinator.grpc.pb.h"

namespace pp::coordinator::testing {

class EventWatch {
 public:
  // `token`: the watch's bearer token; empty: none.
  EventWatch(pp::v1::Coordinator::Stub& client, const std::string& job_id,
             pp::v1::JobEventKind kind, const std::string& token = "")
      : kind_(kind) {
    if (!token.empty()) context_.AddMetadata("authorization", absl::StrCat("Bearer ", token));
    thread_ = std::thread([this, &client, job_id] { Run(client, job_id); });
  }
  EventWatch(const EventWatch&) = delete;
  EventWatch& operator=(const EventWatch&) = delete;
  ~EventWatch() {
    context_.TryCancel();
    thread_.join();
  }

  // True once the watch answered with the job's state: events from then on are seen.
  bool WaitSubscribed(absl::Duration timeout) {
    return subscribed_.WaitForNotificationWithTimeout(timeout);
  }
  // Once `n` events of the kind were read, or `timeout` passed: those read, in order.
  std::vector<pp::v1::JobEvent> Await(size_t n, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return seen_.size() >= n; };
    mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
    return seen_;
  }

 private:
  void Run(pp::v1::Coordinator::Stub& client, const std::string& job_id) {
    pp::v1::WatchJobRequest request;
    request.set_job_id(job_id);
    auto reader = client.WatchJob(&context_, request);
    pp::v1::JobEvent event;
    while (reader->Read(&event)) {
      if (!subscribed_.HasBeenNotified()) subscribed_.Notify();
      if (event.kind() != kind_) continue;
      absl::MutexLock lock(&mu_);
      seen_.push_back(event);
    }
    (void)reader->Finish();
  }

  const pp::v1::JobEventKind kind_;
  grpc::ClientContext context_;
  absl::Notification subscribed_;
  absl::Mutex mu_;
  std::vector<pp::v1::JobEvent> seen_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // started last, once the members it uses exist
};

}  // namespace pp::coordinator::testing

#endif  // PP_TESTS_COORDINATOR_EVENT_WATCH_H_
