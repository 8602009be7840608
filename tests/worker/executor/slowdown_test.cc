// The slow-worker test hook (worker/executor/slowdown.h) as the executor uses it: nothing is
// stretched before the N-th completed training step, every compute action after it, by
// (factor - 1) x its own time; evaluation passes do not count as steps.
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "tests/worker/executor/fake_pipeline.h"
#include "worker/comm/transport.h"
#include "worker/executor/executor.h"
#include "worker/executor/slowdown.h"

namespace pp::executor {
namespace {

TEST(SlowdownTest, OffByDefaultAndUntilTheStepCount) {
  std::vector<double> slept;
  Slowdown off(-1, 5, [&](double s) { slept.push_back(s); });
  off.CountStep();
  EXPECT_EQ(off.Stretch(1), 0);
  Slowdown factor_one(0, 1, [&](double s) { slept.push_back(s); });
  EXPECT_EQ(factor_one.Stretch(1), 0);
  Slowdown later(2, 3, [&](double s) { slept.push_back(s); });
  later.CountStep();
  EXPECT_EQ(later.Stretch(1), 0);
  EXPECT_TRUE(slept.empty());
  later.CountStep();
  EXPECT_TRUE(later.active());
  EXPECT_DOUBLE_EQ(later.Stretch(0.5), 1.0);
  EXPECT_EQ(slept, std::vector<double>{1.0});
}

TEST(SlowdownTest, TheExecutorStretchesEveryComputeActionAfterNSteps) {
  constexpr int kAfter = 2, kSteps = 4;
  constexpr double kFactor = 3;
  std::vector<double> slept;
  int steps_run = 0;
  std::vector<int> sleeps_in_step(kSteps, 0);
  Slowdown slowdown(kAfter, kFactor, [&](double s) {
    slept.push_back(s);
    ++sleeps_in_step[steps_run];
  });
  std::unique_ptr<comm::KvStore> store = comm::NewMemoryKvStore();
  absl::StatusOr<std::unique_ptr<comm::Transport>> transport =
      comm::ConnectGloo(*store, comm::TransportOptions{});
  ASSERT_TRUE(transport.ok()) << transport.status();
  // One rank, one stage, two microbatches, split backward: per step 2 F, 2 I, 2 W.
  const std::vector<int> where = {0};
  std::vector<pp::v1::RankProgram> programs = Lower(OneFOneBOrder(1, 2, true), {where});
  FakeCompute compute({0}, 1, 2);
  ExecutorOptions options{0, 2, where};
  options.slowdown = &slowdown;
  absl::StatusOr<std::unique_ptr<Executor>> executor =
      Executor::Create(options, programs[0], &compute, transport->get());
  ASSERT_TRUE(executor.ok()) << executor.status();
  std::vector<StepResult> results;
  for (; steps_run < kSteps; ++steps_run) {
    absl::StatusOr<StepResult> result = (*executor)->RunStep(steps_run);
    ASSERT_TRUE(result.ok()) << result.status();
    results.push_back(*result);
  }
  EXPECT_EQ(slowdown.completed_steps(), kSteps);
  EXPECT_EQ(sleeps_in_step, (std::vector<int>{0, 0, 6, 6}));
  // Each sleep is (factor - 1) x an action's own time, which the trace's action then includes.
  for (int step = kAfter; step < kSteps; ++step) {
    const pp::v1::RankTrace& trace = results[step].trace;
    ASSERT_EQ(trace.actions_size(), 6);
    for (int i = 0; i < 6; ++i) {
      const double extra = slept[(step - kAfter) * 6 + i];
      EXPECT_GT(extra, 0);
      EXPECT_LE(extra / (kFactor - 1), trace.actions(i).end() - trace.actions(i).start());
    }
  }
}

}  // namespace
}  // namespace pp::executor
