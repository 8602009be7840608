#include "bench/chaos/job_events.h"

#include <chrono>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace pp::chaos {

double NowUnix() { return absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()); }

bool FinalEvent(const pp::v1::JobEvent& event) {
  return event.kind() == pp::v1::EVENT_FINISHED || event.kind() == pp::v1::EVENT_FAILED ||
         event.kind() == pp::v1::EVENT_CANCELLED;
}

absl::StatusOr<std::unique_ptr<JobEvents>> JobEvents::Open(pp::v1::Coordinator::Stub& stub,
                                                           const std::string& job_id,
                                                           absl::Duration timeout) {
  std::unique_ptr<JobEvents> watch(new JobEvents());
  watch->context_.set_deadline(std::chrono::system_clock::now() +
                               absl::ToChronoMilliseconds(timeout));
  pp::v1::WatchJobRequest request;
  request.set_job_id(job_id);
  watch->reader_ = stub.WatchJob(&watch->context_, request);
  pp::v1::JobEvent first;
  if (!watch->reader_->Read(&first)) {
    const grpc::Status status = watch->reader_->Finish();
    watch->reader_.reset();
    return absl::UnavailableError(absl::StrCat("WatchJob ", job_id, ": ", status.error_message()));
  }
  watch->events_.push_back(std::move(first));
  if (FinalEvent(watch->events_.back())) {
    (void)watch->reader_->Finish();
    watch->reader_.reset();
    watch->ended_ = true;
    return watch;
  }
  watch->thread_ = std::thread([w = watch.get()] { w->Read(); });
  return watch;
}

JobEvents::~JobEvents() {
  context_.TryCancel();
  if (thread_.joinable()) thread_.join();
}

void JobEvents::Read() {
  pp::v1::JobEvent event;
  bool final = false;
  while (!final && reader_->Read(&event)) {
    final = FinalEvent(event);
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(event);
    changed_.notify_all();
  }
  const grpc::Status status = reader_->Finish();
  std::lock_guard<std::mutex> lock(mu_);
  ended_ = true;
  end_status_ =
      final ? "the job ended"
            : absl::StrCat("stream closed: ", status.error_code(), " ", status.error_message());
  changed_.notify_all();
}

bool JobEvents::WaitUntil(const Predicate& done, absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto deadline = std::chrono::steady_clock::now() + absl::ToChronoMilliseconds(timeout);
  while (!done(events_)) {
    if (ended_ || changed_.wait_until(lock, deadline) == std::cv_status::timeout) {
      return done(events_);
    }
  }
  return true;
}

std::vector<pp::v1::JobEvent> JobEvents::events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_;
}

bool JobEvents::ended() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ended_;
}

std::string JobEvents::end_status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return end_status_;
}

}  // namespace pp::chaos
