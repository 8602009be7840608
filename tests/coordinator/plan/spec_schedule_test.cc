// A job's schedule (plan.h PlanSpecSchedule): named and generated, or carried as torch CSV in
// parallel.schedule_file or parallel.program, with the spec's layout checked against the file's
// and errors that name the field, the row and the cell.
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "coordinator/plan/plan.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/plan/plan_test_util.h"

namespace pp::plan {
namespace {

using ::testing::StartsWith;

pp::v1::ParallelSpec Layout(int D, int V) {
  pp::v1::ParallelSpec parallel;
  parallel.set_pipeline(D);
  parallel.set_chunks(V);
  return parallel;
}

void ExpectSamePlan(const absl::StatusOr<Planned>& got, const Planned& want) {
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->schedule.name, prog::kScheduleFileName);
  EXPECT_EQ(got->schedule.stage_to_rank, want.schedule.stage_to_rank);
  EXPECT_EQ(got->schedule.programs, want.schedule.programs);
  EXPECT_EQ(got->simulation.makespan, want.simulation.makespan);
}

// The file's rows as parallel.program's strings.
std::vector<std::string> Rows(const std::string& csv) {
  std::vector<std::string> rows = absl::StrSplit(csv, "\r\n", absl::SkipEmpty());
  return rows;
}

TEST(SpecScheduleTest, CarriedCsvIsTheScheduleItWasWrittenFrom) {
  for (const auto& [name, V] : std::vector<std::pair<std::string, int>>{
           {"zb-v", 2}, {"interleaved-1f1b", 2}, {"dualpipe-v", 2}, {"1f1b", 1}}) {
    SCOPED_TRACE(name);
    const Planned want = MustPlan(name, 4, V, 8);
    for (CsvForm form : {CsvForm::kComputeOnly, CsvForm::kWithComms}) {
      pp::v1::ParallelSpec file = Layout(4, V);
      file.set_schedule_file(ToTorchCsv(want.schedule, form));
      ExpectSamePlan(PlanSpecSchedule(file, 8, UnitCosts()), want);
      pp::v1::ParallelSpec program = Layout(4, V);
      for (const std::string& row : Rows(ToTorchCsv(want.schedule, form))) program.add_program(row);
      ExpectSamePlan(PlanSpecSchedule(program, 8, UnitCosts()), want);
    }
  }
}

TEST(SpecScheduleTest, NamedSchedulesAreGeneratedAndTheirRefusalsNameTheFields) {
  pp::v1::ParallelSpec named = Layout(4, 1);
  named.set_schedule("1f1b");
  const absl::StatusOr<Planned> planned = PlanSpecSchedule(named, 8, UnitCosts());
  ASSERT_TRUE(planned.ok()) << planned.status();
  EXPECT_EQ(planned->schedule.programs, MustPlan("1f1b", 4, 1, 8).schedule.programs);
  named.set_schedule("interleaved-1f1b");
  named.set_chunks(2);
  EXPECT_THAT(std::string(PlanSpecSchedule(named, 2, UnitCosts()).status().message()),
              StartsWith("parallel.schedule \"interleaved-1f1b\" with parallel.pipeline=4, "
                         "parallel.chunks=2, train.microbatches=2: "));
}

TEST(SpecScheduleTest, LayoutMustAgreeWithTheFile) {
  const std::string csv = ToTorchCsv(MustPlan("zb-v", 4, 2, 8).schedule, CsvForm::kComputeOnly);
  pp::v1::ParallelSpec spec = Layout(4, 1);
  spec.set_schedule_file(csv);
  EXPECT_EQ(PlanSpecSchedule(spec, 8, UnitCosts()).status().message(),
            "parallel.schedule_file: its schedule runs D=4 ranks with V=2 chunks and M=8 "
            "microbatches, but the spec says parallel.pipeline=4, parallel.chunks=1, "
            "train.microbatches=8; they must agree");
  spec.set_chunks(2);
  EXPECT_THAT(std::string(PlanSpecSchedule(spec, 6, UnitCosts()).status().message()),
              StartsWith("parallel.schedule_file: its schedule runs D=4 ranks"));
  EXPECT_TRUE(PlanSpecSchedule(spec, 8, UnitCosts()).ok());
}

// Acceptance (issue 17): hand-broken files are refused by the validator with the first offending
// action, its rank and its line; in parallel.program the line is the row's index.
TEST(SpecScheduleTest, BrokenSchedulesNameTheRowAndTheCell) {
  // 1F1B D=2 M=2 with comms, rank 1's first receive deleted: its F0 has no input.
  const std::string missing_receive =
      "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\r\n"
      "1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1\r\n";
  pp::v1::ParallelSpec file = Layout(2, 1);
  file.set_schedule_file(missing_receive);
  const std::string file_error(PlanSpecSchedule(file, 2, UnitCosts()).status().message());
  EXPECT_THAT(file_error, StartsWith("parallel.schedule_file: line 2, column 1 ('1F0'): rank 1"));

  pp::v1::ParallelSpec program = Layout(2, 1);
  for (const std::string& row : Rows(missing_receive)) program.add_program(row);
  const std::string program_error(PlanSpecSchedule(program, 2, UnitCosts()).status().message());
  EXPECT_THAT(program_error, StartsWith("parallel.program[1], column 1 ('1F0'): rank 1"));

  // A duplicate forward and a W before its I, compute-only.
  program.clear_program();
  program.add_program("0F0,0F0,0F1,0B0,0B1");
  program.add_program("1F0,1B0,1F1,1B1");
  EXPECT_THAT(std::string(PlanSpecSchedule(program, 2, UnitCosts()).status().message()),
              StartsWith("parallel.program[0], column 2 ('0F0'): "));
  program.clear_program();
  program.add_program("0F0,0I0,0W0");
  program.add_program("1F0,1W0,1I0");
  EXPECT_THAT(std::string(PlanSpecSchedule(program, 1, UnitCosts()).status().message()),
              StartsWith("parallel.program[1], column 2 ('1W0'): "));
}

}  // namespace
}  // namespace pp::plan
