// ListJobs pages (AIP-158) against an in-process ppcoord on loopback port 0:
// sizes, order across pages, the last page's empty token, and refused page
// sizes and tokens.
#include <filesystem>
#include <fstream>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "coordinator/coordinator.h"
#include "coordinator/peer_limit.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "pp/v1/coordinator.grpc.pb.h"

namespace pp::coordinator {
namespace {

class ServiceLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           absl::StrCat("ppcoord_list_", ::getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ / "corpus.txt") << std::string(4096, 'a');
    CoordinatorOptions options;
    options.data_dir = (dir_ / "data").string();
    absl::StatusOr<std::unique_ptr<CoordinatorServer>> server = CoordinatorServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    client_ = pp::v1::Coordinator::NewStub(
        grpc::CreateChannel(server_->grpc_address(), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Submits `n` small jobs (they stay QUEUED: no worker is there) and returns
  // their ids in order.
  std::vector<std::string> SubmitJobs(int n) {
    pp::v1::SubmitJobRequest request;
    pp::v1::JobSpec* spec = request.mutable_spec();
    spec->set_name("page");
    spec->mutable_model()->set_vocab_size(256);
    spec->mutable_model()->set_seq_len(16);
    spec->mutable_model()->set_d_model(32);
    spec->mutable_model()->set_n_heads(4);
    spec->mutable_model()->set_n_layers(2);
    spec->mutable_parallel()->set_pipeline(2);
    spec->mutable_parallel()->set_schedule("1f1b");
    spec->mutable_train()->set_steps(2);
    spec->mutable_train()->set_microbatches(4);
    spec->mutable_train()->set_microbatch_size(1);
    spec->mutable_train()->set_lr(1e-3);
    spec->mutable_data()->set_path((dir_ / "corpus.txt").string());
    std::vector<std::string> ids;
    for (int i = 0; i < n; ++i) {
      grpc::ClientContext context;
      pp::v1::SubmitJobResponse response;
      grpc::Status status = client_->SubmitJob(&context, request, &response);
      EXPECT_TRUE(status.ok()) << status.error_message();
      ids.push_back(response.job_id());
    }
    return ids;
  }

  grpc::Status List(int page_size, const std::string& token, pp::v1::ListJobsResponse* response) {
    pp::v1::ListJobsRequest request;
    request.set_page_size(page_size);
    request.set_page_token(token);
    grpc::ClientContext context;
    return client_->ListJobs(&context, request, response);
  }

  std::filesystem::path dir_;
  std::unique_ptr<CoordinatorServer> server_;
  std::unique_ptr<pp::v1::Coordinator::Stub> client_;
};

TEST_F(ServiceLimitsTest, DefaultPagesOf100FollowSubmissionOrderToAnEmptyToken) {
  const std::vector<std::string> submitted = SubmitJobs(250);
  std::vector<std::string> listed;
  std::vector<int> sizes;
  std::string token;
  do {
    pp::v1::ListJobsResponse page;
    grpc::Status status = List(0, token, &page);
    ASSERT_TRUE(status.ok()) << status.error_message();
    sizes.push_back(page.jobs_size());
    for (const pp::v1::Job& job : page.jobs()) listed.push_back(job.id());
    token = page.next_page_token();
    ASSERT_LE(sizes.size(), 3u) << "more pages than jobs allow";
  } while (!token.empty());
  EXPECT_EQ(sizes, (std::vector<int>{100, 100, 50}));
  EXPECT_EQ(listed, submitted);

  // A token stays valid while new jobs are added: its page starts after the
  // same job.
  pp::v1::ListJobsResponse first;
  ASSERT_TRUE(List(0, "", &first).ok());
  SubmitJobs(1);
  pp::v1::ListJobsResponse second;
  ASSERT_TRUE(List(0, first.next_page_token(), &second).ok());
  ASSERT_EQ(second.jobs_size(), 100);
  EXPECT_EQ(second.jobs(0).id(), submitted[100]);
}

TEST_F(ServiceLimitsTest, PageSizeIsCappedAndEveryJobIsListedOnce) {
  const std::vector<std::string> submitted = SubmitJobs(7);
  pp::v1::ListJobsResponse page;
  ASSERT_TRUE(List(3, "", &page).ok());
  EXPECT_EQ(page.jobs_size(), 3);
  std::set<std::string> seen;
  std::string token = page.next_page_token();
  for (const pp::v1::Job& job : page.jobs()) seen.insert(job.id());
  while (!token.empty()) {
    ASSERT_TRUE(List(3, token, &page).ok());
    for (const pp::v1::Job& job : page.jobs()) EXPECT_TRUE(seen.insert(job.id()).second);
    token = page.next_page_token();
  }
  EXPECT_EQ(seen, std::set<std::string>(submitted.begin(), submitted.end()));
  ASSERT_TRUE(List(5000, "", &page).ok());  // over the maximum: lowered, not refused
  EXPECT_EQ(page.jobs_size(), 7);
  EXPECT_TRUE(page.next_page_token().empty());
}

TEST_F(ServiceLimitsTest, NegativeSizeAndForeignTokensAreRefused) {
  SubmitJobs(2);
  pp::v1::ListJobsResponse page;
  grpc::Status negative = List(-1, "", &page);
  EXPECT_EQ(negative.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(negative.error_message().find("page_size"), std::string::npos);
  for (const std::string& token : {std::string("not base64!"), absl::WebSafeBase64Escape("garbage"),
                                  absl::WebSafeBase64Escape("after:no-such-job-9")}) {
    grpc::Status status = List(0, token, &page);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << token;
    EXPECT_NE(status.error_message().find("page_token"), std::string::npos) << token;
  }
}

// A WatchJob stream that has received its first event, so the server holds its slot.
struct OpenWatch {
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<pp::v1::JobEvent>> reader;
  bool open = false;
};

std::unique_ptr<OpenWatch> Watch(pp::v1::Coordinator::Stub& client, const std::string& id) {
  auto watch = std::make_unique<OpenWatch>();
  watch->context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  pp::v1::WatchJobRequest request;
  request.set_job_id(id);
  watch->reader = client.WatchJob(&watch->context, request);
  pp::v1::JobEvent event;
  watch->open = watch->reader->Read(&event);
  return watch;
}

TEST_F(ServiceLimitsTest, WatchesPerClientHostAreCappedAndFreedOnClose) {
  const std::string id = SubmitJobs(1)[0];  // stays QUEUED: its watches stay open
  constexpr int kCap = 16;                  // kMaxWatchesPerClient of coordinator/service.cc
  std::vector<std::unique_ptr<OpenWatch>> watches;
  for (int i = 0; i < kCap; ++i) {
    watches.push_back(Watch(*client_, id));
    ASSERT_TRUE(watches.back()->open) << "watch " << i;
  }
  std::unique_ptr<OpenWatch> refused = Watch(*client_, id);
  EXPECT_FALSE(refused->open);
  grpc::Status status = refused->reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(status.error_message().find("WatchJob streams"), std::string::npos)
      << status.error_message();
  EXPECT_NE(status.error_message().find("127.0.0.1"), std::string::npos) << status.error_message();

  watches.back()->context.TryCancel();
  watches.back()->reader->Finish();
  watches.pop_back();
  // The server notices the cancelled stream within its poll interval and frees the slot.
  std::unique_ptr<OpenWatch> again;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  do {
    if (again) again->reader->Finish();
    again = Watch(*client_, id);
  } while (!again->open && absl::Now() < deadline);
  EXPECT_TRUE(again->open);
  watches.push_back(std::move(again));
  for (auto& w : watches) {
    w->context.TryCancel();
    w->reader->Finish();
  }
}

TEST(PeerHost, DropsThePortOnly) {
  EXPECT_EQ(PeerHost("ipv4:127.0.0.1:5000"), "ipv4:127.0.0.1");
  EXPECT_EQ(PeerHost("ipv6:[::1]:5000"), "ipv6:[::1]");
  EXPECT_EQ(PeerHost("ipv6:[::1]"), "ipv6:[::1]");
  EXPECT_EQ(PeerHost("unix:/tmp/sock"), "unix:/tmp/sock");
}

TEST(ClientOf, AUserWhateverItsAddressElseTheHost) {
  EXPECT_EQ(ClientOf("alice", "ipv4:127.0.0.1:5000"), "user alice");
  EXPECT_EQ(ClientOf("alice", "ipv4:10.0.0.9:6000"), "user alice");
  EXPECT_EQ(ClientOf("", "ipv4:127.0.0.1:5000"), "ipv4:127.0.0.1");
  EXPECT_NE(ClientOf("ipv4:127.0.0.1", "ipv4:10.0.0.9:6000"), "ipv4:127.0.0.1");
}

}  // namespace
}  // namespace pp::coordinator
