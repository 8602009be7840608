#include "client/up_progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/epoch.h"

namespace pp::client {
namespace {

std::string EventName(const pp::v1::JobEvent& e) {
  return pp::v1::JobEventKind_Name(e.kind()).substr(6);  // without "EVENT_"
}

}  // namespace

std::string ProgressLine(const pp::v1::JobEvent& e, const pp::v1::JobEvent* first) {
  constexpr int kBar = 20;
  const int total = std::max(1, e.total_steps());
  const int filled = std::min(kBar, kBar * e.step() / total);
  const int digits = static_cast<int>(absl::StrCat(total).size());
  std::string line = absl::StrFormat("%s  step %*d/%d [%s%s]", e.job_id(), digits, e.step(), total,
                                     std::string(filled, '#'), std::string(kBar - filled, '.'));
  if (e.step() > 0) {
    absl::StrAppendFormat(&line, "  loss %.4f  lr %.3g  %.0f tok/s  bubble %.1f%%", e.loss(),
                          e.learning_rate(), e.tokens_per_second(), 100 * e.bubble_ratio());
    if (e.has_eval()) absl::StrAppendFormat(&line, "  eval %.4f", e.eval_loss());
    if (e.has_epoch()) absl::StrAppend(&line, "  epoch ", common::EpochText(e.epoch()));
  }
  if (first != nullptr && e.step() > first->step() && e.step() < total) {
    const double per_step = (e.time_unix() - first->time_unix()) / (e.step() - first->step());
    absl::StrAppend(&line, "  ETA ", ClockText(per_step * (total - e.step())));
  }
  return line;
}

ProgressDisplay::ProgressDisplay(std::string job_id)
    : job_id_(std::move(job_id)), live_(isatty(STDOUT_FILENO)) {
  winsize terminal{};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &terminal) == 0 && terminal.ws_col > 1) {
    columns_ = terminal.ws_col;
  }
}

void ProgressDisplay::Show(const pp::v1::JobEvent& e) {
  if (e.kind() == pp::v1::EVENT_STEP) {
    ShowStep(e);
    return;
  }
  if (progress_drawn_) std::cout << "\r\033[K";
  std::cout << job_id_ << "  " << EventName(e) << (e.message().empty() ? "" : "  ") << e.message()
            << "\n"
            << std::flush;
  progress_drawn_ = false;
}

void ProgressDisplay::ShowStep(const pp::v1::JobEvent& e) {
  if (!first_step_.has_value()) first_step_ = e;
  if (e.step() > 1) {  // step 1 pays for warm-up
    bubble_sum_ += e.bubble_ratio();
    ++bubble_steps_;
  }
  const int every = std::max(1, e.total_steps() / 10);
  if (live_) {
    std::cout << "\r\033[K" << ProgressLine(e, &*first_step_).substr(0, columns_ - 1)
              << std::flush;
    progress_drawn_ = true;
  } else if (e.step() % every == 0 || e.step() == 1) {
    std::cout << ProgressLine(e, &*first_step_) << "\n" << std::flush;
  }
}

void ProgressDisplay::Finish() {
  if (progress_drawn_ && live_) std::cout << "\n";
  progress_drawn_ = false;
}

}  // namespace pp::client
