// The rendezvous access rule: a key "<job>/<attempt>/..." only for a worker placed on that live
// attempt, by its certificate's common name (the one identity field, common/tls.h).
#include "coordinator/kv_access.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pp::coordinator {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

const LiveAttempt kAttempt2{.attempt = 2, .workers = {"w0", "w1"}, .ranks = {0, 1}};

TEST(KvAccessTest, ScopeIsTheJobAndTheAttemptOfTheKey) {
  std::optional<KeyScope> scope = ScopeOfKey("train-000003/2/gloo/rank0");
  ASSERT_TRUE(scope.has_value());
  EXPECT_EQ(scope->job_id, "train-000003");
  EXPECT_EQ(scope->attempt, 2);
  ASSERT_TRUE(ScopeOfKey("j/0/").has_value());
  EXPECT_EQ(ScopeOfKey("j/0/")->attempt, 0);
  for (const char* key : {"", "j", "j/", "j/2", "/2/x", "j//x", "j/x/y", "j/+2/x", "j/ 2/x",
                          "j/-1/x", "j/99999999999/x", "j/02/x", "j/00/x", "j/000/"}) {
    EXPECT_FALSE(ScopeOfKey(key).has_value()) << key;
  }
}

TEST(KvAccessTest, AWorkerOfTheLiveAttemptMayUseItsKeys) {
  EXPECT_TRUE(CheckKvAccess("j/2/gloo/0", kAttempt2, "w1").ok());
  EXPECT_TRUE(CheckKvAccess("j/2/nccl/id", kAttempt2, "w0").ok());
}

TEST(KvAccessTest, AnyoneElseIsRefusedWithTheKeysJobAndAttempt) {
  const absl::Status stranger = CheckKvAccess("j/2/gloo/0", kAttempt2, "w9");
  EXPECT_EQ(stranger.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(stranger.message(), AllOf(HasSubstr("job j attempt 2"), HasSubstr("(w9)")));
  EXPECT_EQ(CheckKvAccess("j/2/gloo/0", kAttempt2, "").code(),
            absl::StatusCode::kPermissionDenied);
}


TEST(KvAccessTest, APreviousAttemptsKeysAreRefusedEvenToItsWorkers) {
  const absl::Status old = CheckKvAccess("j/1/gloo/0", kAttempt2, "w0");
  EXPECT_EQ(old.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(old.message(), HasSubstr("job j attempt 1"));
  EXPECT_EQ(CheckKvAccess("j/3/gloo/0", kAttempt2, "w0").code(),
            absl::StatusCode::kPermissionDenied);
}

TEST(KvAccessTest, AJobThatDoesNotRunAnswersLikeAStrangersJob) {
  const absl::Status none = CheckKvAccess("j/2/gloo/0", std::nullopt, "w0");
  const absl::Status other = CheckKvAccess("j/2/gloo/0", kAttempt2, "w0-not");
  EXPECT_EQ(none.code(), absl::StatusCode::kPermissionDenied);
  // Only the names differ: the answer does not tell whether job j runs.
  EXPECT_EQ(std::string(none.message()),
            absl::StrReplaceAll(std::string(other.message()), {{"w0-not", "w0"}}));
}

TEST(KvAccessTest, AKeyOutsideEveryAttemptIsRefused) {
  const absl::Status loose = CheckKvAccess("any/key", kAttempt2, "w0");
  EXPECT_EQ(loose.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(loose.message(),
              AllOf(HasSubstr("\"any/key\""), HasSubstr("no job attempt's prefix")));
}

TEST(KvAccessTest, ARefusalDoesNotNameTheAttemptsWorkers) {
  const absl::Status refused = CheckKvAccess("j/2/x", kAttempt2, "w9");
  EXPECT_THAT(refused.message(), AllOf(Not(HasSubstr("w0")), Not(HasSubstr("w1"))));
}

TEST(ReportAccessTest, OnlyTheWorkerPlacedOnTheRankReportsOnIt) {
  EXPECT_TRUE(CheckReportAccess("j", 2, 1, kAttempt2, "w1").ok());
  for (const auto& [rank, caller] : {std::pair<int, std::string>{1, "w0"}, {0, "w1"}, {0, "spare"},
                                     {5, "w0"}, {0, "localhost"}, {0, ""}}) {
    const absl::Status refused = CheckReportAccess("j", 2, rank, kAttempt2, caller);
    EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied) << rank;
    EXPECT_THAT(refused.message(), HasSubstr(absl::StrCat("job j attempt 2 rank ", rank)));
  }
}

// A report on an attempt that is not running changes nothing in JobManager (it answers abort),
// and that answer is what tells a worker of an ended attempt to stop.
TEST(ReportAccessTest, ReportsOnAnAttemptThatDoesNotRunGoThrough) {
  EXPECT_TRUE(CheckReportAccess("j", 1, 0, kAttempt2, "spare").ok());
  EXPECT_TRUE(CheckReportAccess("j", 2, 0, std::nullopt, "spare").ok());
}

}  // namespace
}  // namespace pp::coordinator
