// Test hook: a worker process that turns slow after some training steps, so that tests of the
// coordinator's prediction-drift re-planning (parallel.schedule "auto", docs/planner.md) can make
// one worker of a one-machine cluster slower than calibration predicted. ppworker builds one
// from --test_slow_after_steps=N --test_slow_factor=F (docs/cli.md, test-only flags); it is off
// by default and costs nothing when off.
//
// Contract:
// - This is the one place that stretches time. The executor calls Stretch(t) after every compute
//   action (F, B, I, W; t = the action's own duration) and CountStep() after every training step
//   it completed (evaluation passes do not count); worker/calibrate stretches each timing alike.
// - Once CountStep has been called after_steps times (in total, over every task of the process),
//   Stretch(t) sleeps (factor - 1) x t, so each stretched action takes factor times as long.
//   Before that, and always when after_steps < 0 or factor <= 1, it returns at once.
// Thread-safe.
#ifndef PP_WORKER_EXECUTOR_SLOWDOWN_H_
#define PP_WORKER_EXECUTOR_SLOWDOWN_H_

#include <atomic>
#include <functional>
#include <utility>

namespace pp::executor {

class Slowdown {
 public:
  using Sleeper = std::function<void(double seconds)>;
  // `sleep` (tests may record instead of sleeping) defaults to a real sleep.
  Slowdown(int after_steps, double factor, Sleeper sleep = nullptr);

  void CountStep() { completed_steps_.fetch_add(1); }
  int completed_steps() const { return completed_steps_.load(); }
  bool active() const {
    return after_steps_ >= 0 && factor_ > 1 && completed_steps_.load() >= after_steps_;
  }
  // Sleeps (factor - 1) x seconds when active; returns the seconds it slept (0 when not).
  double Stretch(double seconds) const;

 private:
  const int after_steps_;
  const double factor_;
  const Sleeper sleep_;
  std::atomic<int> completed_steps_{0};
};

}  // namespace pp::executor

#endif  // PP_WORKER_EXECUTOR_SLOWDOWN_H_
