#include "coordinator/event_log.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "coordinator/job_logic.h"

namespace pp::coordinator {

pp::v1::JobEvent& EventLog::Append(const std::string& job_id, pp::v1::JobEvent event) {
  JobLog& log = logs_[job_id];
  log.events.push_back(std::move(event));
  if (log.events.size() > kKeptEvents) {
    log.events.pop_front();
    ++log.first_event;
  }
  return log.events.back();
}

int64_t EventLog::End(const std::string& job_id) const {
  auto it = logs_.find(job_id);
  return it == logs_.end() ? 0 : it->second.end();
}

void EventLog::AddTrace(const std::string& job_id, pp::v1::StepTrace trace) {
  std::deque<pp::v1::StepTrace>& traces = logs_[job_id].traces;
  traces.push_back(std::move(trace));
  if (traces.size() > kTracedSteps) traces.pop_front();
}

absl::StatusOr<pp::v1::StepTrace> EventLog::Trace(const std::string& job_id, int step) const {
  auto it = logs_.find(job_id);
  if (it == logs_.end() || it->second.traces.empty()) {
    return absl::NotFoundError(absl::StrCat("job \"", job_id, "\" has no traced step yet"));
  }
  const std::deque<pp::v1::StepTrace>& traces = it->second.traces;
  if (step == 0) return traces.back();
  for (const pp::v1::StepTrace& trace : traces) {
    if (trace.step() == step) return trace;
  }
  return absl::NotFoundError(absl::StrCat("step ", step, " of job \"", job_id,
                                          "\" is not kept; kept steps: ", traces.front().step(),
                                          "..", traces.back().step()));
}

void EventLog::Erase(const std::string& job_id) { logs_.erase(job_id); }

void EventLog::Close() { closed_ = true; }

absl::Status EventLog::Follow(const std::string& job_id, int64_t next,
                              const std::function<bool(const pp::v1::JobEvent&)>& send,
                              const std::function<bool()>& cancelled) {
  while (true) {
    std::vector<pp::v1::JobEvent> batch;
    {
      absl::MutexLock lock(mu_);
      // Looked up afresh after the wait, which releases the lock: Erase may drop the log meanwhile.
      auto ready = [this, &job_id, next]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return closed_ || End(job_id) > next;
      };
      // Short waits so a client that left is noticed.
      mu_->AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(200));
      if (closed_) return absl::UnavailableError("ppcoord is shutting down");
      if (auto it = logs_.find(job_id); it != logs_.end()) {
        const JobLog& log = it->second;
        next = std::max(next, log.first_event);  // a slow watcher skips what was dropped
        for (; next < log.end(); ++next) batch.push_back(log.events[next - log.first_event]);
      }
    }
    for (const pp::v1::JobEvent& event : batch) {
      if (!send(event) || EndsWatch(event.kind())) return absl::OkStatus();
    }
    if (cancelled()) return absl::CancelledError("watcher left");
  }
}

}  // namespace pp::coordinator
