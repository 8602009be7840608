// Admission and placement by memory: ppcoord in-process with fake workers that announce
// memory_bytes, against the estimates PlanJob reports.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/server_fixture.h"

namespace pp::coordinator {
namespace {

using ::pp::coordinator::testing::WaitUntil;
using ::testing::HasSubstr;

class AdmissionTest : public testing::CoordinatorServerTest {
 protected:
  // PlanJob's estimated peak of every rank.
  std::vector<int64_t> Estimates(const pp::v1::JobSpec& spec) {
    pp::v1::PlanJobRequest request;
    *request.mutable_spec() = spec;
    pp::v1::PlanJobResponse response;
    grpc::ClientContext context;
    const grpc::Status status = client_->PlanJob(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    std::vector<int64_t> totals;
    for (const pp::v1::RankMemory& rank : response.memory()) totals.push_back(rank.total());
    return totals;
  }
};

TEST_F(AdmissionTest, PlanJobReportsEveryRanksBreakdown) {
  pp::v1::PlanJobRequest request;
  *request.mutable_spec() = ValidSpec(2);
  pp::v1::PlanJobResponse response;
  grpc::ClientContext context;
  ASSERT_TRUE(client_->PlanJob(&context, request, &response).ok());
  ASSERT_EQ(response.memory_size(), 2);
  for (const pp::v1::RankMemory& rank : response.memory()) {
    EXPECT_GT(rank.parameters(), 0);
    EXPECT_EQ(rank.gradients(), rank.parameters());
    EXPECT_EQ(rank.optimizer(), 2 * rank.parameters());
    EXPECT_GT(rank.activations(), 0);
    EXPECT_GT(rank.communication(), 0);  // 1F1B boundary buffers
    EXPECT_GT(rank.total(), rank.baseline() + 4 * rank.parameters() + rank.activations());
  }
  EXPECT_EQ(response.memory(1).rank(), 1);
  EXPECT_EQ(response.memory(1).pp(), 1);
}

TEST_F(AdmissionTest, AJobLargerThanTheLargestWorkerIsRefusedAtSubmit) {
  const pp::v1::JobSpec spec = ValidSpec(2);
  const std::vector<int64_t> need = Estimates(spec);
  ASSERT_EQ(need.size(), 2u);
  const int64_t largest_need = std::max(need[0], need[1]);
  const int rank = need[0] >= need[1] ? 0 : 1;
  AddWorker("w-small", largest_need / 4);
  AddWorker("w-big", largest_need - 1);
  const grpc::Status status = Submit(spec);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), HasSubstr(absl::StrCat("rank ", rank, " needs an estimated")));
  EXPECT_THAT(status.error_message(), HasSubstr(absl::StrCat("(", largest_need, " bytes)")));
  EXPECT_THAT(status.error_message(),
              HasSubstr(absl::StrCat("worker w-big has ")));
  EXPECT_THAT(status.error_message(), HasSubstr(absl::StrCat("(", largest_need - 1, " bytes)")));
  EXPECT_TRUE(JobIds().empty());  // nothing stored
}

TEST_F(AdmissionTest, WithNoWorkerOrUnknownMemoryTheJobIsAccepted) {
  std::string id;
  ASSERT_TRUE(Submit(ValidSpec(2), &id).ok());
  EXPECT_EQ(GetJob(id).state(), pp::v1::QUEUED);
  EXPECT_EQ(GetJob(id).reason(), "needs 2 workers, 0 registered, 0 idle");
  AddWorker("w-unknown", 0);  // a GPU worker today: memory unknown
  AddWorker("w-tiny", 1);
  std::string second;
  EXPECT_TRUE(Submit(ValidSpec(2), &second).ok());
}

TEST_F(AdmissionTest, RanksGoOnlyToWorkersWithEnoughMemory) {
  const pp::v1::JobSpec spec = ValidSpec(1);
  const std::vector<int64_t> need = Estimates(spec);
  ASSERT_EQ(need.size(), 1u);
  // "w-a" comes first in name order, but is too small.
  testing::FakeWorker& small = AddWorker("w-a", need[0] - 1);
  testing::FakeWorker& big = AddWorker("w-b", need[0]);
  std::string id;
  ASSERT_TRUE(Submit(spec, &id).ok());
  ASSERT_TRUE(big.WaitForTask(absl::Seconds(10)));
  EXPECT_TRUE(small.tasks().empty());
  EXPECT_EQ(GetJob(id).placement(0).worker(), "w-b");
}

TEST_F(AdmissionTest, AJobThatFitsButLacksLargeEnoughIdleWorkersWaitsWithAReason) {
  const pp::v1::JobSpec spec = ValidSpec(2);
  const std::vector<int64_t> need = Estimates(spec);
  ASSERT_EQ(need.size(), 2u);
  const int64_t smallest_need = std::min(need[0], need[1]);
  const int64_t largest_need = std::max(need[0], need[1]);
  AddWorker("w-big", largest_need);
  AddWorker("w-small", smallest_need - 1);
  std::string id;
  ASSERT_TRUE(Submit(spec, &id).ok());  // every rank fits w-big
  ASSERT_TRUE(WaitUntil(
      [&] { return GetJob(id).reason().find("with enough memory") != std::string::npos; },
      absl::Seconds(10)));
  const pp::v1::Job job = GetJob(id);
  EXPECT_EQ(job.state(), pp::v1::QUEUED);
  EXPECT_THAT(job.reason(), HasSubstr("needs 2 workers with enough memory"));
  EXPECT_THAT(job.reason(), HasSubstr("1 of 2 idle workers have that much"));
  // A large enough worker joins: the job runs.
  testing::FakeWorker& second = AddWorker("w-big2", largest_need);
  EXPECT_TRUE(second.WaitForTask(absl::Seconds(10)));
  EXPECT_TRUE(WaitUntil([&] { return GetJob(id).state() == pp::v1::RUNNING; }, absl::Seconds(10)));
}

TEST_F(AdmissionTest, AResumeOnALayoutLargerThanTheLargestWorkerIsRefused) {
  const pp::v1::JobSpec spec = ValidSpec(2);
  const std::vector<int64_t> need = Estimates(spec);
  ASSERT_EQ(need.size(), 2u);
  const int64_t worker_bytes = std::max(need[0], need[1]);
  pp::v1::JobSpec one_stage = spec;
  one_stage.mutable_parallel()->set_pipeline(1);
  one_stage.mutable_parallel()->set_schedule("gpipe");
  const std::vector<int64_t> one_stage_need = Estimates(one_stage);
  ASSERT_EQ(one_stage_need.size(), 1u);
  ASSERT_GT(one_stage_need[0], worker_bytes);  // one rank holds every layer
  std::string id;
  ASSERT_TRUE(Submit(spec, &id).ok());
  testing::FakeWorker& w0 = AddWorker("w0", worker_bytes);
  testing::FakeWorker& w1 = AddWorker("w1", worker_bytes);
  ASSERT_TRUE(w0.WaitForTask(absl::Seconds(10)));
  ASSERT_TRUE(w1.WaitForTask(absl::Seconds(10)));
  Checkpoint(id, /*attempt=*/0, /*step=*/2, /*ranks=*/2);
  pp::v1::Job job;
  {
    pp::v1::CancelJobRequest cancel;
    cancel.set_job_id(id);
    grpc::ClientContext context;
    ASSERT_TRUE(client_->CancelJob(&context, cancel, &job).ok());
  }
  pp::v1::ResumeJobRequest request;
  request.set_job_id(id);
  *request.mutable_parallel() = one_stage.parallel();
  grpc::Status refused;
  {
    grpc::ClientContext context;
    refused = client_->ResumeJob(&context, request, &job);
  }
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(refused.error_message(), HasSubstr("the job does not fit any worker: rank 0"));
  EXPECT_THAT(refused.error_message(), HasSubstr(absl::StrCat("(", one_stage_need[0], " bytes)")));
  EXPECT_THAT(refused.error_message(), HasSubstr(absl::StrCat("(", worker_bytes, " bytes)")));
  EXPECT_EQ(GetJob(id).state(), pp::v1::CANCELLED);  // nothing changed
  EXPECT_EQ(GetJob(id).attempt(), 0);

  *request.mutable_parallel() = spec.parallel();  // the layout that fits: resumed
  grpc::ClientContext context;
  ASSERT_TRUE(client_->ResumeJob(&context, request, &job).ok());
  EXPECT_EQ(job.attempt(), 1);
  EXPECT_EQ(job.start_step(), 2);
}

// recompute "auto" takes the least recomputation whose estimate fits the registered workers,
// stores the choice in the spec and says why in the job's plan; PlanJob answers the same.
TEST_F(AdmissionTest, RecomputeAutoChoosesTheLeastThatFits) {
  auto with = [&](const char* mode) {
    pp::v1::JobSpec spec = ValidSpec(2);
    // Microbatches large enough that the step's activations, not the checkpoint's host copies,
    // make each rank's peak.
    spec.mutable_train()->set_microbatch_size(16);
    spec.mutable_parallel()->set_recompute(mode);
    return spec;
  };
  auto largest = [&](const char* mode) {
    const std::vector<int64_t> need = Estimates(with(mode));
    return *std::max_element(need.begin(), need.end());
  };
  const int64_t none = largest("none"), selective = largest("selective"), full = largest("full");
  ASSERT_GT(none, selective);
  ASSERT_GT(selective, full);
  AddWorker("w0", selective);
  AddWorker("w1", selective);
  pp::v1::PlanJobRequest plan_request;
  *plan_request.mutable_spec() = with("auto");
  pp::v1::PlanJobResponse plan;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(client_->PlanJob(&context, plan_request, &plan).ok());
  }
  EXPECT_EQ(plan.recompute(), "selective");
  EXPECT_THAT(plan.recompute_reason(), HasSubstr("none does not fit"));
  std::string id;
  ASSERT_TRUE(Submit(with("auto"), &id).ok());
  const pp::v1::Job job = GetJob(id);
  EXPECT_EQ(job.spec().parallel().recompute(), "selective");
  EXPECT_THAT(job.plan().reason(), HasSubstr("recompute auto chose selective"));
  EXPECT_THAT(job.plan().reason(), HasSubstr("none does not fit"));
}

TEST_F(AdmissionTest, RecomputeAutoRefusesWhatNoModeFits) {
  pp::v1::JobSpec spec = ValidSpec(2);
  spec.mutable_parallel()->set_recompute("full");
  const std::vector<int64_t> need = Estimates(spec);
  AddWorker("w0", *std::max_element(need.begin(), need.end()) - 1);
  spec.mutable_parallel()->set_recompute("auto");
  const grpc::Status status = Submit(spec);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), HasSubstr("the job does not fit any worker"));
  EXPECT_THAT(status.error_message(), HasSubstr("recompute auto tried none, selective and full"));
  EXPECT_TRUE(JobIds().empty());
}

}  // namespace
}  // namespace pp::coordinator
