#include "coordinator/plan/validate.h"

#include <algorithm>

#include "gtest/gtest.h"
#include "program/lower.h"
#include "program/schedules.h"
#include "tests/coordinator/plan/plan_test_util.h"

namespace pp::plan {
namespace {

prog::Schedule Lowered(const std::string& name, int D, int V, int M) {
  absl::StatusOr<prog::Schedule> compute = prog::Generate(name, D, V, M);
  EXPECT_TRUE(compute.ok()) << compute.status();
  absl::StatusOr<prog::Schedule> lowered = prog::LowerComms(*compute);
  EXPECT_TRUE(lowered.ok()) << lowered.status();
  EXPECT_TRUE(Validate(*lowered).ok());
  return *lowered;
}

bool Same(const prog::Action& a, const prog::Action& b) {
  return a.kind == b.kind && a.stage == b.stage && a.microbatch == b.microbatch && a.peer == b.peer;
}

// 1F1B, D=2, M=2, lowered:
//   rank 0: F0 SEND_ACT0 F1 SEND_ACT1 RECV_GRAD0 B0 RECV_GRAD1 B1
//   rank 1: RECV_ACT0 F0 B0 SEND_GRAD0 RECV_ACT1 F1 B1 SEND_GRAD1
class BrokenProgramTest : public ::testing::Test {
 protected:
  void SetUp() override {
    schedule_ = Lowered("1f1b", 2, 1, 2);
    const std::vector<prog::Action> rank0 = {
        {prog::Kind::kForward, 0, 0},     {prog::Kind::kSendActivation, 0, 0, 1},
        {prog::Kind::kForward, 0, 1},     {prog::Kind::kSendActivation, 0, 1, 1},
        {prog::Kind::kRecvGrad, 0, 0, 1}, {prog::Kind::kBackward, 0, 0},
        {prog::Kind::kRecvGrad, 0, 1, 1}, {prog::Kind::kBackward, 0, 1}};
    ASSERT_EQ(schedule_.programs[0].size(), rank0.size());
    for (size_t i = 0; i < rank0.size(); ++i) {
      ASSERT_TRUE(Same(schedule_.programs[0][i], rank0[i])) << i;
    }
  }

  std::string Error() {
    absl::Status status = Validate(schedule_);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    return std::string(status.message());
  }

  prog::Schedule schedule_;
};

TEST_F(BrokenProgramTest, MissingReceive) {
  std::vector<prog::Action>& rank1 = schedule_.programs[1];
  ASSERT_EQ(rank1[0].kind, prog::Kind::kRecvActivation);
  rank1.erase(rank1.begin());
  EXPECT_EQ(Error(),
            "rank 1, action 0 (FORWARD stage 1 microbatch 0): needs RECV_ACTIVATION stage 1 "
            "microbatch 0, which this rank never runs");
}

TEST_F(BrokenProgramTest, MissingSend) {
  std::vector<prog::Action>& rank0 = schedule_.programs[0];
  rank0.erase(rank0.begin() + 1);
  EXPECT_EQ(Error(),
            "rank 1, action 0 (RECV_ACTIVATION stage 1 microbatch 0 from rank 0): never sent: no "
            "SEND_ACTIVATION stage 0 microbatch 0 on rank 0");
}

TEST_F(BrokenProgramTest, ReorderThatDeadlocks) {
  // Rank 0 waits for microbatch 0's gradient before sending microbatch 0's activation.
  std::vector<prog::Action>& rank0 = schedule_.programs[0];
  std::rotate(rank0.begin() + 1, rank0.begin() + 4, rank0.begin() + 6);
  EXPECT_EQ(Error(),
            "deadlock: rank 0 waits forever at action 1 (RECV_GRAD stage 0 microbatch 0 from rank "
            "1); rank 1 waits forever at action 0 (RECV_ACTIVATION stage 1 microbatch 0 from rank "
            "0)");
}

TEST_F(BrokenProgramTest, DuplicateForward) {
  schedule_.programs[0].push_back({prog::Kind::kForward, 0, 0});
  EXPECT_EQ(Error(),
            "rank 0, action 8 (FORWARD stage 0 microbatch 0): duplicate of rank 0, action 0");
}

TEST_F(BrokenProgramTest, ForwardBeforeItsReceive) {
  std::vector<prog::Action>& rank1 = schedule_.programs[1];
  std::swap(rank1[0], rank1[1]);
  EXPECT_EQ(Error(),
            "rank 1, action 0 (FORWARD stage 1 microbatch 0): runs before RECV_ACTIVATION stage 1 "
            "microbatch 0 (action 1)");
}

TEST_F(BrokenProgramTest, WrongPeerAndMissingBackward) {
  prog::Schedule wrong_peer = schedule_;
  wrong_peer.programs[0][1].peer = 0;
  EXPECT_EQ(Validate(wrong_peer).message(),
            "rank 0, action 1 (SEND_ACTIVATION stage 0 microbatch 0 to rank 0): peer should be "
            "rank 1, which holds stage 1");

  schedule_.programs[0].pop_back();
  EXPECT_EQ(Error(),
            "stage 0 microbatch 1 (rank 0) has no BACKWARD (nor BACKWARD_INPUT and "
            "BACKWARD_WEIGHT)");
}

TEST(ValidateTest, WeightGradBeforeInputGrad) {
  prog::Schedule schedule = Lowered("zb-h1", 2, 1, 2);
  std::vector<prog::Action>& rank0 = schedule.programs[0];
  auto is = [](prog::Kind kind) {
    return [kind](const prog::Action& a) { return a.kind == kind; };
  };
  const auto i0 = std::find_if(rank0.begin(), rank0.end(), is(prog::Kind::kBackwardInput));
  const auto w0 = std::find_if(rank0.begin(), rank0.end(), is(prog::Kind::kBackwardWeight));
  ASSERT_TRUE(i0 < w0);
  ASSERT_EQ(i0->microbatch, w0->microbatch);
  const long at = i0 - rank0.begin();
  std::rotate(rank0.begin() + at, w0, w0 + 1);  // W moves to just before its I
  EXPECT_EQ(Validate(schedule).message(),
            absl::StrCat("rank 0, action ", at,
                         " (BACKWARD_WEIGHT stage 0 microbatch 0): runs "
                         "before BACKWARD_INPUT stage 0 microbatch 0 (action ",
                         at + 1, ")"));
}

TEST(ValidateTest, SplitAndFullBackwardMayNotMix) {
  prog::Schedule schedule = Lowered("zb-h1", 1, 1, 1);  // F I W on one rank
  schedule.programs[0].push_back({prog::Kind::kBackward, 0, 0});
  EXPECT_EQ(Validate(schedule).message(),
            "rank 0, action 3 (BACKWARD stage 0 microbatch 0): this stage and microbatch already "
            "has a BACKWARD_INPUT at rank 0, action 1; use either B or I + W");
  schedule.programs[0].pop_back();
  schedule.programs[0].pop_back();  // drop the W
  EXPECT_EQ(Validate(schedule).message(),
            "stage 0 microbatch 0 (rank 0) has a BACKWARD_INPUT but no BACKWARD_WEIGHT");
}

TEST(ValidateTest, MalformedShapes) {
  prog::Schedule schedule = Lowered("1f1b", 2, 1, 2);
  schedule.stage_to_rank = {0, 0};
  EXPECT_EQ(Validate(schedule).message(), "rank 0 holds 2 stages, want V=1");
  schedule = Lowered("1f1b", 2, 1, 2);
  schedule.programs[1][1].microbatch = 7;
  EXPECT_EQ(Validate(schedule).message(),
            "rank 1, action 1 (FORWARD stage 1 microbatch 7): microbatch outside 0..1");
}

TEST(LowerTest, NoMessagesWhereConsecutiveStagesShareARank) {
  // zb-v, D=3: stages 0..5 on ranks 0 1 2 2 1 0. Of the 5 stage edges, 2->3 stays on rank 2, so
  // each microbatch sends 4 activations and 4 gradients, and none for that edge.
  const prog::Schedule schedule = Lowered("zb-v", 3, 2, 4);
  int sends = 0, receives = 0;
  for (const auto& program : schedule.programs) {
    for (const prog::Action& a : program) {
      sends += a.kind == prog::Kind::kSendActivation || a.kind == prog::Kind::kSendGrad;
      receives += a.kind == prog::Kind::kRecvActivation || a.kind == prog::Kind::kRecvGrad;
      EXPECT_FALSE(a.kind == prog::Kind::kSendActivation && a.stage == 2);
      EXPECT_FALSE(a.kind == prog::Kind::kSendGrad && a.stage == 3);
    }
  }
  EXPECT_EQ(sends, 4 * 2 * 4);
  EXPECT_EQ(receives, sends);
}

TEST(LowerTest, RefusesAnAlreadyLoweredProgram) {
  const prog::Schedule schedule = Lowered("1f1b", 2, 1, 2);
  absl::StatusOr<prog::Schedule> again = prog::LowerComms(schedule);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("already lowered"), std::string::npos);
}

// Check 6 holds for everything the generators make, at every V they take: per ordered pair of
// ranks and kind, the sends and receives agree in order (the order of all messages between two
// ranks does not, for the V-shaped schedules: hence one channel per kind).
TEST(ChannelOrderTest, EveryGeneratedScheduleKeepsEachKindsOrder) {
  int checked = 0;
  for (const std::string& name : prog::ScheduleNames()) {
    for (int D = 2; D <= 6; ++D) {
      for (int V = 1; V <= 3; ++V) {
        for (int M = D; M <= 3 * D; ++M) {
          absl::StatusOr<prog::Schedule> compute = prog::Generate(name, D, V, M);
          if (!compute.ok()) continue;  // a V or M the schedule refuses
          absl::StatusOr<prog::Schedule> lowered = prog::LowerComms(*compute);
          ASSERT_TRUE(lowered.ok()) << lowered.status();
          EXPECT_TRUE(internal::CheckStatically(*lowered).ok())
              << name << " D=" << D << " V=" << V << " M=" << M << ": "
              << internal::CheckStatically(*lowered);
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 500);
}

}  // namespace
}  // namespace pp::plan
