#include "worker/executor/slowdown.h"

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace pp::executor {

Slowdown::Slowdown(int after_steps, double factor, Sleeper sleep)
    : after_steps_(after_steps),
      factor_(factor),
      sleep_(sleep != nullptr ? std::move(sleep)
                              : Sleeper([](double s) { absl::SleepFor(absl::Seconds(s)); })) {}

double Slowdown::Stretch(double seconds) const {
  if (!active() || seconds <= 0) return 0;
  const double extra = (factor_ - 1) * seconds;
  sleep_(extra);
  return extra;
}

}  // namespace pp::executor
