// The committer (coordinator/committer.h) on its own: a fake host, a real job store in a temporary
// folder. Its callbacks come under the host's mutex, in the order of a round: the manifests, then
// (the rows written) ApplyStored; AwaitStored answers once a row is written, Unavailable after
// Close.
#include "coordinator/committer.h"

#include <unistd.h>

#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pp::coordinator {
namespace {

using ::testing::ElementsAre;

class FakeHost : public CommitterHost {
 public:
  explicit FakeHost(absl::Mutex* mu) : mu_(mu) {}

  const pp::v1::Job* RowToStore(const std::string& job_id) override {
    mu_->AssertHeld();
    calls.push_back(absl::StrCat("row ", job_id));
    auto it = rows.find(job_id);
    return it != rows.end() ? &it->second : nullptr;
  }
  void ApplyManifest(PendingCommit& commit) override {
    mu_->AssertHeld();
    calls.push_back(absl::StrCat("manifest ", commit.job_id, " ", commit.step));
  }
  void ApplyStored(const std::deque<PendingCommit>& commits) override {
    mu_->AssertHeld();
    calls.push_back(absl::StrCat("stored ", commits.size()));
  }
  std::vector<Expiring> ExpiredJobs() override { return {}; }
  void DropExpired(const std::vector<Expiring>&, const std::vector<absl::Status>&) override {}
  std::vector<StartToVerify> StartsToVerify() override { return {}; }
  void ApplyVerified(const std::vector<StartToVerify>&) override {}

  std::map<std::string, pp::v1::Job> rows;
  std::vector<std::string> calls;

 private:
  absl::Mutex* const mu_;
};

class CommitterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("committer_test_", getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    absl::StatusOr<std::unique_ptr<JobStore>> store =
        JobStore::Open((dir_ / "ppcoord.db").string());
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    committer_ = std::make_unique<Committer>(
        &mu_, &store_mu_, store_.get(), &host_,
        CommitterOptions{.checkpoint_root = (dir_ / "checkpoints").string(),
                         .retain_jobs = absl::ZeroDuration(),
                         .verify_period = absl::Milliseconds(10)});
    committer_->Start();
  }
  void TearDown() override {
    Stop();
    std::filesystem::remove_all(dir_);
  }
  void Stop() {
    if (committer_ == nullptr) return;  // SetUp failed
    {
      absl::MutexLock lock(&mu_);
      committer_->StopVerifier();
    }
    committer_->JoinVerifier();
    {
      absl::MutexLock lock(&mu_);
      committer_->Close();
    }
    committer_->Join();
  }

  std::filesystem::path dir_;
  absl::Mutex store_mu_;
  std::unique_ptr<JobStore> store_;
  absl::Mutex mu_;
  FakeHost host_{&mu_};
  std::unique_ptr<Committer> committer_;
};

TEST_F(CommitterTest, AwaitStoredAnswersOnceTheRowIsWritten) {
  int64_t ticket = 0;
  {
    absl::MutexLock lock(&mu_);
    host_.rows["a"].set_id("a");
    ticket = committer_->MarkDirty("a");
  }
  EXPECT_TRUE(committer_->AwaitStored("a", ticket).ok());
  EXPECT_TRUE(committer_->AwaitStored("a", 0).ok());  // nothing to wait for
  absl::MutexLock store_lock(&store_mu_);
  absl::StatusOr<std::vector<pp::v1::Job>> jobs = store_->LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ(jobs->front().id(), "a");
}

TEST_F(CommitterTest, ARoundAppliesTheManifestsThenTheRowsThenTheStored) {
  int64_t ticket = 0;
  {
    absl::MutexLock lock(&mu_);
    host_.rows["a"].set_id("a");
    // Whatever the manifest's commit finds (no shards here), the host is told (commit.written).
    committer_->QueueCommit(PendingCommit{
        .job_id = "a", .step = 4, .keep = 1, .manifest = {}, .written = {}, .ticket = 0});
    ticket = committer_->MarkDirty("a");
  }
  EXPECT_TRUE(committer_->AwaitStored("a", ticket).ok());
  Stop();
  absl::MutexLock lock(&mu_);
  EXPECT_THAT(host_.calls, ElementsAre("manifest a 4", "row a", "stored 1"));
}

TEST_F(CommitterTest, AfterCloseAwaitStoredIsUnavailable) {
  Stop();
  int64_t ticket = 0;
  {
    absl::MutexLock lock(&mu_);
    ticket = committer_->MarkDirty("late");
  }
  EXPECT_EQ(committer_->AwaitStored("late", ticket).code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace pp::coordinator
