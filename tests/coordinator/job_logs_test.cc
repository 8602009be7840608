// GetJobLogs' pure parts (coordinator/job_logs.h): the page token, the request checks and the
// merge of the workers' answers.
#include "coordinator/job_logs.h"

#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pp::coordinator {
namespace {

using ::testing::ElementsAre;

pp::v1::TaskLogLine Line(int64_t seq, int rank, const std::string& text) {
  pp::v1::TaskLogLine line;
  line.set_seq(seq);
  line.set_rank(rank);
  line.set_text(text);
  return line;
}

WorkerLog Answer(const std::string& worker, std::vector<pp::v1::TaskLogLine> lines,
                 int64_t dropped = 0) {
  WorkerLog log{worker, {}};
  for (auto& line : lines) *log.answer.add_lines() = std::move(line);
  log.answer.set_dropped(dropped);
  return log;
}

std::vector<std::string> Texts(const pp::v1::GetJobLogsResponse& page) {
  std::vector<std::string> texts;
  for (const pp::v1::JobLogLine& line : page.lines()) {
    texts.push_back(absl::StrCat(line.worker(), ":", line.seq(), ":", line.text()));
  }
  return texts;
}

TEST(JobLogsTokenTest, RoundTripsAnyWorkerNames) {
  const LogPositions positions = {{"w0", 12}, {"host a:5", 3}, {"odd\nname\x01", 1}, {"z", 0}};
  const std::string token = EncodeLogToken(positions);
  EXPECT_EQ(token.find_first_of(" \n"), std::string::npos) << "one opaque word";
  absl::StatusOr<LogPositions> decoded = DecodeLogToken(token);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, positions);
  absl::StatusOr<LogPositions> empty = DecodeLogToken(EncodeLogToken({}));
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(JobLogsTokenTest, RefusesWhatItDidNotHandOut) {
  // Tokens of the right shape around payloads EncodeLogToken never writes.
  auto token = [](const std::string& payload) {
    return absl::StrCat("logs-", absl::WebSafeBase64Escape(payload));
  };
  for (const std::string& bad :
       {std::string("garbage"), std::string("step-5"), std::string("logs-!!"), token("v2"),
        token("w0 5"), token("v1\n-1 w0"), token("v1\nfive w0"), token("v1\n1 "),
        token("v1\n1 w0\n2 w0"), token("v1\n1 w1\n2 w0"), token("v1\n1 bad\\q")}) {
    pp::v1::GetJobLogsRequest request;
    request.set_job_id("j");
    request.set_page_token(bad);
    absl::StatusOr<LogsQuery> query = CheckLogsRequest(request);
    EXPECT_EQ(query.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(query.status().message(), "page_token: not a token GetJobLogs handed out") << bad;
  }
}

TEST(JobLogsRequestTest, DefaultsAndBounds) {
  pp::v1::GetJobLogsRequest request;
  request.set_job_id("j");
  absl::StatusOr<LogsQuery> query = CheckLogsRequest(request);
  ASSERT_TRUE(query.ok());
  EXPECT_EQ(query->max_lines, 1000);
  EXPECT_FALSE(query->rank.has_value());
  request.set_rank(0);
  request.set_max_lines(10000);
  query = CheckLogsRequest(request);
  ASSERT_TRUE(query.ok());
  EXPECT_EQ(query->rank, 0);
  EXPECT_EQ(query->max_lines, 10000);
  for (auto [rank, max] : std::vector<std::pair<int, int>>{{0, -1}, {0, 10001}, {-1, 0}}) {
    request.set_rank(rank);
    request.set_max_lines(max);
    EXPECT_EQ(CheckLogsRequest(request).status().code(), absl::StatusCode::kInvalidArgument)
        << rank << " " << max;
  }
}

TEST(JobLogsMergeTest, WorkersInNameOrderEachOldestFirstCappedAndResumable) {
  LogsQuery query;
  query.max_lines = 3;
  std::vector<WorkerLog> answers = {
      Answer("w1", {Line(1, 1, "b1"), Line(2, 1, "b2")}, /*dropped=*/4),
      Answer("w0", {Line(8, 0, "a8"), Line(9, 0, "a9")}, /*dropped=*/7),
  };
  pp::v1::GetJobLogsResponse page = MergeJobLogs(answers, query);
  EXPECT_THAT(Texts(page), ElementsAre("w0:8:a8", "w0:9:a9", "w1:1:b1"));
  EXPECT_EQ(page.dropped(), 11);
  absl::StatusOr<LogPositions> next = DecodeLogToken(page.next_page_token());
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(*next, (LogPositions{{"w0", 9}, {"w1", 1}}));

  // The page filled on w0's last line: w1 is not reached, its dropped lines count next time.
  query.max_lines = 2;
  page = MergeJobLogs(answers, query);
  EXPECT_THAT(Texts(page), ElementsAre("w0:8:a8", "w0:9:a9"));
  EXPECT_EQ(page.dropped(), 7);
  EXPECT_EQ(*DecodeLogToken(page.next_page_token()), (LogPositions{{"w0", 9}}));
}

TEST(JobLogsMergeTest, APageStaysUnderTwoMebibytesAndTheNextGoesOnFromThere) {
  std::vector<WorkerLog> answers;
  for (const char* worker : {"w0", "w1"}) {
    std::vector<pp::v1::TaskLogLine> lines;
    for (int seq = 1; seq <= 1000; ++seq) lines.push_back(Line(seq, 0, std::string(4000, 'x')));
    answers.push_back(Answer(worker, std::move(lines)));
  }
  LogsQuery query;
  query.max_lines = kMaxLogLines;
  pp::v1::GetJobLogsResponse page = MergeJobLogs(answers, query);
  EXPECT_EQ(page.lines_size(), kMaxLogPageBytes / 4002);
  EXPECT_LE(page.ByteSizeLong(), 4u << 20) << "under gRPC's default receive limit";
  EXPECT_EQ(*DecodeLogToken(page.next_page_token()), (LogPositions{{"w0", page.lines_size()}}));
}

TEST(JobLogsMergeTest, ARankFilterReadsPastOtherRanksAndKeepsUnansweredPositions) {
  LogsQuery query;
  query.rank = 1;
  query.positions = {{"w0", 2}, {"gone-quiet", 40}};
  std::vector<WorkerLog> answers = {
      Answer("w0", {Line(3, 0, "r0"), Line(4, 1, "r1 failed"), Line(5, 0, "r0 again")}),
  };
  pp::v1::GetJobLogsResponse page = MergeJobLogs(answers, query);
  EXPECT_THAT(Texts(page), ElementsAre("w0:4:r1 failed"));
  EXPECT_EQ(page.lines(0).rank(), 1);
  EXPECT_EQ(*DecodeLogToken(page.next_page_token()), (LogPositions{{"gone-quiet", 40}, {"w0", 5}}));
  // Nothing new: the same token again, so a reader knows it has everything.
  query.positions = *DecodeLogToken(page.next_page_token());
  EXPECT_EQ(MergeJobLogs({Answer("w0", {})}, query).next_page_token(), page.next_page_token());
}

}  // namespace
}  // namespace pp::coordinator
