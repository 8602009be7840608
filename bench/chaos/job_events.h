// The events of one job as ppcoord streams them (WatchJob), read on a thread of their own and
// kept in order, so a run can ask when something happened after the fact (JobEvent.time_unix,
// ppcoord's clock, the same machine's as this process's on loopback).
// Contract: Open returns once the stream delivered its first event (the job's state when the
// watch began: nothing earlier is replayed). The stream ends with the job (FINISHED, FAILED,
// CANCELLED), with ppcoord, or at `timeout` after Open; it is never reopened. Every wait is
// bounded by its own timeout; the destructor cancels the stream and joins the thread.
// Thread-safe.
#ifndef PP_BENCH_CHAOS_JOB_EVENTS_H_
#define PP_BENCH_CHAOS_JOB_EVENTS_H_

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/client_context.h"
#include "pp/v1/coordinator.grpc.pb.h"

namespace pp::chaos {

// Seconds since the Unix epoch now, as JobEvent.time_unix counts them.
double NowUnix();

// Whether `event` is the last one of its job (FINISHED, FAILED or CANCELLED).
bool FinalEvent(const pp::v1::JobEvent& event);

class JobEvents {
 public:
  using Predicate = std::function<bool(const std::vector<pp::v1::JobEvent>&)>;

  static absl::StatusOr<std::unique_ptr<JobEvents>> Open(pp::v1::Coordinator::Stub& stub,
                                                         const std::string& job_id,
                                                         absl::Duration timeout);
  ~JobEvents();
  JobEvents(const JobEvents&) = delete;
  JobEvents& operator=(const JobEvents&) = delete;

  // Waits until `done` holds over the events so far (called again on each new one) or `timeout`
  // passes or the stream ended: whether `done` held.
  bool WaitUntil(const Predicate& done, absl::Duration timeout);
  std::vector<pp::v1::JobEvent> events() const;
  // Whether the stream ended, and how, once it did.
  bool ended() const;
  std::string end_status() const;

 private:
  JobEvents() = default;
  void Read();

  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<pp::v1::JobEvent>> reader_;
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::vector<pp::v1::JobEvent> events_;  // guarded by mu_
  bool ended_ = false;                    // guarded by mu_
  std::string end_status_;                // guarded by mu_
};

}  // namespace pp::chaos

#endif  // PP_BENCH_CHAOS_JOB_EVENTS_H_
