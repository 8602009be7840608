// ListJobs pages (coordinator/list_page.h) bounded by bytes as well as by count: what the byte
// arithmetic says is what protobuf encodes, 10,000 jobs with large specs among them list page by
// page with every response within the budget, and a token whose job expired still leads on.
#include "coordinator/list_page.h"

#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/spec_bounds.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pp/v1/coordinator.pb.h"

namespace pp::coordinator {
namespace {

using ::testing::HasSubstr;

std::vector<std::string> Ids(int n) {
  std::vector<std::string> ids;
  for (int i = 1; i <= n; ++i) ids.push_back(absl::StrCat("job-", i));
  return ids;
}

// The response a page of `jobs` makes, as JobManager::List builds it.
pp::v1::ListJobsResponse Response(const std::vector<pp::v1::Job>& jobs, const ListPage& page) {
  pp::v1::ListJobsResponse response;
  for (size_t i = page.begin; i < page.end; ++i) *response.add_jobs() = jobs[i];
  response.set_next_page_token(page.next_page_token);
  return response;
}

TEST(ListPageTest, FieldBytesAreWhatProtobufEncodes) {
  for (size_t bytes : {1, 127, 128, 16383, 16384, 1 << 20, 3 << 20}) {  // 0: not encoded
    pp::v1::ListJobsResponse response;
    response.set_next_page_token(std::string(bytes, 't'));
    EXPECT_EQ(FieldBytes(bytes), response.ByteSizeLong()) << bytes;
  }
  pp::v1::Job job;
  job.mutable_spec()->mutable_parallel()->set_schedule_file(std::string(1 << 20, ' '));
  pp::v1::ListJobsResponse response;
  *response.add_jobs() = job;
  EXPECT_EQ(FieldBytes(job.ByteSizeLong()), response.ByteSizeLong());
  EXPECT_EQ(FieldBytes(SIZE_MAX), SIZE_MAX);  // saturates
}

TEST(ListPageTest, APageEndsBeforeItsBudgetAndHoldsAtLeastOneItem) {
  const std::vector<std::string> order = Ids(10);
  const auto bytes = [](size_t) -> size_t { return 400; };
  absl::StatusOr<ListPage> page = SelectPage(order, 0, "", bytes, 1000);
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(page->begin, 0u);
  EXPECT_EQ(page->end, 2u);  // a third item, with the token, would pass 1000 bytes
  ASSERT_FALSE(page->next_page_token.empty());
  page = SelectPage(order, 0, page->next_page_token, bytes, 1000);
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->begin, 2u);
  // An item over the whole budget still makes a page of its own: listing always moves on.
  const auto huge = [](size_t) -> size_t { return 5000; };
  page = SelectPage(order, 0, "", huge, 1000);
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->end, 1u);
  // The count still bounds a page of small items, and the last page has no token.
  page = SelectPage(order, 3, "", [](size_t) -> size_t { return 1; });
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->end, 3u);
  page = SelectPage(order, 0, "", [](size_t) -> size_t { return 1; });
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->end, 10u);
  EXPECT_TRUE(page->next_page_token.empty());
}

// The acceptance of issue 36: 10,000 jobs, one in fifty with a spec at the byte cap, list within
// gRPC's 4 MiB message limit on every page, each job once and in order.
TEST(ListPageTest, TenThousandJobsListWithinTheMessageLimit) {
  constexpr int kJobs = 10000;
  const std::vector<std::string> order = Ids(kJobs);
  std::vector<pp::v1::Job> jobs(kJobs);
  const std::string large(common::kMaxSpecBytes - 64, ' ');
  for (int i = 0; i < kJobs; ++i) {
    jobs[i].set_id(order[i]);
    jobs[i].set_reason(std::string(i % 2000, 'r'));
    if (i % 50 == 0) jobs[i].mutable_spec()->mutable_parallel()->set_schedule_file(large);
  }
  std::vector<std::string> listed;
  std::string token;
  int pages = 0;
  do {
    absl::StatusOr<ListPage> page = SelectPage(
        order, kMaxPageSize, token, [&](size_t i) { return FieldBytes(jobs[i].ByteSizeLong()); });
    ASSERT_TRUE(page.ok()) << page.status();
    ASSERT_GT(page->end, page->begin);
    const pp::v1::ListJobsResponse response = Response(jobs, *page);
    ASSERT_LE(response.ByteSizeLong(), kMaxPageBytes) << "page " << pages;
    for (const pp::v1::Job& job : response.jobs()) listed.push_back(job.id());
    token = page->next_page_token;
    ASSERT_LT(++pages, kJobs) << "pages must end";
  } while (!token.empty());
  EXPECT_EQ(listed, order);
  EXPECT_GE(pages, kJobs / 50) << "no two large specs fit one page";
}

// Jobs expire (coordinator/retention.h): a token naming one that went since leads to the first
// job numbered after it; a token numbered past the newest job was never handed out.
TEST(ListPageTest, ATokenWhoseJobExpiredLeadsToTheNextJob) {
  std::vector<std::string> order = Ids(6);
  const auto small = [](size_t) -> size_t { return 10; };
  absl::StatusOr<ListPage> first = SelectPage(order, 2, "", small);
  ASSERT_TRUE(first.ok());
  order.erase(order.begin() + 1, order.begin() + 3);  // job-2 (the token's) and job-3 expire
  absl::StatusOr<ListPage> next = SelectPage(order, 2, first->next_page_token, small);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(order[next->begin], "job-4");
  for (const std::string& id : {std::string("job-7"), std::string("no-number")}) {
    absl::StatusOr<ListPage> refused =
        SelectPage(order, 2, absl::WebSafeBase64Escape("after:" + id), small);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << id;
    EXPECT_THAT(refused.status().message(), HasSubstr("page_token: names job")) << id;
  }
}

}  // namespace
}  // namespace pp::coordinator
