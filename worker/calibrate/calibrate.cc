#include "worker/calibrate/calibrate.h"

#include <chrono>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace pp::calibrate {

Calibration::Calibration(pp::v1::CalibrateRequest request, CalibrateEnv env)
    : request_(std::move(request)), env_(std::move(env)) {}

Calibration::~Calibration() = default;

void Calibration::Abort(const std::string& reason) {
  absl::MutexLock lock(&mu_);
  if (!aborted_) abort_reason_ = reason;
  aborted_ = true;
  if (transport_ != nullptr) transport_->Abort();
}

absl::Status Calibration::Check() const {
  absl::MutexLock lock(&mu_);
  if (aborted_) return absl::AbortedError(abort_reason_);
  if (absl::Now() >= deadline_) {
    return absl::DeadlineExceededError(
        absl::StrCat("the calibration budget of ", request_.budget_seconds(), " s is spent"));
  }
  return absl::OkStatus();
}

void Calibration::SetTransport(comm::Transport* transport) {
  absl::MutexLock lock(&mu_);
  transport_ = transport;
  if (transport_ != nullptr && (aborted_ || absl::Now() >= deadline_)) transport_->Abort();
}

void Calibration::Watch() {
  absl::MutexLock lock(&mu_);
  const auto over = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done_ || aborted_; };
  mu_.AwaitWithDeadline(absl::Condition(&over), deadline_);
  // Past the deadline a blocked wait gives up now; a transport set later is aborted at once.
  if (!done_ && transport_ != nullptr) transport_->Abort();
}

absl::StatusOr<pp::v1::RankCalibration> Calibration::Run() {
  const auto start = std::chrono::steady_clock::now();
  deadline_ = absl::Now() + absl::Seconds(request_.budget_seconds());
  std::thread watchdog([this] { Watch(); });
  pp::v1::RankCalibration out;
  out.set_rank(request_.rank());
  out.set_worker(env_.worker);
  out.set_free_memory_bytes(env_.free_memory_bytes);
  out.set_machine(MachineIdentity());
  out.set_cores(UsableCores());
  absl::Status status = TimeUnits(out);
  if (status.ok()) status = MeasureLinks(out);
  {
    absl::MutexLock lock(&mu_);
    done_ = true;
  }
  watchdog.join();
  {
    absl::MutexLock lock(&mu_);
    if (aborted_) return absl::AbortedError(abort_reason_);
  }
  if (!status.ok()) return status;
  out.set_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return out;
}

}  // namespace pp::calibrate
