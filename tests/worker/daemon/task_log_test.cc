// The worker's per-job log buffer (worker/daemon/task_log.h): seqs, reads after a seq, the bounds
// on lines, bytes, line length and jobs, and the dropped counts a reader is told.
#include "worker/daemon/task_log.h"

#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pp::daemon {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;

pp::v1::ReadTaskLogResponse Read(TaskLog& log, const std::string& job, int64_t after_seq = 0,
                                 int max_lines = 0) {
  pp::v1::ReadTaskLogRequest request;
  request.set_job_id(job);
  request.set_after_seq(after_seq);
  request.set_max_lines(max_lines);
  absl::StatusOr<pp::v1::ReadTaskLogResponse> response = log.Read(request);
  EXPECT_TRUE(response.ok()) << response.status();
  return response.value_or(pp::v1::ReadTaskLogResponse());
}

TEST(TaskLogTest, LinesGetSeqsFromOnePerJobAndReadsPageAfterASeq) {
  TaskLog log;
  const absl::Time t = absl::FromUnixSeconds(1700000000);
  EXPECT_EQ(log.Append("a", 0, 1, "one", t), 1);
  EXPECT_EQ(log.Append("b", 2, 0, "other job", t), 1);
  EXPECT_EQ(log.Append("a", 1, 1, "two\nthree", t), 3) << "a newline makes two lines";
  pp::v1::ReadTaskLogResponse all = Read(log, "a");
  ASSERT_EQ(all.lines_size(), 3);
  EXPECT_EQ(all.dropped(), 0);
  EXPECT_EQ(all.lines(0).text(), "one");
  EXPECT_EQ(all.lines(0).attempt(), 0);
  EXPECT_EQ(all.lines(0).rank(), 1);
  EXPECT_EQ(all.lines(0).time_unix(), 1700000000.0);
  EXPECT_EQ(all.lines(2).seq(), 3);
  EXPECT_EQ(all.lines(2).attempt(), 1);
  EXPECT_EQ(all.lines(2).text(), "three");
  pp::v1::ReadTaskLogResponse page = Read(log, "a", /*after_seq=*/1, /*max_lines=*/1);
  ASSERT_EQ(page.lines_size(), 1);
  EXPECT_EQ(page.lines(0).text(), "two");
  EXPECT_EQ(Read(log, "a", 3).lines_size(), 0) << "nothing after the last line";
  EXPECT_EQ(Read(log, "unknown").lines_size(), 0);
  EXPECT_EQ(Read(log, "unknown").dropped(), 0);
}

TEST(TaskLogTest, TheOldestLinesGoFirstAndReadersAreToldHowManyTheyMissed) {
  TaskLog log;  // 4096 lines per job
  for (int i = 1; i <= 5000; ++i) log.Append("j", 0, 0, absl::StrCat("line ", i));
  pp::v1::ReadTaskLogResponse first = Read(log, "j", 0, 10000);
  ASSERT_EQ(first.lines_size(), 4096);
  EXPECT_EQ(first.lines(0).seq(), 905);
  EXPECT_EQ(first.lines(0).text(), "line 905");
  EXPECT_EQ(first.dropped(), 904);
  EXPECT_EQ(Read(log, "j", 900).dropped(), 4) << "only the dropped lines after after_seq count";
  EXPECT_EQ(Read(log, "j", 904).dropped(), 0);
  EXPECT_EQ(Read(log, "j", 0, 0).lines_size(), 1000) << "max_lines 0 means 1000";
}

TEST(TaskLogTest, AJobKeepsAtMostAMebibyteOfText) {
  TaskLog log;
  const std::string text(4000, 'x');
  for (int i = 0; i < 300; ++i) log.Append("j", 0, 0, text);
  pp::v1::ReadTaskLogResponse all = Read(log, "j", 0, 10000);
  EXPECT_EQ(all.lines_size(), (1 << 20) / 4000);
  EXPECT_EQ(all.dropped() + all.lines_size(), 300);
  EXPECT_EQ(all.lines(all.lines_size() - 1).seq(), 300);
}

TEST(TaskLogTest, ALongLineIsCutOnACharacterWithAMarkerAndBadBytesBecomeQuestionMarks) {
  TaskLog log;
  log.Append("j", 0, 0, std::string(10000, 'x'));
  const std::string cut = Read(log, "j").lines(0).text();
  EXPECT_LE(cut.size(), 4096u);
  EXPECT_GT(cut.size(), 4000u);
  const size_t kept = cut.find(' ');
  EXPECT_THAT(cut, EndsWith(absl::StrCat(" [... ", 10000 - kept, " bytes cut]")));

  // 3-byte characters: no cut may split one.
  std::string euros;
  for (int i = 0; i < 2000; ++i) euros += "\xE2\x82\xAC";
  const std::string line = BoundedLine(euros, 4096);
  const size_t body = line.find(' ');
  EXPECT_EQ(body % 3, 0u) << line.substr(body);
  EXPECT_LE(line.size(), 4096u);

  EXPECT_EQ(BoundedLine("ok \xFF\xC3(\xE2\x82 end", 100),
            "ok ?"
            "?(?"
            "? end");  // split: "??(" would read as a trigraph
  EXPECT_EQ(BoundedLine("caf\xC3\xA9", 100), "caf\xC3\xA9");
}

TEST(TaskLogTest, OnlyTheSixteenMostRecentlyWrittenJobsKeepTheirLines) {
  TaskLog log;
  for (int job = 0; job < 17; ++job) {
    for (int i = 0; i < 3; ++i) log.Append(absl::StrCat("job-", job), 0, 0, "x");
    if (job == 15) log.Append("job-0", 0, 0, "job-0 written again");  // job-1 is now the oldest
  }
  EXPECT_EQ(Read(log, "job-0").lines_size(), 4);
  pp::v1::ReadTaskLogResponse evicted = Read(log, "job-1");
  EXPECT_EQ(evicted.lines_size(), 0);
  EXPECT_EQ(evicted.dropped(), 3) << "an evicted job still says what it lost";
  for (int job = 2; job < 17; ++job)
    EXPECT_EQ(Read(log, absl::StrCat("job-", job)).lines_size(), 3);
  EXPECT_EQ(log.Append("job-1", 0, 0, "back"), 4) << "seqs are never reused";
}

TEST(TaskLogTest, ForgetsJobsBeyondItsBoundEntirely) {
  TaskLog log(TaskLogLimits{.max_jobs = 2, .max_known_jobs = 3});
  for (int job = 0; job < 4; ++job) log.Append(absl::StrCat("job-", job), 0, 0, "x");
  EXPECT_EQ(Read(log, "job-0").dropped(), 0) << "forgotten: as if never seen";
  EXPECT_EQ(Read(log, "job-1").dropped(), 1) << "emptied, counter kept";
  EXPECT_EQ(Read(log, "job-3").lines_size(), 1);
}

TEST(TaskLogTest, RefusesBadReads) {
  TaskLog log;
  for (auto [after, max] : std::vector<std::pair<int64_t, int>>{{0, -1}, {0, 10001}, {-1, 0}}) {
    pp::v1::ReadTaskLogRequest request;
    request.set_job_id("j");
    request.set_after_seq(after);
    request.set_max_lines(max);
    absl::StatusOr<pp::v1::ReadTaskLogResponse> response = log.Read(request);
    EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument) << after << " " << max;
  }
}

TEST(TaskLogTest, AWriterKeepsEachLineAndEchoesItWithThePrefix) {
  TaskLog log;
  std::ostringstream echo;
  TaskLogWriter writer(&log, "j", 2, 3, &echo);
  writer.Line("task failed: INTERNAL: job j rank 3: boom\nsecond line");
  EXPECT_EQ(echo.str(),
            "ppworker: job j rank 3: task failed: INTERNAL: job j rank 3: boom\n"
            "ppworker: job j rank 3: second line\n");
  pp::v1::ReadTaskLogResponse all = Read(log, "j");
  ASSERT_EQ(all.lines_size(), 2);
  EXPECT_EQ(all.lines(0).attempt(), 2);
  EXPECT_EQ(all.lines(0).rank(), 3);
  EXPECT_THAT(all.lines(0).text(), HasSubstr("boom"));
  TaskLogWriter(nullptr, "j", 0, 0, &echo).Line("stderr only");  // no log: nothing kept
  EXPECT_EQ(Read(log, "j").lines_size(), 2);
}

TEST(TaskLogTest, ConcurrentWritersGetDistinctSeqs) {
  TaskLog log;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&log, t] {
      for (int i = 0; i < 500; ++i) log.Append("j", 0, t, "x");
    });
  }
  for (std::thread& thread : threads) thread.join();
  pp::v1::ReadTaskLogResponse all = Read(log, "j", 0, 10000);
  ASSERT_EQ(all.lines_size(), 2000);
  for (int i = 0; i < all.lines_size(); ++i) EXPECT_EQ(all.lines(i).seq(), i + 1);
}

}  // namespace
}  // namespace pp::daemon
