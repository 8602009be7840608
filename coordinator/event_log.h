// The event stream and step traces of ppcoord's jobs (internal): the newest events of each job
// (what WatchJob sends), the newest traced steps (GetTrace), and the wait of a watcher for events
// to come.
//
// Threading: EventLog has no lock of its own. It is given the JobManager's mutex, which guards
// every job's events and traces. Every method but Follow REQUIRES that mutex; Follow EXCLUDES it
// (it takes it to read, and waits releasing it). A job's events are numbered from 0 in the order
// appended; only the newest kKeptEvents stay, so a slow watcher skips what was dropped.
#ifndef PP_COORDINATOR_EVENT_LOG_H_
#define PP_COORDINATOR_EVENT_LOG_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "pp/v1/coordinator.pb.h"

namespace pp::coordinator {

class EventLog {
 public:
  static constexpr int kKeptEvents = 256;
  static constexpr int kTracedSteps = 8;

  explicit EventLog(absl::Mutex* mu) : mu_(mu) {}

  // Appends `event` to the job's events (dropping the oldest beyond kKeptEvents) and returns it,
  // for the caller to complete before the lock is released.
  pp::v1::JobEvent& Append(const std::string& job_id, pp::v1::JobEvent event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The number of the job's next event.
  int64_t End(const std::string& job_id) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  // Keeps `trace` as the job's newest traced step (dropping the oldest beyond kTracedSteps).
  void AddTrace(const std::string& job_id, pp::v1::StepTrace trace)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The kept trace of `step` (0: the newest). NotFound when the job has none yet or `step` is not
  // kept, naming the kept steps.
  absl::StatusOr<pp::v1::StepTrace> Trace(const std::string& job_id, int step) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  // Drops the job's events and traces (an expired job, retention.h). A Follow of it waits on as for
  // a job with no events yet, until its watcher leaves.
  void Erase(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Ends every Follow: each answers Unavailable.
  void Close() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Calls `send` with each of the job's events from number `next` on, as they come, until `send`
  // returns false or an event ends the watch (EndsWatch): OK; `cancelled` returns true (checked
  // at least every 200 ms): Cancelled; or Close: Unavailable.
  absl::Status Follow(const std::string& job_id, int64_t next,
                      const std::function<bool(const pp::v1::JobEvent&)>& send,
                      const std::function<bool()>& cancelled) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct JobLog {
    std::deque<pp::v1::StepTrace> traces;  // the newest few steps
    std::deque<pp::v1::JobEvent> events;   // the newest events; events[0] has number first_event
    int64_t first_event = 0;
    int64_t end() const { return first_event + static_cast<int64_t>(events.size()); }
  };

  absl::Mutex* const mu_;
  std::map<std::string, JobLog> logs_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_EVENT_LOG_H_
