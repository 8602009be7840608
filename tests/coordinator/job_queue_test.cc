// The job queue (coordinator/job_queue.h): the order QUEUED jobs are tried in, and what holds one.
#include "coordinator/job_queue.h"

#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "coordinator/job_record.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pp::coordinator {
namespace {

using ::testing::ElementsAre;

const absl::Time kNow = absl::FromUnixSeconds(1000);

JobRecord Record(const std::string& id, pp::v1::JobState state) {
  pp::v1::Job job;
  job.set_id(id);
  job.set_state(state);
  return JobRecord(std::move(job));
}

std::vector<pp::v1::RankPlacement> OneRank() {
  std::vector<pp::v1::RankPlacement> placement(1);
  placement[0].set_worker("w0");
  return placement;
}

TEST(JobQueue, OffersQueuedJobsOldestFirst) {
  std::map<std::string, JobRecord> jobs;
  JobQueue queue;
  for (const char* id : {"c", "a", "b"}) {
    jobs.emplace(id, Record(id, pp::v1::QUEUED));
    queue.Add(id);
  }
  jobs.emplace("done", Record("done", pp::v1::SUCCEEDED));
  queue.Add("done");
  EXPECT_THAT(queue.PlacementOrder(jobs, kNow), ElementsAre("c", "a", "b"));
  EXPECT_THAT(queue.submitted(), ElementsAre("c", "a", "b", "done"));
  queue.Erase({"a", "done"});
  EXPECT_THAT(queue.submitted(), ElementsAre("c", "b"));
  EXPECT_THAT(queue.PlacementOrder(jobs, kNow), ElementsAre("c", "b"));
}

TEST(JobQueue, HoldsAJobDuringItsBackoff) {
  JobRecord rec = Record("j", pp::v1::QUEUED);
  ASSERT_TRUE(rec.Apply(JobEdit::Backoff(kNow + absl::Seconds(2))).ok());
  EXPECT_EQ(JobQueue::HoldOf(rec, kNow), JobQueue::Hold::kBackoff);
  EXPECT_EQ(JobQueue::HoldOf(rec, kNow + absl::Seconds(2)), JobQueue::Hold::kNone);
}

TEST(JobQueue, HoldsARestartUntilItsCheckpointIsVerified) {
  JobRecord rec = Record("j", pp::v1::QUEUED);
  ASSERT_TRUE(rec.Apply(JobEdit::Place(OneRank(), 0)).ok());
  ASSERT_TRUE(rec.Apply(JobEdit::Requeue(10, "lost", false, absl::InfinitePast(), 0)).ok());
  EXPECT_EQ(JobQueue::HoldOf(rec, kNow), JobQueue::Hold::kVerifying);
  ASSERT_TRUE(rec.Apply(JobEdit::SettleStart(10)).ok());
  EXPECT_EQ(JobQueue::HoldOf(rec, kNow), JobQueue::Hold::kNone);
}

TEST(JobQueue, HoldsAJobWhoseWorkersCalibrate) {
  std::map<std::string, JobRecord> jobs;
  jobs.emplace("j", Record("j", pp::v1::QUEUED));
  jobs.at("j").calibrating.emplace(0, OneRank(), "key", 1, kNow);
  JobQueue queue;
  queue.Add("j");
  EXPECT_EQ(JobQueue::HoldOf(jobs.at("j"), kNow), JobQueue::Hold::kCalibrating);
  EXPECT_TRUE(queue.PlacementOrder(jobs, kNow).empty());
}

}  // namespace
}  // namespace pp::coordinator
