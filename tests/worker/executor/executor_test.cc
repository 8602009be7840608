// The executor on hand-written pipeline programs (GPipe, 1F1B, split I/W, looped V=2, a rank
// holding two consecutive stages) over real Gloo transports in threads, against a sequential run
// of the same fake model (fake_pipeline.h), bitwise.
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/worker/executor/fake_pipeline.h"
#include "worker/comm/transport.h"
#include "worker/executor/executor.h"

namespace pp::executor {
namespace {

TEST(ExecutorTest, GpipeTwoRanks) {
  const int D = 2, M = 4, steps = 3;
  auto where = OnePerRank(D);
  auto outcomes = RunPipeline(Lower(GpipeOrder(D, M), {where}), where, M, steps);
  ExpectBitwiseEqual(outcomes, where, M, steps);
}

TEST(ExecutorTest, OneFOneBFourRanksReceiverStageNaming) {
  const int D = 4, M = 6, steps = 3;
  auto where = OnePerRank(D);
  auto outcomes = RunPipeline(Lower(OneFOneBOrder(D, M, false), {where, true}), where, M, steps);
  ExpectBitwiseEqual(outcomes, where, M, steps);
}

TEST(ExecutorTest, SplitBackwardThreeRanksWithLookaheadOne) {
  const int D = 3, M = 5, steps = 2;
  auto where = OnePerRank(D);
  auto outcomes =
      RunPipeline(Lower(OneFOneBOrder(D, M, true), {where}), where, M, steps, /*lookahead=*/1);
  ExpectBitwiseEqual(outcomes, where, M, steps);
}

TEST(ExecutorTest, LoopedTwoChunksPerRank) {
  const int M = 3, steps = 2;
  std::vector<int> where = {0, 1, 0, 1};  // interleaved placement, V = 2
  auto outcomes = RunPipeline(Lower(LoopedOrder(where, M), {where}), where, M, steps);
  ExpectBitwiseEqual(outcomes, where, M, steps);
}

TEST(ExecutorTest, ConsecutiveStagesOnOneRankPassActivationsLocally) {
  const int M = 4, steps = 2;
  std::vector<int> where = {0, 0, 1};
  auto outcomes = RunPipeline(Lower(LoopedOrder(where, M), {where, true}), where, M, steps);
  ExpectBitwiseEqual(outcomes, where, M, steps);
}

TEST(ExecutorTest, TraceAndTimings) {
  const int D = 2, M = 4;
  auto where = OnePerRank(D);
  auto programs = Lower(OneFOneBOrder(D, M, false), {where});
  auto outcomes = RunPipeline(programs, where, M, 1);
  for (int r = 0; r < D; ++r) {
    ASSERT_TRUE(outcomes[r].status.ok()) << outcomes[r].status;
    const StepResult& result = outcomes[r].steps[0];
    ASSERT_EQ(result.trace.actions_size(), programs[r].actions_size());
    double previous_end = 0;
    for (int i = 0; i < result.trace.actions_size(); ++i) {
      const pp::v1::TimedAction& a = result.trace.actions(i);
      EXPECT_EQ(a.action().SerializeAsString(), programs[r].actions(i).SerializeAsString());
      EXPECT_LE(previous_end, a.start());
      EXPECT_LE(a.start(), a.end());
      previous_end = a.end();
    }
    EXPECT_LE(previous_end, result.step_seconds);
    EXPECT_GT(result.busy_seconds[static_cast<int>(Phase::kForward)], 0);
    EXPECT_GE(result.bubble_ratio, 0);
    EXPECT_LT(result.bubble_ratio, 1);
    EXPECT_GT(result.peak_activation_bytes, 0);
  }
}

// A world of one rank over Gloo, for tests that need a transport but no peer.
struct OneRankTransport {
  std::unique_ptr<comm::KvStore> store = comm::NewMemoryKvStore();
  absl::StatusOr<std::unique_ptr<comm::Transport>> transport =
      comm::ConnectGloo(*store, comm::TransportOptions{});
};

TEST(ExecutorTest, RejectsProgramsThatDoNotFitTheLayout) {
  OneRankTransport one;
  absl::StatusOr<std::unique_ptr<comm::Transport>>& t = one.transport;
  ASSERT_TRUE(t.ok()) << t.status();
  FakeCompute compute({0}, 2, 2);
  ExecutorOptions options{0, 2, {0, 0}, -1};
  pp::v1::RankProgram program;
  *program.add_actions() = Act(pp::v1::FORWARD, 0, 2);
  auto e = Executor::Create(options, program, &compute, t->get());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("rank 0 action 0 FORWARD stage 0 mb 2"), std::string::npos)
      << e.status();
  program.Clear();
  *program.add_actions() = Act(pp::v1::SEND_ACTIVATION, 0, 0, 1);  // stage 1 is local
  e = Executor::Create(options, program, &compute, t->get());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("no edge"), std::string::npos) << e.status();
}

// A forward-only program: the losses of a training step's forwards, bit for bit, with nothing kept
// for a backward, no weight changed and no optimizer step; and no backward allowed in it.
TEST(ExecutorTest, ForwardOnlyEvaluatesWithoutTouchingTraining) {
  OneRankTransport one;
  absl::StatusOr<std::unique_ptr<comm::Transport>>& t = one.transport;
  ASSERT_TRUE(t.ok()) << t.status();
  const int M = 3;
  const std::vector<int> where = {0, 0};
  pp::v1::RankProgram eval = Lower(LoopedOrder(where, M), {where})[0];
  pp::v1::RankProgram train = eval;
  eval.mutable_actions()->DeleteSubrange(2 * M, 2 * M);  // the backwards
  ASSERT_EQ(eval.actions_size(), 2 * M);
  FakeCompute evaluated({0, 1}, 2, M), trained({0, 1}, 2, M);
  ExecutorOptions options{0, M, where, -1};
  auto training = Executor::Create(options, train, &trained, t->get());
  ASSERT_TRUE(training.ok()) << training.status();
  absl::StatusOr<StepResult> step = (*training)->RunStep(4);
  ASSERT_TRUE(step.ok()) << step.status();

  options.forward_only = true;
  auto evaluation = Executor::Create(options, eval, &evaluated, t->get());
  ASSERT_TRUE(evaluation.ok()) << evaluation.status();
  const std::vector<float> before = evaluated.Weights();
  absl::StatusOr<StepResult> batch = (*evaluation)->RunStep(4);
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_TRUE(batch->has_loss);
  EXPECT_EQ(batch->loss_by_mb, step->loss_by_mb);  // same inputs, same weights
  EXPECT_EQ(evaluated.evaluations(), 1);
  EXPECT_EQ(evaluated.Saved(), 0u);
  EXPECT_EQ(evaluated.Weights(), before);

  auto refused = Executor::Create(options, train, &evaluated, t->get());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("a forward-only program holds only forwards"),
            std::string::npos)
      << refused.status();
}

TEST(ExecutorTest, MissingInputFailsTheStepWithTheAction) {
  OneRankTransport one;
  absl::StatusOr<std::unique_ptr<comm::Transport>>& t = one.transport;
  ASSERT_TRUE(t.ok()) << t.status();
  FakeCompute compute({0, 1}, 2, 1);
  ExecutorOptions options{0, 1, {0, 0}, -1};
  pp::v1::RankProgram program;
  *program.add_actions() = Act(pp::v1::FORWARD, 1, 0);  // before stage 0 ran
  auto e = Executor::Create(options, program, &compute, t->get());
  ASSERT_TRUE(e.ok()) << e.status();
  absl::StatusOr<StepResult> result = (*e)->RunStep(0);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(result.status().message().find("input activation of stage 1"), std::string::npos)
      << result.status();
}

// Found by tests/fuzz/executor_fuzzer: a program that produces the same boundary tensor twice
// (here stage 0's output for microbatch 0) used to overwrite, and leak, the first buffer.
TEST(ExecutorTest, ProducingTheSameTensorTwiceFailsTheStep) {
  OneRankTransport one;
  absl::StatusOr<std::unique_ptr<comm::Transport>>& t = one.transport;
  ASSERT_TRUE(t.ok()) << t.status();
  FakeCompute compute({0, 1}, 2, 1);
  ExecutorOptions options{0, 1, {0, 0}, -1};
  pp::v1::RankProgram program;
  for (const pp::v1::Action& action :
       {Act(pp::v1::FORWARD, 0, 0), Act(pp::v1::FORWARD, 0, 0), Act(pp::v1::FORWARD, 1, 0),
        Act(pp::v1::BACKWARD, 1, 0), Act(pp::v1::BACKWARD, 0, 0)}) {
    *program.add_actions() = action;
  }
  auto e = Executor::Create(options, program, &compute, t->get());
  ASSERT_TRUE(e.ok()) << e.status();
  absl::StatusOr<StepResult> result = (*e)->RunStep(0);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(result.status().message().find("action 1 FORWARD stage 0 mb 0: produced the same "
                                           "tensor twice"),
            std::string::npos)
      << result.status();
}

TEST(ExecutorTest, DeadPeerFailsWithinTheTimeout) {
  // Rank 1 connects and leaves; rank 0 waits for an activation that never comes.
  const int D = 2, M = 2;
  auto where = OnePerRank(D);
  auto programs = Lower(GpipeOrder(D, M), {where});
  std::unique_ptr<comm::KvStore> store = comm::NewMemoryKvStore();
  absl::Status rank1_status;
  std::thread peer([&] {
    comm::TransportOptions topts;
    topts.rank = 1;
    topts.size = 2;
    topts.timeout = absl::Seconds(1);
    auto t = comm::ConnectGloo(*store, topts);
    rank1_status = t.status();
  });
  comm::TransportOptions topts;
  topts.rank = 0;
  topts.size = 2;
  topts.timeout = absl::Seconds(1);
  auto t = comm::ConnectGloo(*store, topts);
  peer.join();
  ASSERT_TRUE(t.ok() && rank1_status.ok()) << t.status() << rank1_status;
  FakeCompute compute({0}, D, M);
  auto e = Executor::Create({0, M, where, -1}, programs[0], &compute, t->get());
  ASSERT_TRUE(e.ok()) << e.status();
  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<StepResult> result = (*e)->RunStep(0);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("rank 0 action"), std::string::npos) << result.status();
  EXPECT_LT(seconds, 5.0);
}

}  // namespace
}  // namespace pp::executor
