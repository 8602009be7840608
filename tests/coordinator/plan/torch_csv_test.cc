// torch.distributed.pipelining's schedule CSV (torch_csv.h): the exact tokens, round trips of
// every training schedule in both forms, files as torch writes them, and broken files refused at
// the cell that is wrong.
#include "coordinator/plan/torch_csv.h"

#include <string>

#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "program/schedules.h"
#include "tests/coordinator/plan/plan_test_util.h"

namespace pp::plan {
namespace {

// 1F1B, D=2, M=2: rank 0 warms up with one forward, rank 1 with none (program/generators.cc).
constexpr char kOneFOneBCompute[] = "0F0,0F1,0B0,0B1\r\n1F0,1B0,1F1,1B1\r\n";
constexpr char kOneFOneBComms[] =
    "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\r\n"
    "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1\r\n";

TEST(TorchCsvTest, WritesTorchsTokensInBothForms) {
  const Planned planned = MustPlan("1f1b", 2, 1, 2);
  EXPECT_EQ(ToTorchCsv(planned.schedule, CsvForm::kComputeOnly), kOneFOneBCompute);
  EXPECT_EQ(ToTorchCsv(planned.schedule, CsvForm::kWithComms), kOneFOneBComms);
  const Planned zb = MustPlan("zb-h1", 2, 1, 1);
  EXPECT_EQ(ToTorchCsv(zb.schedule, CsvForm::kComputeOnly), "0F0,0I0,0W0\r\n1F0,1I0,1W0\r\n");
}

void ExpectSame(const prog::Schedule& got, const prog::Schedule& want, const std::string& what) {
  EXPECT_EQ(got.pipeline, want.pipeline) << what;
  EXPECT_EQ(got.chunks, want.chunks) << what;
  EXPECT_EQ(got.microbatches, want.microbatches) << what;
  EXPECT_EQ(got.stage_to_rank, want.stage_to_rank) << what;
  EXPECT_EQ(got.programs, want.programs) << what;
}

// Acceptance: the CSV of each of the nine training schedules reads back to the identical
// lowered schedule, from either form, with the same simulated step.
TEST(TorchCsvTest, EveryScheduleRoundTripsInBothForms) {
  int checked = 0;
  for (const std::string& name : prog::TrainingScheduleNames()) {
    for (int D : {2, 3, 4}) {
      const int M = 2 * D + 2;  // allowed by all nine (interleaved: M mod D in {0, 1, D-2, D-1})
      const Planned planned = MustPlan(name, D, 0, M);
      for (CsvForm form : {CsvForm::kComputeOnly, CsvForm::kWithComms}) {
        const std::string what = absl::StrCat(name, " D=", D, " form ", static_cast<int>(form));
        absl::StatusOr<Planned> read =
            PlanTorchCsv(ToTorchCsv(planned.schedule, form), UnitCosts());
        ASSERT_TRUE(read.ok()) << what << ": " << read.status();
        ExpectSame(read->schedule, planned.schedule, what);
        EXPECT_EQ(read->simulation.makespan, planned.simulation.makespan) << what;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 9 * 3 * 2);
}

// What torch itself writes: None time steps as empty cells, "\n" from other writers, the DP
// reduction and FSDP actions of its lowering, DualPipeV's OVERLAP_F_B groups.
TEST(TorchCsvTest, ReadsFilesAsTorchWritesThem) {
  const Planned want = MustPlan("1f1b", 2, 1, 2);
  absl::StatusOr<Planned> idle = PlanTorchCsv("0F0,0F1,,0B0,,0B1\n,1F0,1B0,1F1,1B1,\n", UnitCosts());
  ASSERT_TRUE(idle.ok()) << idle.status();
  ExpectSame(idle->schedule, want.schedule, "empty cells");
  absl::StatusOr<Planned> extras = PlanTorchCsv(
      absl::StrCat("0UNSHARD,", absl::StrReplaceAll(kOneFOneBComms, {{"\r\n1", ",0REDUCE_GRAD\r\n1"}})),
      UnitCosts());
  ASSERT_TRUE(extras.ok()) << extras.status();
  ExpectSame(extras->schedule, want.schedule, "REDUCE_GRAD");
  absl::StatusOr<Planned> grouped =
      PlanTorchCsv("0F0,(0F1;0B0)OVERLAP_F_B,0B1\r\n1F0,1B0,1F1,1B1\r\n", UnitCosts());
  ASSERT_TRUE(grouped.ok()) << grouped.status();
  ExpectSame(grouped->schedule, want.schedule, "OVERLAP_F_B");
  EXPECT_EQ(grouped->schedule.name, prog::kScheduleFileName);
}

std::string MessageOf(const std::string& text) {
  absl::StatusOr<Planned> planned = PlanTorchCsv(text, UnitCosts());
  EXPECT_FALSE(planned.ok()) << text;
  EXPECT_EQ(planned.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(planned.status().message());
}

// Acceptance: hand-broken files are refused with the first offending action, its rank and line.
TEST(TorchCsvTest, RefusesBrokenSchedulesAtTheOffendingCell) {
  // Rank 1's receive of microbatch 1's activation is gone: its forward has no input.
  EXPECT_EQ(MessageOf(absl::StrReplaceAll(kOneFOneBComms, {{"1RECV_F1,", ""}})),
            "line 2, column 5 ('1F1'): rank 1, action 4 (FORWARD stage 1 microbatch 1): needs "
            "RECV_ACTIVATION stage 1 microbatch 1, which this rank never runs");
  // A forward twice.
  EXPECT_EQ(MessageOf("0F0,0F0,0F1,0B0,0B1\r\n1F0,1B0,1F1,1B1\r\n"),
            "line 1, column 2 ('0F0'): rank 0, action 2 (FORWARD stage 0 microbatch 0): "
            "duplicate of rank 0, action 0");
  // W before its I.
  EXPECT_EQ(MessageOf("0F0,0W0,0I0\r\n1F0,1I0,1W0\r\n"),
            "line 1, column 2 ('0W0'): rank 0, action 2 (BACKWARD_WEIGHT stage 0 microbatch 0): "
            "runs before BACKWARD_INPUT stage 0 microbatch 0 (action 4)");
  // A deadlock names the first rank that waits forever.
  EXPECT_NE(MessageOf("0F0,0B0\r\n1B0,1F0\r\n").find("line 2, column 1 ('1B0')"),
            std::string::npos);
}

// Valid under tag matching, not under NCCL's posting order (validate.h check 6): rank 0 sends
// microbatch 0's activation first, rank 1 receives microbatch 1's first. The error names both.
TEST(TorchCsvTest, RefusesAFileWhoseRanksDisagreeOnAChannelsOrder) {
  EXPECT_EQ(MessageOf("0F0,0F1,0B0,0B1\r\n1F1,1B1,1F0,1B0\r\n"),
            "line 2, column 1 ('1F1'): rank 1, action 0 (RECV_ACTIVATION stage 1 microbatch 1 "
            "from rank 0): receive #1 on the activation channel from rank 0 meets rank 0's send "
            "#1 on it, action 1 (SEND_ACTIVATION stage 0 microbatch 0 to rank 1): NCCL matches a "
            "channel's messages by posting order alone, so between two ranks each kind must be "
            "sent and received in one order");
}

TEST(TorchCsvTest, RefusesMalformedFilesSayingWhere) {
  EXPECT_EQ(MessageOf(""), "schedule file has no rows");
  EXPECT_EQ(MessageOf("0F0,0X0\r\n"),
            "line 1, column 2 ('0X0'): unknown action type (known: F, B, I, W, SEND_F, RECV_F, "
            "SEND_B, RECV_B, OVERLAP_F_B, UNSHARD, RESHARD, REDUCE_GRAD)");
  EXPECT_EQ(MessageOf("F0\r\n"), "line 1, column 1 ('F0'): not [stage][action][microbatch], e.g. 2F0");
  EXPECT_EQ(MessageOf("0F\r\n"), "line 1, column 1 ('0F'): has no microbatch");
  EXPECT_NE(MessageOf("0F99999999999\r\n").find("below 2^22"), std::string::npos);
  EXPECT_NE(MessageOf("4000000F4000000\r\n").find("stage-microbatches"), std::string::npos);
  EXPECT_NE(MessageOf("0F0,0B0\r\n1F0,1B0,2F0,2B0\r\n").find("S must be a multiple of D"),
            std::string::npos);
  EXPECT_EQ(MessageOf("0F0,0B0,1F0,1B0\r\n0F1,0B1,1F1,1B1\r\n"),
            "line 2, column 1 ('0F1'): stage 0 already computes on rank 0 (line 1)");
  EXPECT_EQ(MessageOf("0F0,0B0,1F0,1B0\r\n2F0,2B0,3F0,3B0,4F0,4B0,5F0,5B0\r\n"),
            "line 1: rank 0 computes 2 stages; every rank must hold V=3 (S/D)");
  EXPECT_EQ(MessageOf("0RECV_F0,0F0,0B0\r\n"),
            "line 1, column 1 ('0RECV_F0'): stage 0 has no previous stage to talk to");
  EXPECT_EQ(MessageOf("0F0,(0B0)OVERLAP\r\n"),
            "line 1, column 2 ('(0B0)OVERLAP'): a group must be (a;b)OVERLAP_F_B");
  EXPECT_NE(MessageOf(std::string((64 << 20) + 1, ',')).find("at most"), std::string::npos);
}

}  // namespace
}  // namespace pp::plan
