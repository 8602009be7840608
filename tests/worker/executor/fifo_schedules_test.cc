// The executor under NCCL's matching rules (the fifo transport: posting order per channel, lazy
// connect, a receive completes only after its send was posted): every named schedule the planner
// makes, at D = 2..4 and V = 1 and 2, trains bitwise what the sequential run of the fake model
// trains; and a program whose two ranks disagree on the order of one kind's messages fails the
// step naming both messages, where Gloo's tag matching would have hidden it.
#include <string>
#include <vector>

#include "coordinator/plan/plan.h"
#include "gtest/gtest.h"
#include "program/schedules.h"
#include "tests/worker/executor/fake_pipeline.h"

namespace pp::executor {
namespace {

constexpr int kSteps = 2;

std::vector<pp::v1::RankProgram> Programs(const pp::v1::Schedule& schedule) {
  return {schedule.ranks().begin(), schedule.ranks().end()};
}

class FifoScheduleTest : public ::testing::TestWithParam<std::string> {};

// Each (D, V) the schedule accepts, at the first M it accepts among 2D, 2D+1, 3D (some take only
// even M or M >= 2D); at least one V at every D.
TEST_P(FifoScheduleTest, TrainsBitwiseTheSequentialRun) {
  const std::string& name = GetParam();
  for (int D = 2; D <= 4; ++D) {
    int layouts = 0;
    for (int V = 1; V <= 2; ++V) {
      for (int M : {2 * D, 2 * D + 1, 3 * D}) {
        absl::StatusOr<pp::v1::Schedule> schedule =
            plan::PlanSchedule(name, D, V, M, pp::v1::CostModel{});
        if (!schedule.ok()) continue;
        SCOPED_TRACE(absl::StrCat(name, " D=", D, " V=", V, " M=", M));
        const std::vector<int> where(schedule->stage_to_rank().begin(),
                                     schedule->stage_to_rank().end());
        std::vector<RankOutcome> outcomes = RunPipeline(Programs(*schedule), where, M, kSteps,
                                                        /*recv_lookahead=*/-1, {},
                                                        comm::ConnectFifo);
        ExpectBitwiseEqual(outcomes, where, M, kSteps);
        ++layouts;
        break;
      }
    }
    EXPECT_GT(layouts, 0) << name << " planned no layout at D=" << D;
  }
}

INSTANTIATE_TEST_SUITE_P(Schedules, FifoScheduleTest,
                         ::testing::ValuesIn(prog::TrainingScheduleNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

// The schedule file of the issue: valid under tag matching, not under posting order. Rank 0
// sends the activations of microbatches 0 and 1 in that order; rank 1 receives 1 first.
std::vector<pp::v1::RankProgram> SwappedOrder() {
  using pp::v1::BACKWARD;
  using pp::v1::FORWARD;
  const std::vector<int> where = {0, 1};
  return Lower({{Act(FORWARD, 0, 0), Act(FORWARD, 0, 1), Act(BACKWARD, 0, 0), Act(BACKWARD, 0, 1)},
                {Act(FORWARD, 1, 1), Act(BACKWARD, 1, 1), Act(FORWARD, 1, 0), Act(BACKWARD, 1, 0)}},
               {where});
}

TEST(FifoExecutorTest, MismatchedOrderFailsTheStepNamingBothMessages) {
  const std::vector<int> where = {0, 1};
  std::vector<RankOutcome> outcomes =
      RunPipeline(SwappedOrder(), where, /*M=*/2, /*steps=*/1, -1, {}, comm::ConnectFifo);
  const absl::Status& receiver = outcomes[1].status;
  EXPECT_EQ(receiver.code(), absl::StatusCode::kFailedPrecondition) << receiver;
  EXPECT_NE(receiver.message().find("RECV_ACTIVATION"), std::string::npos) << receiver;
  EXPECT_NE(receiver.message().find("receive of activation 0->1 mb 1"), std::string::npos)
      << receiver;
  EXPECT_NE(receiver.message().find("send of activation 0->1 mb 0"), std::string::npos)
      << receiver;
  EXPECT_FALSE(outcomes[0].status.ok()) << "rank 0 must not finish a step its peer failed";
}

// Rank 1 expects the activations as (3, kN/3, 1) where rank 0 sends (1, 1, kN): the same floats,
// so the transports see nothing wrong; the boundary header does, before the payload is used.
TEST(FifoExecutorTest, AShapeTheReceiverDoesNotExpectFailsTheStepNamingBoth) {
  const std::vector<int> where = {0, 1};
  const std::vector<pp::v1::RankProgram> programs =
      Lower({{Act(pp::v1::FORWARD, 0, 0), Act(pp::v1::BACKWARD, 0, 0)},
             {Act(pp::v1::FORWARD, 1, 0), Act(pp::v1::BACKWARD, 1, 0)}},
            {where});
  for (const Connector connect : {comm::ConnectFifo, comm::ConnectGloo}) {
    std::vector<RankOutcome> outcomes = RunPipeline(programs, where, /*M=*/1, /*steps=*/1, -1, {},
                                                    connect, {{1, BoundaryShape{3, kN / 3, 1}}});
    const absl::Status& receiver = outcomes[1].status;
    EXPECT_EQ(receiver.code(), absl::StatusCode::kInvalidArgument) << receiver;
    EXPECT_NE(receiver.message().find("RECV_ACTIVATION"), std::string::npos) << receiver;
    EXPECT_NE(receiver.message().find(absl::StrCat("of shape (1,1,", kN,
                                                   ") where this rank "
                                                   "expects activation 0->1 mb 0 of shape (3,",
                                                   kN / 3, ",1)")),
              std::string::npos)
        << receiver;
    EXPECT_FALSE(outcomes[0].status.ok()) << "rank 0 must not finish a step its peer failed";
  }
}

TEST(FifoExecutorTest, TheSameProgramTrainsUnderGloosTagMatching) {
  const std::vector<int> where = {0, 1};
  std::vector<RankOutcome> outcomes = RunPipeline(SwappedOrder(), where, /*M=*/2, /*steps=*/2);
  ExpectBitwiseEqual(outcomes, where, 2, 2);
}

}  // namespace
}  // namespace pp::executor
