// The per-job record (coordinator/job_record.h): its lifecycle edits, legal and illegal; and the
// calibration run it may hold (coordinator/calibration_run.h).
#include "coordinator/job_record.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "coordinator/calibration_run.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pp::coordinator {
namespace {

using ::testing::HasSubstr;

constexpr double kNow = 1000;

pp::v1::Job QueuedJob() {
  pp::v1::Job job;
  job.set_id("j-1");
  job.set_state(pp::v1::QUEUED);
  job.mutable_spec()->mutable_train()->set_steps(100);
  job.mutable_spec()->set_max_restarts(3);
  return job;
}

std::vector<pp::v1::RankPlacement> TwoRanks() {
  std::vector<pp::v1::RankPlacement> placement(2);
  for (int r = 0; r < 2; ++r) {
    placement[r].set_rank(r);
    placement[r].set_worker(absl::StrCat("w", r));
  }
  return placement;
}

// A record RUNNING its first attempt on two workers.
JobRecord RunningRecord() {
  JobRecord rec(QueuedJob());
  EXPECT_TRUE(rec.Apply(JobEdit::Place(TwoRanks(), kNow)).ok());
  return rec;
}

TEST(JobRecord, PlaceRunsTheAttemptAndResetsItsProgress) {
  JobRecord rec(QueuedJob());
  rec.stop_step = 7;
  rec.ranks_done.insert(0);
  absl::StatusOr<bool> row_changed = rec.Apply(JobEdit::Place(TwoRanks(), kNow));
  ASSERT_TRUE(row_changed.ok()) << row_changed.status();
  EXPECT_TRUE(*row_changed);
  EXPECT_EQ(rec.job().state(), pp::v1::RUNNING);
  EXPECT_EQ(rec.job().placement_size(), 2);
  EXPECT_EQ(rec.job().updated_unix(), kNow);
  EXPECT_EQ(rec.stop_step, 0);
  EXPECT_TRUE(rec.ranks_done.empty());
  ASSERT_NE(rec.steps, nullptr);
  ASSERT_NE(rec.checkpoints, nullptr);
}

TEST(JobRecord, PlaceAfterAWaitPutsTheAttemptsReasonBack) {
  JobRecord rec = RunningRecord();
  ASSERT_TRUE(
      rec.Apply(JobEdit::Requeue(0, "worker lost", /*automatic=*/true, absl::InfinitePast(), kNow))
          .ok());
  ASSERT_TRUE(rec.Apply(JobEdit::Wait("needs 2 workers, 1 registered, 1 idle", kNow)).ok());
  EXPECT_TRUE(rec.waiting());
  EXPECT_EQ(rec.job().reason(), "needs 2 workers, 1 registered, 1 idle");
  ASSERT_TRUE(rec.Apply(JobEdit::Place(TwoRanks(), kNow + 1)).ok());
  EXPECT_FALSE(rec.waiting());
  EXPECT_EQ(rec.job().reason(), "worker lost");
}

TEST(JobRecord, EndFromRunningOrQueued) {
  JobRecord running = RunningRecord();
  ASSERT_TRUE(running.Apply(JobEdit::End(pp::v1::SUCCEEDED, "", kNow + 5)).ok());
  EXPECT_EQ(running.job().state(), pp::v1::SUCCEEDED);
  EXPECT_EQ(running.job().updated_unix(), kNow + 5);
  JobRecord queued(QueuedJob());
  ASSERT_TRUE(queued.Apply(JobEdit::End(pp::v1::CANCELLED, "cancelled by the user", kNow)).ok());
  EXPECT_EQ(queued.job().state(), pp::v1::CANCELLED);
  EXPECT_EQ(queued.job().reason(), "cancelled by the user");
}

TEST(JobRecord, RequeueStartsTheNextAttempt) {
  JobRecord rec = RunningRecord();
  const absl::Time not_before = absl::FromUnixSeconds(2000);
  ASSERT_TRUE(
      rec.Apply(JobEdit::Requeue(40, "rank 1 failed", /*automatic=*/true, not_before, kNow)).ok());
  EXPECT_EQ(rec.job().state(), pp::v1::QUEUED);
  EXPECT_EQ(rec.job().attempt(), 1);
  EXPECT_EQ(rec.job().restarts(), 1);
  EXPECT_EQ(rec.job().start_step(), 40);
  EXPECT_EQ(rec.job().step(), 40);
  EXPECT_EQ(rec.not_before(), not_before);
  EXPECT_TRUE(rec.verify_pending());  // from a checkpoint: verified before it is placed
  ASSERT_EQ(rec.job().restart_log_size(), 1);
  EXPECT_TRUE(rec.job().restart_log(0).automatic());
  // A drain's requeue does not count against max_restarts.
  ASSERT_TRUE(rec.Apply(JobEdit::SettleStart(40)).ok());
  ASSERT_TRUE(rec.Apply(JobEdit::Place(TwoRanks(), kNow)).ok());
  ASSERT_TRUE(
      rec.Apply(JobEdit::Requeue(0, "drained", /*automatic=*/false, absl::InfinitePast(), kNow))
          .ok());
  EXPECT_EQ(rec.job().restarts(), 1);
  EXPECT_EQ(rec.job().attempt(), 2);
  EXPECT_FALSE(rec.verify_pending());  // from scratch: nothing to verify
}

// The restart backoff doubles with automatic restarts in a row: a checkpoint committed past the
// attempt's start between two of them starts the count again; drains do not count.
TEST(JobRecord, RestartsWithoutProgressCountUntilACheckpointPastTheStart) {
  JobRecord rec = RunningRecord();
  auto fail = [&rec](int from_step, bool automatic) {
    ASSERT_TRUE(
        rec.Apply(JobEdit::Requeue(from_step, "lost", automatic, absl::InfinitePast(), kNow)).ok());
    if (rec.verify_pending()) ASSERT_TRUE(rec.Apply(JobEdit::SettleStart(from_step)).ok());
    ASSERT_TRUE(rec.Apply(JobEdit::Place(TwoRanks(), kNow)).ok());
  };
  fail(0, true);
  fail(0, true);
  EXPECT_EQ(rec.restarts_without_progress(), 2);
  fail(0, false);  // a drain
  EXPECT_EQ(rec.restarts_without_progress(), 2);
  ASSERT_TRUE(rec.Apply(JobEdit::Checkpoint(10)).ok());  // progress
  EXPECT_EQ(rec.restarts_without_progress(), 0);
  fail(10, true);
  EXPECT_EQ(rec.restarts_without_progress(), 1);
  ASSERT_TRUE(rec.Apply(JobEdit::Checkpoint(10)).ok());  // its own start: no progress
  EXPECT_EQ(rec.restarts_without_progress(), 1);
  EXPECT_EQ(rec.job().restarts(), 3);
}

TEST(JobRecord, SettleStartFallsBackAndSaysWhetherTheRowChanged) {
  JobRecord rec = RunningRecord();
  ASSERT_TRUE(rec.Apply(JobEdit::Requeue(40, "x", false, absl::InfinitePast(), kNow)).ok());
  absl::StatusOr<bool> changed = rec.Apply(JobEdit::SettleStart(30));  // step 40 was damaged
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  EXPECT_EQ(rec.job().start_step(), 30);
  EXPECT_EQ(rec.job().restart_log(0).from_step(), 30);
  EXPECT_FALSE(rec.verify_pending());
  // Settled once: a second settle is illegal.
  EXPECT_EQ(rec.Apply(JobEdit::SettleStart(30)).status().code(), absl::StatusCode::kInternal);

  JobRecord same = RunningRecord();
  ASSERT_TRUE(same.Apply(JobEdit::Requeue(40, "x", false, absl::InfinitePast(), kNow)).ok());
  changed = same.Apply(JobEdit::SettleStart(40));
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);  // verified as it was: nothing to store
}

TEST(JobRecord, ResumeQueuesAnEndedJobOnItsNewSpec) {
  JobRecord rec = RunningRecord();
  ASSERT_TRUE(rec.Apply(JobEdit::Checkpoint(50)).ok());
  ASSERT_TRUE(rec.Apply(JobEdit::End(pp::v1::FAILED, "boom", kNow)).ok());
  pp::v1::JobSpec spec = rec.job().spec();
  spec.mutable_train()->set_steps(200);
  ASSERT_TRUE(rec.Apply(JobEdit::Resume(20, "resumed from step 20", spec, 9, kNow + 1)).ok());
  EXPECT_EQ(rec.job().state(), pp::v1::QUEUED);
  EXPECT_EQ(rec.job().spec().train().steps(), 200);
  EXPECT_EQ(rec.job().last_checkpoint_step(), 20);  // a resume moves it back
  EXPECT_EQ(rec.job().train_windows(), 9);
  EXPECT_EQ(rec.job().placement_size(), 0);
  EXPECT_EQ(rec.job().attempt(), 1);
  EXPECT_EQ(rec.job().reason(), "resumed from step 20");
  EXPECT_FALSE(rec.verify_pending());
  EXPECT_EQ(rec.not_before(), absl::InfinitePast());
}

TEST(JobRecord, CheckpointOnlyMovesForward) {
  JobRecord rec = RunningRecord();
  absl::StatusOr<bool> changed = rec.Apply(JobEdit::Checkpoint(10));
  ASSERT_TRUE(changed.ok());
  EXPECT_TRUE(*changed);
  changed = rec.Apply(JobEdit::Checkpoint(5));
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
  EXPECT_EQ(rec.job().last_checkpoint_step(), 10);
  // A rank's last checkpoint may be committed after another rank ended the job.
  ASSERT_TRUE(rec.Apply(JobEdit::End(pp::v1::SUCCEEDED, "", kNow)).ok());
  changed = rec.Apply(JobEdit::Checkpoint(20));
  ASSERT_TRUE(changed.ok());
  EXPECT_TRUE(*changed);
}

TEST(JobRecord, BackoffHoldsAQueuedJobWithoutAStoredChange) {
  JobRecord rec(QueuedJob());
  const absl::Time until = absl::FromUnixSeconds(5000);
  absl::StatusOr<bool> changed = rec.Apply(JobEdit::Backoff(until));
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
  EXPECT_EQ(rec.not_before(), until);
}

// Each illegal edit: Internal, naming the job and the edit, and the record unchanged.
void ExpectRefused(JobRecord& rec, const JobEdit& edit, const std::string& name) {
  const pp::v1::Job before = rec.job();
  const bool verify_pending = rec.verify_pending();
  absl::StatusOr<bool> applied = rec.Apply(edit);
  ASSERT_FALSE(applied.ok()) << name;
  EXPECT_EQ(applied.status().code(), absl::StatusCode::kInternal) << name;
  EXPECT_THAT(applied.status().message(), HasSubstr("j-1")) << name;
  EXPECT_THAT(applied.status().message(), HasSubstr(JobEditName(edit.kind))) << name;
  EXPECT_EQ(rec.job().SerializeAsString(), before.SerializeAsString()) << name;
  EXPECT_EQ(rec.verify_pending(), verify_pending) << name;
}

TEST(JobRecord, IllegalEditsChangeNothing) {
  JobRecord running = RunningRecord();
  ExpectRefused(running, JobEdit::Place(TwoRanks(), kNow), "place a running job");
  ExpectRefused(running, JobEdit::Resume(0, "r", running.job().spec(), 0, kNow),
                "resume a running job");
  ExpectRefused(running, JobEdit::Wait("w", kNow), "a running job waits");
  ExpectRefused(running, JobEdit::Backoff(absl::Now()), "back off a running job");
  ExpectRefused(running, JobEdit::End(pp::v1::QUEUED, "", kNow), "end as QUEUED");

  JobRecord queued(QueuedJob());
  ExpectRefused(queued, JobEdit::End(pp::v1::SUCCEEDED, "", kNow), "a queued job succeeds");
  ExpectRefused(queued, JobEdit::Requeue(0, "r", true, absl::InfinitePast(), kNow),
                "requeue a queued job");
  ExpectRefused(queued, JobEdit::SettleStart(0), "settle a job with nothing to verify");
  ExpectRefused(queued, JobEdit::Place({}, kNow), "place on no workers");

  JobRecord ended = RunningRecord();
  ASSERT_TRUE(ended.Apply(JobEdit::End(pp::v1::CANCELLED, "c", kNow)).ok());
  ExpectRefused(ended, JobEdit::End(pp::v1::FAILED, "f", kNow), "end an ended job");
  ExpectRefused(ended, JobEdit::Place(TwoRanks(), kNow), "place an ended job");
  ExpectRefused(ended, JobEdit::Requeue(0, "r", true, absl::InfinitePast(), kNow),
                "restart an ended job");
}

TEST(CalibrationRun, CompletesOnceEveryRankAnsweredInRankOrder) {
  CalibrationRun run(/*attempt=*/2, TwoRanks(), "key", /*serial=*/7, absl::FromUnixSeconds(10));
  EXPECT_EQ(run.attempt(), 2);
  EXPECT_EQ(run.serial(), 7);
  EXPECT_FALSE(run.Answer(1, "w1", pp::v1::RankCalibration(), absl::FromUnixSeconds(11)));
  std::optional<pp::v1::Calibration> calibration =
      run.Answer(0, "w0", pp::v1::RankCalibration(), absl::FromUnixSeconds(13));
  ASSERT_TRUE(calibration.has_value());
  ASSERT_EQ(calibration->ranks_size(), 2);
  EXPECT_EQ(calibration->ranks(0).worker(), "w0");
  EXPECT_EQ(calibration->ranks(1).rank(), 1);
  EXPECT_EQ(calibration->seconds(), 3);
  EXPECT_TRUE(SameWorkers(*calibration, TwoRanks()));
  std::vector<pp::v1::RankPlacement> swapped = TwoRanks();
  std::swap(swapped[0], swapped[1]);
  EXPECT_FALSE(SameWorkers(*calibration, swapped));
}

TEST(CalibrationCache, FindsWhatWasPut) {
  CalibrationCache cache;
  EXPECT_EQ(cache.Find("k"), nullptr);
  pp::v1::Calibration calibration;
  calibration.set_seconds(4);
  cache.Put("k", calibration);
  ASSERT_NE(cache.Find("k"), nullptr);
  EXPECT_EQ(cache.Find("k")->seconds(), 4);
  const int64_t first = cache.NextSerial();
  EXPECT_LT(first, cache.NextSerial());
}

}  // namespace
}  // namespace pp::coordinator
