// The program module's rules as both daemons use them: the planner names a comm action by the
// stage on its own rank, a worker accepts either end, and both resolve it to one message, tag and
// channel.
#include "program/rules.h"

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "program/lower.h"
#include "program/message.h"
#include "program/schedules.h"

namespace pp::prog {
namespace {

// The action naming the other end of the same edge (what a hand-written program may send).
Action OtherEnd(const Action& a) {
  Action other = a;
  const bool mine_is_lo = a.kind == Kind::kSendActivation || a.kind == Kind::kRecvGrad;
  other.stage = mine_is_lo ? a.stage + 1 : a.stage - 1;
  return other;
}

std::optional<std::string> Problem(const std::vector<int>& layout, int rank, const Action& a,
                                   StageNaming naming) {
  return ActionProblem(layout, /*microbatches=*/2, rank, a, naming);
}

TEST(ActionProblemTest, SaysWhyAnActionCannotRunOnARank) {
  const std::vector<int> layout = {0, 1, 1, 0};  // a V on two ranks
  const StageNaming own = StageNaming::kOwnStage;
  EXPECT_EQ(Problem(layout, 0, {Kind::kForward, 4, 0}, own), "stage outside 0..3");
  EXPECT_EQ(Problem(layout, 0, {Kind::kForward, 0, 2}, own), "microbatch outside 0..1");
  EXPECT_EQ(Problem(layout, 0, {Kind::kForward, 1, 0}, own), "stage 1 is held by rank 1");
  EXPECT_EQ(Problem(layout, 0, {Kind::kForward, 0, 0, 1}, own), "a compute action has a peer");
  EXPECT_EQ(Problem(layout, 0, {static_cast<Kind>(9), 0, 0}, own), "unknown action kind");
  EXPECT_EQ(Problem(layout, 0, {Kind::kSendActivation, 0, 0, 0}, own),
            "peer should be rank 1, which holds stage 1");
  EXPECT_EQ(Problem(layout, 1, {Kind::kSendActivation, 1, 0, 1}, own),
            "no edge to another rank: stage 2 is on this rank too, so no message is needed");
  EXPECT_EQ(Problem(layout, 0, {Kind::kRecvGrad, 3, 0, 1}, own),
            "stage 3 has no stage 4 to talk to");
  // The other end's stage: the planner's naming refuses it, a worker's resolves it.
  const Action other_end = {Kind::kSendActivation, 1, 0, 1};  // rank 0 ships stage 0's output
  EXPECT_EQ(Problem(layout, 0, other_end, own), "stage 1 is held by rank 1");
  EXPECT_EQ(Problem(layout, 0, other_end, StageNaming::kEitherEnd), std::nullopt);
  EXPECT_EQ(MessageOf(layout, 0, other_end), (Message{false, 0, 0}));
  EXPECT_EQ(Problem(layout, 0, {Kind::kSendGrad, 1, 0, 1}, StageNaming::kEitherEnd),
            "no edge between a stage of this rank and a stage of another rank");
}

// Every program the table generates, lowered, runs on a worker as the planner wrote it, and
// either naming of each comm action resolves to the message, channel and tag its partner has.
TEST(ActionProblemTest, WorkersAcceptEveryPlannedActionAndBothNamingsMeanOneMessage) {
  int comms = 0;
  for (const ScheduleKind& kind : Schedules()) {
    for (int D = 1; D <= 4; ++D) {
      const int M = 2 * D;
      absl::StatusOr<Schedule> compute = Generate(kind.name, D, 0, M);
      ASSERT_TRUE(compute.ok()) << kind.name << " D=" << D << ": " << compute.status();
      absl::StatusOr<Schedule> lowered = LowerComms(*compute);
      ASSERT_TRUE(lowered.ok()) << lowered.status();
      ASSERT_TRUE(CheckIndices(*lowered).ok()) << kind.name << " D=" << D;
      std::set<uint64_t> sent, received;
      for (int r = 0; r < D; ++r) {
        for (const Action& a : lowered->programs[r]) {
          const std::string what = kind.name + " D=" + std::to_string(D) + " " + Describe(a);
          ASSERT_EQ(ActionProblem(lowered->stage_to_rank, M, r, a, StageNaming::kEitherEnd),
                    std::nullopt)
              << what;
          if (!IsComm(a.kind)) continue;
          ++comms;
          const Message m = MessageOf(a);
          EXPECT_EQ(MessageOf(lowered->stage_to_rank, r, a), m) << what;
          EXPECT_EQ(MessageOf(lowered->stage_to_rank, r, OtherEnd(a)), m) << what;
          EXPECT_EQ(ChannelOf(m), m.gradient ? kGradientChannel : kActivationChannel);
          (IsSend(a.kind) ? sent : received).insert(TagOf(m));
        }
      }
      EXPECT_EQ(sent, received) << kind.name << " D=" << D << ": every tag sent is received";
    }
  }
  EXPECT_GT(comms, 1000);
}

TEST(BoundaryTagTest, NamesEachMessageApart) {
  EXPECT_EQ(DescribeTag(TagOf({true, 2, 5})), "gradient 2->3 mb 5");
  EXPECT_EQ(DescribeTag(7), "tag 7");
  std::set<uint64_t> tags;
  for (bool gradient : {false, true}) {
    for (int lo = 0; lo < 40; ++lo) {
      for (int mb = 0; mb < 40; ++mb) tags.insert(TagOf({gradient, lo, mb}));
    }
  }
  EXPECT_EQ(tags.size(), 2u * 40 * 40);
}

}  // namespace
}  // namespace pp::prog
