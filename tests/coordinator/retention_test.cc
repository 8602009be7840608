// The retention of ended jobs (coordinator/retention.h): the forms --retain_jobs takes, which jobs
// count as expired, and ppcoord in-process with a 1 s retention: an ended job goes from memory and
// store (NOT_FOUND, after a restart too) while its checkpoints stay, and a job that has not ended
// stays.
#include "coordinator/retention.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pp/v1/coordinator.grpc.pb.h"
#include "tests/coordinator/server_fixture.h"
#include "tests/coordinator/test_support.h"

namespace pp::coordinator {
namespace {

using ::pp::coordinator::testing::WaitUntil;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(RetentionFlagTest, TakesDaysDurationsAndZero) {
  EXPECT_EQ(*ParseRetention("30d"), absl::Hours(720));
  EXPECT_EQ(*ParseRetention("2s"), absl::Seconds(2));
  EXPECT_EQ(*ParseRetention("1h30m"), absl::Minutes(90));
  EXPECT_EQ(*ParseRetention("0"), absl::ZeroDuration());
  for (const char* bad : {"", "30", "d", "-1s", "-2d", "3x", "inf", "99999999999999999d"}) {
    absl::StatusOr<absl::Duration> refused = ParseRetention(bad);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(refused.status().message(), HasSubstr(absl::StrCat("--retain_jobs: \"", bad)));
  }
  EXPECT_EQ(FormatRetention(kDefaultRetainJobs), "30d");
  EXPECT_EQ(FormatRetention(absl::Hours(48)), "2d");
  EXPECT_EQ(FormatRetention(absl::Hours(36)), "36h");
  EXPECT_EQ(FormatRetention(absl::Seconds(2)), "2s");
  EXPECT_EQ(FormatRetention(absl::ZeroDuration()), "0");
}

TEST(RetentionFlagTest, OnlyEndedJobsExpireAndZeroKeepsThem) {
  pp::v1::Job job;
  job.set_updated_unix(1000);
  for (pp::v1::JobState ended : {pp::v1::SUCCEEDED, pp::v1::FAILED, pp::v1::CANCELLED}) {
    job.set_state(ended);
    EXPECT_FALSE(Expired(job, 1001.5, absl::Seconds(2))) << ended;
    EXPECT_TRUE(Expired(job, 1002, absl::Seconds(2))) << ended;
    EXPECT_FALSE(Expired(job, 1e12, absl::ZeroDuration())) << ended;
  }
  for (pp::v1::JobState live : {pp::v1::QUEUED, pp::v1::RUNNING}) {
    job.set_state(live);
    EXPECT_FALSE(Expired(job, 1e12, absl::Seconds(2))) << live;
  }
}

class RetentionTest : public testing::CoordinatorServerTest {
 protected:
  grpc::StatusCode GetCode(const std::string& id) {
    pp::v1::GetJobRequest request;
    request.set_job_id(id);
    pp::v1::Job job;
    grpc::ClientContext context;
    return client_->GetJob(&context, request, &job).error_code();
  }
  grpc::Status Cancel(const std::string& id) {
    pp::v1::CancelJobRequest request;
    request.set_job_id(id);
    pp::v1::Job job;
    grpc::ClientContext context;
    return client_->CancelJob(&context, request, &job);
  }
};

TEST_F(RetentionTest, AnEndedJobGoesForGoodAndItsCheckpointsStay) {
  retain_jobs_ = absl::Seconds(1);
  server_.reset();
  StartServer();
  std::string ended, queued;
  ASSERT_TRUE(Submit(ValidSpec(), &ended).ok());
  ASSERT_TRUE(Submit(ValidSpec(), &queued).ok());  // no workers: it stays QUEUED
  const std::filesystem::path shard =
      dir_ / "data" / "checkpoints" / ended / "step-1" / "rank-00000.safetensors";
  std::filesystem::create_directories(shard.parent_path());
  std::ofstream(shard) << "weights";
  ASSERT_TRUE(Cancel(ended).ok());
  ASSERT_TRUE(WaitUntil([&] { return GetCode(ended) == grpc::StatusCode::NOT_FOUND; },
                        absl::Seconds(30)));
  EXPECT_THAT(JobIds(), ElementsAre(queued));
  EXPECT_EQ(Cancel(ended).error_code(), grpc::StatusCode::NOT_FOUND);

  server_.reset();  // its row went too: a restart does not bring it back
  StartServer();
  EXPECT_EQ(GetCode(ended), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(JobIds(), ElementsAre(queued));
  EXPECT_EQ(GetJob(queued).state(), pp::v1::QUEUED);
  EXPECT_TRUE(std::filesystem::exists(shard));
}

}  // namespace
}  // namespace pp::coordinator
