// The rendezvous and the worker reports with real processes and mutual TLS: ppcoord and
// ppworkers on loopback with certificates made by openssl in the test. A job attempt's keys
// ("<job>/<attempt>/...") are read and written only by the workers placed on that attempt while it
// runs, and a report on a rank comes only from the worker placed on that rank, whatever else holds
// a certificate of the same CA: a spare worker, an ops tool, a worker of an earlier attempt.
#include <signal.h>

#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/tls.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "pp/v1/coordinator.grpc.pb.h"
#include "tests/e2e/security/test_certs.h"
#include "tests/support/cluster.h"
#include "tests/support/fixture.h"
#include "tests/support/process.h"

namespace pp::security_test {
namespace {

using ::pp::testing_support::WaitForJob;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr absl::Duration kJobTimeout = absl::Seconds(60);
constexpr char kSecret[] = "gloo-address-of-rank-0";

class KvScopeTest : public testing_support::ClusterTest {
 protected:
  void SetUp() override {
    ClusterTest::SetUp();
    certs_ = (dir_ / "certs").string();
    const absl::Status made = MakeCertFolder(certs_, {"ppcoord", "w0", "w1", "w2", "spare"}, {"ops"});
    ASSERT_TRUE(made.ok()) << made;
  }

  // ppcoord with TLS and workers w0.. w<workers-1>; the harness's stub is an admin by "ops".
  void StartSecureCluster(int workers) {
    absl::StatusOr<std::unique_ptr<testing_support::Cluster>> cluster = security_test::
        StartSecureCluster({.certs = certs_,
                            .root = dir_.string(),
                            .cluster_dir = (dir_ / "cluster").string(),
                            .bin_dir = BinDir(),
                            .credentials = common::ChannelCredentials(Tls("ops")),
                            .workers = workers});
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
  }

  common::TlsConfig Tls(const std::string& name) const {
    common::TlsPaths paths{.cert = Files(certs_, name).cert,
                           .key = Files(certs_, name).key,
                           .ca = Files(certs_, "ca").cert};
    absl::StatusOr<common::TlsConfig> tls = common::LoadTls(paths, /*need_cert=*/true);
    EXPECT_TRUE(tls.ok()) << tls.status();
    return *tls;
  }

  // The rendezvous as the holder of `name`'s certificate calls it.
  std::unique_ptr<pp::v1::WorkerRegistry::Stub> As(const std::string& name) const {
    return pp::v1::WorkerRegistry::NewStub(grpc::CreateChannel(
        cluster_->coordinator().grpc, common::ChannelCredentials(Tls(name))));
  }

  static grpc::Status Set(pp::v1::WorkerRegistry::Stub& stub, const std::string& key,
                          const std::string& value) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    pp::v1::KvSetRequest request;
    request.set_key(key);
    request.set_value(value);
    pp::v1::KvSetResponse response;
    return stub.KvSet(&context, request, &response);
  }
  // KvGet of one key that waits at most 1 s; the value in *value.
  static grpc::Status Get(pp::v1::WorkerRegistry::Stub& stub, const std::string& key,
                          std::string* value = nullptr) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    pp::v1::KvGetRequest request;
    request.add_keys(key);
    request.set_timeout_seconds(1);
    pp::v1::KvGetResponse response;
    grpc::Status status = stub.KvGet(&context, request, &response);
    if (value != nullptr && response.values_size() == 1) *value = response.values(0);
    return status;
  }

  // A job of pipeline 2 long enough to be running while the test calls the rendezvous.
  pp::v1::JobSpec LongSpec(int max_restarts) const {
    pp::v1::JobSpec spec = SpecFrom(R"pb(
      name: "kv"
      model { n_layers: 2 seq_len: 32 d_model: 32 n_heads: 4 }
      parallel { pipeline: 2 }
      train { steps: 1000000 microbatches: 4 microbatch_size: 2 }
    )pb");
    spec.set_max_restarts(max_restarts);
    return spec;
  }

  // The job once it runs attempt `after` + 1 or later and trained a step of it.
  pp::v1::Job WaitRunning(const std::string& id, int after) {
    absl::StatusOr<pp::v1::Job> job = WaitForJob(
        cluster_->stub(), id,
        [after](const pp::v1::Job& j) {
          return j.state() == pp::v1::RUNNING && j.attempt() > after && j.step() > j.start_step();
        },
        kJobTimeout);
    EXPECT_TRUE(job.ok()) << job.status() << cluster_->Logs();
    return job.ok() ? *job : pp::v1::Job();
  }

  // A report of kind Report on `rank` of `job`'s attempt.
  template <typename Report>
  static Report About(const pp::v1::Job& job, int rank) {
    Report report;
    report.set_job_id(job.id());
    report.set_attempt(job.attempt());
    report.set_rank(rank);
    return report;
  }

  // `report` through the registry's `method` as the holder of `caller`'s certificate.
  template <typename Report>
  grpc::Status Send(const std::string& caller,
                    grpc::Status (pp::v1::WorkerRegistry::Stub::*method)(
                        grpc::ClientContext*, const Report&, pp::v1::ReportResponse*),
                    const Report& report, pp::v1::ReportResponse* response = nullptr) const {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    pp::v1::ReportResponse ignored;
    return (*As(caller).*method)(&context, report, response != nullptr ? response : &ignored);
  }

  static std::string Prefix(const pp::v1::Job& job) {
    return absl::StrCat(job.id(), "/", job.attempt(), "/");
  }

  std::string certs_;
};

TEST_F(KvScopeTest, OnlyTheAttemptsWorkersReadAndWriteItsKeys) {
  ASSERT_NO_FATAL_FAILURE(StartSecureCluster(2));
  absl::StatusOr<std::string> id = testing_support::SubmitJob(cluster_->stub(), LongSpec(0));
  ASSERT_TRUE(id.ok()) << id.status();
  const pp::v1::Job job = WaitRunning(*id, -1);
  ASSERT_EQ(job.placement_size(), 2);
  const std::string key = Prefix(job) + "probe";
  const std::string worker0 = job.placement(0).worker(), worker1 = job.placement(1).worker();

  ASSERT_TRUE(Set(*As(worker0), key, kSecret).ok());
  std::string read;
  ASSERT_TRUE(Get(*As(worker1), key, &read).ok());
  EXPECT_EQ(read, kSecret);

  // A certificate of the CA is not enough: "spare" is a worker of no attempt, "ops" an admin.
  for (const char* stranger : {"spare", "ops"}) {
    SCOPED_TRACE(stranger);
    std::string stolen;
    const grpc::Status get = Get(*As(stranger), key, &stolen);
    EXPECT_EQ(get.error_code(), grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_THAT(get.error_message(),
                AllOf(HasSubstr(absl::StrCat("job ", *id, " attempt ", job.attempt())),
                      Not(HasSubstr(kSecret))));
    EXPECT_TRUE(stolen.empty());
    const grpc::Status set = Set(*As(stranger), key, "forged");
    EXPECT_EQ(set.error_code(), grpc::StatusCode::PERMISSION_DENIED) << set.error_message();
  }
  ASSERT_TRUE(Get(*As(worker1), key, &read).ok());
  EXPECT_EQ(read, kSecret) << "a refused KvSet changed nothing";

  // Keys of no running attempt are refused to the workers too; so is the attempt's number
  // written another way, which used to claim a second share of the store (security.md).
  for (const std::string& loose :
       {std::string("any/key"), absl::StrCat("nojob/", job.attempt(), "/x"),
        absl::StrCat(*id, "/0", job.attempt(), "/x"), absl::StrCat(*id, "/00", job.attempt(), "/x"),
        absl::StrCat(*id, "/+", job.attempt(), "/x")}) {
    EXPECT_EQ(Set(*As(worker0), loose, "v").error_code(), grpc::StatusCode::PERMISSION_DENIED)
        << loose;
  }
  absl::StatusOr<pp::v1::Job> still = testing_support::GetJob(cluster_->stub(), *id);
  ASSERT_TRUE(still.ok()) << still.status();
  EXPECT_EQ(still->state(), pp::v1::RUNNING) << "its own workers train on";
}

TEST_F(KvScopeTest, AWorkerOfAnEarlierAttemptIsRefusedAfterARestart) {
  ASSERT_NO_FATAL_FAILURE(StartSecureCluster(3));
  absl::StatusOr<std::string> id = testing_support::SubmitJob(cluster_->stub(), LongSpec(1));
  ASSERT_TRUE(id.ok()) << id.status();
  const pp::v1::Job first = WaitRunning(*id, -1);
  ASSERT_EQ(first.placement_size(), 2);
  const std::string gone = first.placement(1).worker();
  cluster_->worker(gone).Signal(SIGKILL);

  const pp::v1::Job second = WaitRunning(*id, first.attempt());
  ASSERT_EQ(second.placement_size(), 2);
  const std::string kept = second.placement(0).worker();
  ASSERT_NE(kept, gone);

  // The killed worker's identity (its key may have leaked) reaches neither attempt.
  for (const pp::v1::Job* attempt : {&first, &second}) {
    const grpc::Status get = Get(*As(gone), Prefix(*attempt) + "gloo/0");
    EXPECT_EQ(get.error_code(), grpc::StatusCode::PERMISSION_DENIED) << get.error_message();
  }
  // A worker of the new attempt may use its keys, not the ended attempt's.
  EXPECT_TRUE(Set(*As(kept), Prefix(second) + "probe", "v").ok());
  const grpc::Status old = Set(*As(kept), Prefix(first) + "probe", "v");
  EXPECT_EQ(old.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(old.error_message(), HasSubstr(absl::StrCat("attempt ", first.attempt())));
}

// Before: a spare worker's certificate failed another user's job with one ReportTask, finished a
// 1,000,000-step job at step 0, or drained it without end (security.md "Reports").
TEST_F(KvScopeTest, ReportsOnARankComeOnlyFromTheWorkerPlacedOnIt) {
  ASSERT_NO_FATAL_FAILURE(StartSecureCluster(2));
  absl::StatusOr<std::string> id = testing_support::SubmitJob(cluster_->stub(), LongSpec(0));
  ASSERT_TRUE(id.ok()) << id.status();
  const pp::v1::Job job = WaitRunning(*id, -1);
  ASSERT_EQ(job.placement_size(), 2);
  const std::string worker0 = job.placement(0).worker();
  using Stub = pp::v1::WorkerRegistry::Stub;
  // (caller, rank): a stranger on either rank, and a placed worker on the other one's rank.
  for (const auto& [caller, rank] : {std::pair<std::string, int>{"spare", 0}, {"spare", 1},
                                     {"ops", 0}, {worker0, 1}}) {
    SCOPED_TRACE(absl::StrCat(caller, " on rank ", rank));
    auto failed = About<pp::v1::TaskReport>(job, rank);
    failed.set_worker(caller);
    failed.set_ok(false);
    failed.set_error("forged");
    const grpc::Status task = Send(caller, &Stub::ReportTask, failed);
    EXPECT_EQ(task.error_code(), grpc::StatusCode::PERMISSION_DENIED) << task.error_message();
    EXPECT_THAT(task.error_message(), HasSubstr(absl::StrCat("rank ", rank)));

    auto step = About<pp::v1::StepReport>(job, rank);
    step.set_step(5);
    step.set_draining(true);
    EXPECT_EQ(Send(caller, &Stub::ReportStep, step).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);

    auto shard = About<pp::v1::CheckpointReport>(job, rank);
    shard.set_step(1);
    shard.set_ok(false);
    EXPECT_EQ(Send(caller, &Stub::ReportCheckpoint, shard).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }
  // A step no worker trains, from the placed worker itself, is ignored: no stop step past the
  // end (newest + 1 overflowed at INT_MAX), no summary.
  auto huge = About<pp::v1::StepReport>(job, 0);
  huge.set_step(std::numeric_limits<int32_t>::max());
  huge.set_draining(true);
  pp::v1::ReportResponse answer;
  ASSERT_TRUE(Send(worker0, &Stub::ReportStep, huge, &answer).ok());
  EXPECT_EQ(answer.stop_after_step(), 0);

  const pp::v1::Job still = WaitRunning(*id, -1);
  EXPECT_EQ(still.state(), pp::v1::RUNNING) << "no forged report moved the job";
  EXPECT_EQ(still.attempt(), job.attempt());
  EXPECT_LT(still.step(), 1000);
}

// Before: a rank's error text was kept whole in the job's reason, events and logs: megabytes per
// report, served to every ListJobs (security.md "Reports").
TEST_F(KvScopeTest, AWorkersErrorTextIsKeptBounded) {
  ASSERT_NO_FATAL_FAILURE(StartSecureCluster(2));
  absl::StatusOr<std::string> id = testing_support::SubmitJob(cluster_->stub(), LongSpec(0));
  ASSERT_TRUE(id.ok()) << id.status();
  const pp::v1::Job job = WaitRunning(*id, -1);
  ASSERT_EQ(job.placement_size(), 2);
  auto failed = About<pp::v1::TaskReport>(job, 0);
  failed.set_worker(job.placement(0).worker());
  failed.set_ok(false);
  failed.set_error_code(static_cast<int>(absl::StatusCode::kInternal));
  failed.set_error(std::string(3 << 20, 'e'));
  ASSERT_TRUE(Send(failed.worker(), &pp::v1::WorkerRegistry::Stub::ReportTask, failed).ok());

  absl::StatusOr<pp::v1::Job> ended = WaitForJob(
      cluster_->stub(), *id, [](const pp::v1::Job& j) { return j.state() == pp::v1::FAILED; },
      kJobTimeout);
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_LT(ended->reason().size(), 8192u);
  // Not EXPECT_THAT: a failure would print megabytes of reason.
  EXPECT_TRUE(absl::StrContains(ended->reason(), "more bytes not kept"))
      << "a reason of " << ended->reason().size() << " bytes";
}

}  // namespace
}  // namespace pp::security_test
