// `ppctl up`'s progress display: one redrawn line on a terminal (it must not wrap, or each redraw
// leaves a line), about ten lines per job otherwise, and one line per non-step event. Also keeps
// what the summary needs from the events: the first step event and the measured bubbles.
// Not thread-safe: one thread calls Show and Finish.
#ifndef PP_CLIENT_UP_PROGRESS_H_
#define PP_CLIENT_UP_PROGRESS_H_

#include <cstddef>
#include <optional>
#include <string>

#include "client/clock_text.h"
#include "pp/v1/coordinator.pb.h"

namespace pp::client {

// `up-1  step  42/300 [####................]  loss 3.1234  9321 tok/s  bubble 23.0%  ETA 1:32`;
// `first` is the job's first step event (for the ETA), if one came yet.
std::string ProgressLine(const pp::v1::JobEvent& e, const pp::v1::JobEvent* first);

class ProgressDisplay {
 public:
  // Draws on stdout; redraws in place when stdout is a terminal.
  explicit ProgressDisplay(std::string job_id);

  void Show(const pp::v1::JobEvent& e);
  // Ends a line left open by a redraw.
  void Finish();

  const std::optional<pp::v1::JobEvent>& first_step() const { return first_step_; }
  // The measured bubbles of steps 2.. (step 1 pays for warm-up): their sum and count.
  double bubble_sum() const { return bubble_sum_; }
  int bubble_steps() const { return bubble_steps_; }

 private:
  void ShowStep(const pp::v1::JobEvent& e);

  const std::string job_id_;
  const bool live_;
  size_t columns_ = 80;
  bool progress_drawn_ = false;
  std::optional<pp::v1::JobEvent> first_step_;
  double bubble_sum_ = 0;
  int bubble_steps_ = 0;
};

}  // namespace pp::client

#endif  // PP_CLIENT_UP_PROGRESS_H_
