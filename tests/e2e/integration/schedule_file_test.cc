// A job that carries its schedule as torch.distributed.pipelining CSV (parallel.schedule_file in
// the comm form, parallel.program compute-only) trains on the CPU cluster bit for bit like the
// single-process reference, with the file's own stage layout; a broken file is refused at
// submission naming the row and the cell.
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "common/checkpoint.h"
#include "common/job_spec.h"
#include "coordinator/plan/plan.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/e2e/integration/fixture.h"
#include "tests/support/cluster.h"

namespace pp::integration {
namespace {

using ::pp::testing_support::GetJob;
using ::pp::testing_support::SubmitJob;
using ::testing::HasSubstr;

constexpr int kSteps = 4;

class ScheduleFileTest : public IntegrationTest {
 protected:
  // TinySpec's layout with the schedule `name` generated here and carried as CSV in `form`.
  pp::v1::JobSpec CarryingSpec(const std::string& name, int chunks, plan::CsvForm form,
                               bool as_program) const {
    pp::v1::JobSpec spec = TinySpec(name, chunks, kSteps);
    absl::StatusOr<plan::Planned> planned =
        plan::Plan(name, 4, chunks, spec.train().microbatches(), plan::CostModel{});
    EXPECT_TRUE(planned.ok()) << planned.status();
    const std::string csv = planned.ok() ? plan::ToTorchCsv(planned->schedule, form) : "";
    pp::v1::ParallelSpec* parallel = spec.mutable_parallel();
    parallel->clear_schedule();
    if (!as_program) {
      parallel->set_schedule_file(csv);
      return spec;
    }
    for (absl::string_view row : absl::StrSplit(csv, "\r\n", absl::SkipEmpty())) {
      parallel->add_program(std::string(row));
    }
    return spec;
  }

  // Trains `spec` on the cluster: the reference trainer's losses and weights exactly, under the
  // carried schedule's name.
  void ExpectReferenceBits(const pp::v1::JobSpec& spec, const std::string& what) {
    SCOPED_TRACE(what);
    const std::string id = Run(spec);
    ASSERT_FALSE(id.empty()) << cluster_->Logs();
    ExpectMatchesReference(spec, id, testing_support::Match::kBitwise);
    absl::StatusOr<common::Checkpoint> saved =
        common::LoadCheckpoint(common::StepDir(cluster_->checkpoint_root(), id, kSteps));
    ASSERT_TRUE(saved.ok()) << saved.status();
    EXPECT_EQ(saved->manifest.layout().schedule(), prog::kScheduleFileName);
    absl::StatusOr<pp::v1::Job> job = GetJob(cluster_->stub(), id);
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_TRUE(common::CarriesSchedule(job->spec().parallel()));
    EXPECT_EQ(job->spec().parallel().schedule(), "");
  }
};

TEST_F(ScheduleFileTest, CarriedSchedulesTrainLikeTheReference) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(4));
  // zb-v's V-shaped layout (rank r holds stages r and 7 - r) comes from the file alone.
  ExpectReferenceBits(CarryingSpec("zb-v", 2, plan::CsvForm::kWithComms, false), "zb-v file");
  ExpectReferenceBits(CarryingSpec("dualpipe-v", 2, plan::CsvForm::kComputeOnly, true),
                      "dualpipe-v program");
}

TEST_F(ScheduleFileTest, BrokenOrMismatchedSchedulesAreRefusedAtSubmission) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(0));
  pp::v1::JobSpec broken = CarryingSpec("1f1b", 1, plan::CsvForm::kComputeOnly, true);
  broken.mutable_parallel()->set_program(2, "2F0," + broken.parallel().program(2));
  absl::StatusOr<std::string> refused = SubmitJob(cluster_->stub(), broken);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("parallel.program[2], column 2 ('2F0'): rank 2"));

  pp::v1::JobSpec mismatched = CarryingSpec("1f1b", 1, plan::CsvForm::kWithComms, false);
  mismatched.mutable_train()->set_microbatches(4);
  refused = SubmitJob(cluster_->stub(), mismatched);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("parallel.schedule_file: its schedule runs D=4 ranks with V=1 chunks and "
                        "M=8 microbatches, but the spec says parallel.pipeline=4, "
                        "parallel.chunks=1, train.microbatches=4"));

  // Valid under tag matching, not under NCCL's posting order: rank 0 sends microbatch 0's
  // activation first, rank 1 receives microbatch 1's first (plan validate.h, check 6).
  pp::v1::JobSpec swapped = TinySpec("1f1b", 1, kSteps);
  swapped.mutable_parallel()->clear_schedule();
  swapped.mutable_parallel()->set_pipeline(2);
  swapped.mutable_train()->set_microbatches(2);
  swapped.mutable_parallel()->add_program("0F0,0F1,0B0,0B1");
  swapped.mutable_parallel()->add_program("1F1,1B1,1F0,1B0");
  refused = SubmitJob(cluster_->stub(), swapped);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("parallel.program[1], column 1 ('1F1'): rank 1, action 0 "
                        "(RECV_ACTIVATION stage 1 microbatch 1 from rank 0): receive #1 on the "
                        "activation channel from rank 0 meets rank 0's send #1 on it, action 1 "
                        "(SEND_ACTIVATION stage 0 microbatch 0 to rank 1)"));
}

}  // namespace
}  // namespace pp::integration
