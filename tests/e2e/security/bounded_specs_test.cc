// Specs and lists bounded in bytes, with real processes (issue 36, item 3): ppcoord with TLS and
// tokens refuses a spec over its byte cap and fields it does not know (which it used to keep and
// serve), ListJobs pages by bytes so that large specs never make the listing fail (ppctl list
// follows the pages), and with --retain_jobs an ended job goes from memory and store, after a
// restart too, while its checkpoints stay on disk.
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/spec_bounds.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "pp/v1/coordinator.grpc.pb.h"
#include "tests/e2e/security/calls.h"
#include "tests/e2e/security/test_certs.h"
#include "tests/support/cluster.h"
#include "tests/support/fixture.h"
#include "tests/support/process.h"

namespace pp::security_test {
namespace {

using ::pp::testing_support::JobWatch;
using ::testing::HasSubstr;

constexpr int64_t kSpecCap = common::kMaxSpecBytes;

// `spec` with a field numbered `number` that pp.v1 does not know, `bytes` long, appended as a
// client could append it to the wire: protobuf keeps it as an unknown field when it parses.
template <typename Message>
Message WithUnknownField(const Message& message, int number, size_t bytes) {
  std::string wire = message.SerializeAsString();
  uint64_t tag = (static_cast<uint64_t>(number) << 3) | 2;  // wire type 2: length-delimited
  for (uint64_t value : {tag, static_cast<uint64_t>(bytes)}) {
    for (; value >= 0x80; value >>= 7) wire.push_back(static_cast<char>((value & 0x7f) | 0x80));
    wire.push_back(static_cast<char>(value));
  }
  wire.append(bytes, 'u');
  Message parsed;
  EXPECT_TRUE(parsed.ParseFromString(wire));
  return parsed;
}

class BoundedSpecsTest : public testing_support::ClusterTest {
 protected:
  void SetUp() override {
    ClusterTest::SetUp();
    certs_ = (dir_ / "certs").string();
    const absl::Status made = MakeCertFolder(certs_, {"ppcoord", "w0", "w1"}, {});
    ASSERT_TRUE(made.ok()) << made;
    tokens_ = certs_ + "/tokens";
    std::ofstream(tokens_) << "tok-admin admin ops\ntok-alice submit alice\n";
    token_file_ = certs_ + "/alice.token";
    std::ofstream(token_file_) << "tok-alice\n";
  }

  void StartCluster(int workers, std::vector<std::string> flags = {}) {
    flags.push_back("--auth_tokens=" + tokens_);
    absl::StatusOr<std::unique_ptr<testing_support::Cluster>> cluster =
        StartSecureCluster({.certs = certs_,
                            .root = dir_.string(),
                            .cluster_dir = (dir_ / "cluster").string(),
                            .bin_dir = BinDir(),
                            .coordinator_flags = flags,
                            .credentials = ClientCredentials(certs_, "", "tok-admin"),
                            .workers = workers});
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    Connect();
  }
  // A fresh channel: one to a ppcoord that was killed waits out its reconnect backoff.
  void Connect() {
    alice_ = pp::v1::Coordinator::NewStub(grpc::CreateChannel(
        cluster_->coordinator().grpc, ClientCredentials(certs_, "", "tok-alice")));
  }

  pp::v1::JobSpec Spec() const {
    return SpecFrom(R"pb(
      name: "bounded"
      model { n_layers: 2 seq_len: 32 d_model: 32 n_heads: 4 }
      parallel { pipeline: 2 }
      train { steps: 3 microbatches: 4 microbatch_size: 2 }
    )pb");
  }

  // A spec that carries its 1F1B schedule as a file padded with spaces to `bytes`: allowed up to
  // the file's own limit of 1 MiB, and what made one unpaged ListJobs over 60 MiB.
  pp::v1::JobSpec PaddedSpec(size_t bytes) const {
    pp::v1::JobSpec spec = Spec();
    spec.set_name("padded");
    const std::string rows[] = {"0F0,0F1,0B0,0F2,0B1,0F3,0B2,0B3",
                                "1F0,1B0,1F1,1B1,1F2,1B2,1F3,1B3"};
    const size_t padding = bytes - rows[0].size() - rows[1].size() - 2;
    spec.mutable_parallel()->clear_schedule();
    spec.mutable_parallel()->set_schedule_file(
        absl::StrCat(rows[0], "\n", rows[1], std::string(padding, ' '), "\n"));
    return spec;
  }

  grpc::Status Submit(const pp::v1::JobSpec& spec, std::string* id = nullptr) {
    grpc::ClientContext context;
    SetDeadline(context);
    pp::v1::SubmitJobRequest request;
    *request.mutable_spec() = spec;
    pp::v1::SubmitJobResponse response;
    grpc::Status status = alice_->SubmitJob(&context, request, &response);
    if (id != nullptr) *id = response.job_id();
    return status;
  }
  grpc::Status Get(const std::string& id) {
    grpc::ClientContext context;
    SetDeadline(context);
    pp::v1::GetJobRequest request;
    request.set_job_id(id);
    pp::v1::Job job;
    return alice_->GetJob(&context, request, &job);
  }
  // Every job, page by page; the first refused page's status otherwise.
  grpc::Status ListAll(std::vector<std::string>* ids, int* pages) {
    pp::v1::ListJobsRequest request;
    do {
      grpc::ClientContext context;
      SetDeadline(context);
      pp::v1::ListJobsResponse response;
      grpc::Status status = alice_->ListJobs(&context, request, &response);
      if (!status.ok()) return status;
      ++*pages;
      for (const pp::v1::Job& job : response.jobs()) ids->push_back(job.id());
      request.set_page_token(response.next_page_token());
    } while (!request.page_token().empty());
    return grpc::Status::OK;
  }
  testing_support::CommandResult Ppctl(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {BinDir() + "/ppctl"};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"--coordinator=" + cluster_->coordinator().grpc,
                             "--ca=" + Files(certs_, "ca").cert, "--token_file=" + token_file_});
    absl::StatusOr<testing_support::CommandResult> result =
        testing_support::RunCommand(argv, absl::Seconds(60));
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *result : testing_support::CommandResult{};
  }

  std::string certs_, tokens_, token_file_;
  std::unique_ptr<pp::v1::Coordinator::Stub> alice_;
};

// A 3.7 MiB unknown field passed every bound and was kept and served; a spec over the byte cap is
// refused naming the cap. Neither leaves a job behind.
TEST_F(BoundedSpecsTest, SpecsOverTheByteCapAndUnknownFieldsAreRefused) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(0));
  const pp::v1::JobSpec unknown = WithUnknownField(Spec(), 1000, 3700 << 10);
  grpc::Status status = Submit(unknown);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("spec: unknown field number 1000"));

  pp::v1::JobSpec nested = Spec();
  *nested.mutable_parallel() = WithUnknownField(nested.parallel(), 77, 16);
  status = Submit(nested);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("parallel: unknown field number 77"));

  pp::v1::JobSpec large = Spec();
  large.set_name(std::string(kSpecCap, 'n'));
  status = Submit(large);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr(absl::StrCat("over the limit ", kSpecCap)));
  EXPECT_THAT(status.error_message(), HasSubstr("spec: "));

  grpc::ClientContext context;
  SetDeadline(context);
  pp::v1::PlanJobRequest plan;
  *plan.mutable_spec() = unknown;
  pp::v1::PlanJobResponse planned;
  status = alice_->PlanJob(&context, plan, &planned);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("spec: unknown field number 1000"));

  // ResumeJob's new layout becomes the job's spec: an unknown field in it is refused too.
  std::string id;
  ASSERT_TRUE(Submit(Spec(), &id).ok());
  grpc::ClientContext cancel_context;
  SetDeadline(cancel_context);
  pp::v1::CancelJobRequest cancel;
  cancel.set_job_id(id);
  pp::v1::Job cancelled;
  ASSERT_TRUE(alice_->CancelJob(&cancel_context, cancel, &cancelled).ok());
  grpc::ClientContext resume_context;
  SetDeadline(resume_context);
  pp::v1::ResumeJobRequest resume;
  resume.set_job_id(id);
  *resume.mutable_parallel() = WithUnknownField(Spec().parallel(), 77, 16);
  pp::v1::Job resumed;
  status = alice_->ResumeJob(&resume_context, resume, &resumed);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("parallel: unknown field number 77"));

  std::vector<std::string> ids;
  int pages = 0;
  ASSERT_TRUE(ListAll(&ids, &pages).ok());
  EXPECT_THAT(ids, ::testing::ElementsAre(id));
}

// Specs of 1 MiB (allowed), ten in a first page of 100 jobs, used to make that page 10 MiB, over
// gRPC's 4 MiB: ListJobs and ppctl list failed for every user. Pages are bounded by bytes now.
TEST_F(BoundedSpecsTest, ListJobsPagesLargeSpecsAndPpctlListsThemAll) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(0));
  std::vector<std::string> submitted;
  int large = 0;
  for (int i = 0; i < 205; ++i) {
    std::string id;
    const bool padded = i % 10 == 0;
    const grpc::Status status = Submit(padded ? PaddedSpec(1 << 20) : Spec(), &id);
    ASSERT_TRUE(status.ok()) << i << ": " << status.error_message();
    submitted.push_back(id);
    large += padded ? 1 : 0;
  }
  std::vector<std::string> listed;
  int pages = 0;
  const grpc::Status status = ListAll(&listed, &pages);
  ASSERT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
  EXPECT_EQ(listed, submitted);
  EXPECT_GE(pages, large) << "no two 1 MiB specs in one page";

  const testing_support::CommandResult list = Ppctl({"list"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  std::vector<std::string> lines = absl::StrSplit(list.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), submitted.size() + 1) << "a header and a line per job";
  for (size_t i = 0; i < submitted.size(); ++i) {
    EXPECT_THAT(lines[i + 1], ::testing::StartsWith(submitted[i] + " ")) << i;
  }
}

// With --retain_jobs=2s a job that ended goes within a few seconds: NOT_FOUND, not listed, and
// not back after a ppcoord restart; its checkpoints stay on disk, and ppcoord says so once.
TEST_F(BoundedSpecsTest, AnEndedJobExpiresAfterTheRetentionAndStaysGone) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(2, {"--retain_jobs=2s"}));
  std::string id;
  ASSERT_TRUE(Submit(Spec(), &id).ok());
  absl::StatusOr<std::unique_ptr<JobWatch>> watch = JobWatch::Open(*alice_, id, kCallTimeout);
  ASSERT_TRUE(watch.ok()) << watch.status();
  absl::StatusOr<std::vector<pp::v1::JobEvent>> events = (*watch)->Rest();
  ASSERT_TRUE(events.ok()) << events.status() << cluster_->Logs();
  ASSERT_EQ(events->back().kind(), pp::v1::EVENT_FINISHED) << cluster_->Logs();
  const std::filesystem::path checkpoint =
      std::filesystem::path(cluster_->checkpoint_root()) / id / "step-3";

  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (Get(id).error_code() != grpc::StatusCode::NOT_FOUND && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_EQ(Get(id).error_code(), grpc::StatusCode::NOT_FOUND) << cluster_->Logs();
  EXPECT_TRUE(std::filesystem::exists(checkpoint / "manifest.json")) << checkpoint;
  const std::string log = cluster_->coordinator_process().Log();
  EXPECT_THAT(log, HasSubstr(absl::StrCat("job ", id, " expired: SUCCEEDED")));
  EXPECT_EQ(log.find(absl::StrCat("job ", id, " expired")),
            log.rfind(absl::StrCat("job ", id, " expired")))
      << "one log line per expired job";

  cluster_->KillCoordinator();
  const absl::Status restarted = cluster_->RestartCoordinator();
  ASSERT_TRUE(restarted.ok()) << restarted;
  Connect();
  EXPECT_EQ(Get(id).error_code(), grpc::StatusCode::NOT_FOUND);
  std::vector<std::string> ids;
  int pages = 0;
  ASSERT_TRUE(ListAll(&ids, &pages).ok());
  EXPECT_TRUE(ids.empty());
  EXPECT_TRUE(std::filesystem::exists(checkpoint / "manifest.json")) << checkpoint;
}

}  // namespace
}  // namespace pp::security_test
