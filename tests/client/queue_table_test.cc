// `ppctl queue`'s table (client/queue_table.h) from jobs as ListJobs answers them.
#include "client/queue_table.h"

#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pp::client {
namespace {

using ::testing::ElementsAre;

constexpr double kNow = 1'700'000'000;

// A job of `pipeline` x `data` ranks; the scheduling fields are set by each test.
pp::v1::Job MakeJob(const std::string& id, pp::v1::JobState state, int pipeline = 2, int data = 1) {
  pp::v1::Job job;
  job.set_id(id);
  job.set_state(state);
  job.mutable_spec()->mutable_parallel()->set_pipeline(pipeline);
  job.mutable_spec()->mutable_parallel()->set_data(data);
  return job;
}

pp::v1::Job Queued(const std::string& id, int position, const std::string& reason = "waiting") {
  pp::v1::Job job = MakeJob(id, pp::v1::QUEUED);
  job.set_queue_position(position);
  job.set_reason(reason);
  job.set_queued_unix(kNow - 60);
  return job;
}

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

// The cells of column `name` of the table's rows, in order, cut at the header's offsets.
std::vector<std::string> Column(const std::string& text, const std::string& name) {
  static const char* const kHeader[] = {"POS",     "JOB",     "PRIORITY",  "OWNER",
                                        "WORKERS", "WAITING", "EST START", "REASON"};
  const std::vector<std::string> lines = Lines(text);
  if (lines.empty() || !absl::StartsWith(lines[0], "POS ")) return {};
  const auto column = std::find(std::begin(kHeader), std::end(kHeader), name);
  if (column == std::end(kHeader)) return {};
  const size_t begin = lines[0].find(name);
  const size_t next =
      column + 1 == std::end(kHeader) ? std::string::npos : lines[0].find(*(column + 1), begin);
  std::vector<std::string> cells;
  for (size_t row = 1; row + 1 < lines.size(); ++row) {
    const std::string line = lines[row] + std::string(begin, ' ');
    cells.emplace_back(absl::StripAsciiWhitespace(
        line.substr(begin, next == std::string::npos ? std::string::npos : next - begin)));
  }
  return cells;
}

// A QUEUED job at `position` that waited `waited` seconds and needs `pipeline` x `data` workers.
pp::v1::Job Waiting(const std::string& id, int position, double waited, int pipeline, int data,
                    const std::string& owner, const std::string& reason) {
  pp::v1::Job job = MakeJob(id, pp::v1::QUEUED, pipeline, data);
  job.set_queue_position(position);
  job.set_queued_unix(kNow - waited);
  job.set_owner(owner);
  job.set_reason(reason);
  job.set_priority(100);
  return job;
}

// The example of docs/cli.md "ppctl queue".
TEST(QueueTableTest, ASharedClusterReadsAsDocumented) {
  pp::v1::Job big =
      Waiting("big-7", 1, 42, 4, 2, "alice",
              "needs 8 workers, 12 registered, 2 idle; 6 workers being freed by preemption");
  big.mutable_spec()->set_priority("high");
  big.set_priority(200);
  big.set_estimated_start_seconds(40);
  pp::v1::Job tiny =
      Waiting("tiny-3", 2, 725, 2, 1, "bob", "owner bob uses 6 of 6 workers; the job needs 2");
  tiny.mutable_spec()->set_priority("normal");
  tiny.set_estimated_start_seconds(390);
  pp::v1::Job sweep =
      Waiting("sweep-9", 3, 3725, 4, 1, "carol", "needs 4 workers, 12 registered, 2 idle");
  // ListJobs' order: submission.
  std::vector<pp::v1::Job> jobs = {MakeJob("sweep-1", pp::v1::RUNNING, 4),
                                   MakeJob("old-2", pp::v1::SUCCEEDED, 8),
                                   tiny,
                                   MakeJob("bob-4", pp::v1::RUNNING, 2, 2),
                                   MakeJob("bob-5", pp::v1::RUNNING, 2),
                                   big,
                                   sweep};
  EXPECT_EQ(QueueTable(jobs, kNow),
            "POS  JOB                      PRIORITY       OWNER        WORKERS WAITING  EST START "
            "REASON\n"
            "1    big-7                    high (200)     alice        8       0:42     ~0:40     "
            "needs 8 workers, 12 registered, 2 idle; 6 workers being freed by preemption\n"
            "2    tiny-3                   normal (100)   bob          2       12:05    ~6:30     "
            "owner bob uses 6 of 6 workers; the job needs 2\n"
            "3    sweep-9                  default (100)  carol        4       1:02:05  unknown   "
            "needs 4 workers, 12 registered, 2 idle\n"
            "running: 3 jobs on 10 workers\n");
}

TEST(QueueTableTest, AJobThatWaitsForNothingStartsNow) {
  pp::v1::Job free = Queued("free", 1, "");
  EXPECT_EQ(Lines(QueueTable({free}, kNow))[1],
            "1    free                     default (0)    -            2       1:00     now");
}

TEST(QueueTableTest, OrdersByPositionAndPutsUnknownPositionsLastInSubmissionOrder) {
  // ListJobs answers in submission order: a, b, c, d, e.
  std::vector<pp::v1::Job> jobs = {Queued("a", 0), Queued("b", 3), Queued("c", 0), Queued("d", 1),
                                   Queued("e", 2)};
  const std::string text = QueueTable(jobs, kNow);
  EXPECT_THAT(Column(text, "JOB"), ElementsAre("d", "e", "b", "a", "c")) << text;
  EXPECT_THAT(Column(text, "POS"), ElementsAre("1", "2", "3", "-", "-"));
}

TEST(QueueTableTest, OnlyQueuedJobsAreRows) {
  std::vector<pp::v1::Job> jobs = {MakeJob("r", pp::v1::RUNNING), Queued("q", 1),
                                   MakeJob("f", pp::v1::FAILED), MakeJob("c", pp::v1::CANCELLED)};
  EXPECT_THAT(Column(QueueTable(jobs, kNow), "JOB"), ElementsAre("q"));
}

TEST(QueueTableTest, PriorityNamesTheClassOrDefaultWithItsValue) {
  pp::v1::Job low = Queued("low", 1);
  low.mutable_spec()->set_priority("low");
  low.set_priority(-10);
  EXPECT_THAT(Column(QueueTable({low, Queued("plain", 2)}, kNow), "PRIORITY"),
              ElementsAre("low (-10)", "default (0)"));
}

TEST(QueueTableTest, OwnerIsADashWithoutAuthentication) {
  pp::v1::Job owned = Queued("owned", 1);
  owned.set_owner("carol");
  EXPECT_THAT(Column(QueueTable({owned, Queued("anon", 2)}, kNow), "OWNER"),
              ElementsAre("carol", "-"));
}

TEST(QueueTableTest, WaitingCountsFromQueuedUnixAndIsADashWhenUnknown) {
  pp::v1::Job long_ago = Queued("long-ago", 2);
  long_ago.set_queued_unix(kNow - 2 * 3600 - 3 * 60 - 4.4);
  pp::v1::Job unknown = Queued("unknown", 3);
  unknown.set_queued_unix(0);
  EXPECT_THAT(Column(QueueTable({Queued("known", 1), long_ago, unknown}, kNow), "WAITING"),
              ElementsAre("1:00", "2:03:04", "-"));
}

TEST(QueueTableTest, EstimatedStart) {
  pp::v1::Job estimated = Queued("estimated", 3);
  estimated.set_estimated_start_seconds(4 * 60 + 10);
  pp::v1::Job free = Queued("free", 1, "");
  pp::v1::Job behind = Queued("behind", 2, "");  // no reason, but a job goes first
  pp::v1::Job waits = Queued("waits", 4, "owner bob uses 6 of 6 workers; the job needs 2");
  pp::v1::Job unplaced = Queued("unplaced", 0, "waiting for 2 idle workers");
  const std::string text = QueueTable({estimated, free, behind, waits, unplaced}, kNow);
  EXPECT_THAT(Column(text, "JOB"), ElementsAre("free", "behind", "estimated", "waits", "unplaced"));
  EXPECT_THAT(Column(text, "EST START"),
              ElementsAre("now", "unknown", "~4:10", "unknown", "unknown"));
  EXPECT_THAT(Column(text, "REASON"),
              ElementsAre("", "", "waiting", "owner bob uses 6 of 6 workers; the job needs 2",
                          "waiting for 2 idle workers"));
}

TEST(QueueTableTest, EmptyQueueStillSaysWhatRuns) {
  EXPECT_EQ(QueueTable({}, kNow), "no queued jobs\nrunning: 0 jobs on 0 workers\n");
  std::vector<pp::v1::Job> jobs = {MakeJob("a", pp::v1::RUNNING, 2),
                                   MakeJob("b", pp::v1::RUNNING, 4, 2),
                                   MakeJob("c", pp::v1::SUCCEEDED, 2)};
  EXPECT_EQ(QueueTable(jobs, kNow), "no queued jobs\nrunning: 2 jobs on 10 workers\n");
}

TEST(QueueTableTest, RunningLineCountsOneJobAndOneWorkerInTheSingular) {
  EXPECT_EQ(QueueTable({MakeJob("a", pp::v1::RUNNING, 1)}, kNow),
            "no queued jobs\nrunning: 1 job on 1 worker\n");
}

}  // namespace
}  // namespace pp::client
