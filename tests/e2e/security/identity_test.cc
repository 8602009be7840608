// Who a certificate names and what it may do, with real processes: ppcoord and ppworkers on
// loopback with mutual TLS and certificates made by openssl in the test. A worker's certificate
// is no admin on the job API (only an admin certificate, OU=pipeline-admin, is); a certificate
// names its holder by its CN alone (every certificate here also carries localhost and 127.0.0.1);
// a worker's status and its tasks' log lines are for the coordinator only; and a certificate
// written to a --deny_certs file is refused by a daemon once it got SIGHUP, while everyone else
// goes on.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "pp/v1/coordinator.grpc.pb.h"
#include "pp/v1/worker.grpc.pb.h"
#include "tests/e2e/security/calls.h"
#include "tests/e2e/security/test_certs.h"
#include "tests/support/cluster.h"
#include "tests/support/fixture.h"
#include "tests/support/process.h"

namespace pp::security_test {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// How long a daemon may take to act on a SIGHUP (it reads one small file) on a loaded machine.
constexpr absl::Duration kReloadTimeout = absl::Seconds(30);

// Polls `done` every 50 ms until it holds (true) or `timeout` passed (false).
bool Eventually(const std::function<bool()>& done, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return true;
}

class IdentityTest : public testing_support::ClusterTest {
 protected:
  void SetUp() override {
    ClusterTest::SetUp();
    certs_ = (dir_ / "certs").string();
    const absl::Status made = MakeCertFolder(certs_, {"ppcoord", "w0", "w1"}, {"ops"});
    ASSERT_TRUE(made.ok()) << made;
    deny_ = (dir_ / "deny").string();
    std::ofstream(deny_) << "# SHA-256 fingerprints of revoked certificates\n";
  }

  // ppcoord with TLS (no token file) and `flags`; workers w0.. with `worker_flags`; the
  // harness's stub is an admin by the "ops" certificate.
  void StartSecureCluster(int workers, const std::vector<std::string>& flags = {},
                          const std::vector<std::string>& worker_flags = {}) {
    absl::StatusOr<std::unique_ptr<testing_support::Cluster>> cluster = security_test::
        StartSecureCluster({.certs = certs_,
                            .root = dir_.string(),
                            .cluster_dir = (dir_ / "cluster").string(),
                            .bin_dir = BinDir(),
                            .coordinator_flags = flags,
                            .worker_flags = worker_flags,
                            .credentials = ClientCredentials(certs_, "ops", ""),
                            .workers = workers});
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
  }

  // Stubs as the holder of `cert`'s certificate.
  std::unique_ptr<pp::v1::Coordinator::Stub> Jobs(const std::string& cert) const {
    return pp::v1::Coordinator::NewStub(grpc::CreateChannel(
        cluster_->coordinator().grpc, ClientCredentials(certs_, cert, "")));
  }
  std::unique_ptr<pp::v1::WorkerRegistry::Stub> Registry(const std::string& cert) const {
    return pp::v1::WorkerRegistry::NewStub(grpc::CreateChannel(
        cluster_->coordinator().grpc, ClientCredentials(certs_, cert, "")));
  }
  std::unique_ptr<pp::v1::Worker::Stub> Worker(const std::string& name,
                                               const std::string& cert) const {
    return pp::v1::Worker::NewStub(grpc::CreateChannel(cluster_->worker_addresses(name).grpc,
                                                       ClientCredentials(certs_, cert, "")));
  }

  static grpc::Status KvSet(pp::v1::WorkerRegistry::Stub& stub, const std::string& key) {
    grpc::ClientContext context;
    SetDeadline(context);
    pp::v1::KvSetRequest request;
    request.set_key(key);
    request.set_value("v");
    pp::v1::KvSetResponse response;
    return stub.KvSet(&context, request, &response);
  }
  static grpc::Status GetStatus(pp::v1::Worker::Stub& stub, pp::v1::WorkerStatus* status) {
    grpc::ClientContext context;
    SetDeadline(context);
    return stub.GetStatus(&context, pp::v1::GetStatusRequest(), status);
  }

  // Appends the openssl fingerprint line of `cert`'s certificate to `file`.
  void Deny(const std::string& file, const std::string& cert) const {
    absl::StatusOr<std::string> line = FingerprintLine(certs_, cert);
    ASSERT_TRUE(line.ok()) << line.status();
    std::ofstream(file, std::ios::app) << *line;
  }

  std::string certs_;
  std::string deny_;
};

TEST_F(IdentityTest, AWorkerCertificateIsNoAdminOnTheJobApi) {
  // No workers: the job stays queued until it is cancelled.
  ASSERT_NO_FATAL_FAILURE(StartSecureCluster(0));
  absl::StatusOr<std::string> id = testing_support::SubmitJob(cluster_->stub(), SpecFrom(R"pb(
    name: "queued"
    model { n_layers: 2 seq_len: 32 d_model: 32 n_heads: 4 }
    parallel { pipeline: 2 }
    train { steps: 3 microbatches: 4 microbatch_size: 2 }
  )pb"));
  ASSERT_TRUE(id.ok()) << id.status() << cluster_->Logs();
  for (const char* holder : {"w0", "ppcoord"}) {
    const grpc::Status listed = ListJobs(*Jobs(holder));
    EXPECT_EQ(listed.error_code(), grpc::StatusCode::PERMISSION_DENIED) << holder;
    EXPECT_THAT(listed.error_message(), AllOf(HasSubstr("pp.v1.Coordinator/ListJobs"),
                                              HasSubstr("is not an admin certificate")));
    const grpc::Status cancelled = Cancel(*Jobs(holder), *id);
    EXPECT_EQ(cancelled.error_code(), grpc::StatusCode::PERMISSION_DENIED) << holder;
    EXPECT_THAT(cancelled.error_message(), HasSubstr("pp.v1.Coordinator/CancelJob"));
  }
  absl::StatusOr<pp::v1::Job> job = testing_support::GetJob(cluster_->stub(), *id);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), pp::v1::QUEUED) << "a refused CancelJob changed nothing";
  EXPECT_TRUE(ListJobs(*Jobs("ops")).ok()) << "an admin certificate is an admin";
}

TEST_F(IdentityTest, AWorkerIsNamedByItsCommonNameOnly) {
  ASSERT_NO_FATAL_FAILURE(StartSecureCluster(1));
  // Every certificate here also names localhost and 127.0.0.1, for the TLS host check only.
  for (const char* alias : {"localhost", "127.0.0.1"}) {
    const grpc::Status registered = Register(*Registry("w1"), alias);
    EXPECT_EQ(registered.error_code(), grpc::StatusCode::PERMISSION_DENIED) << alias;
    EXPECT_THAT(registered.error_message(),
                AllOf(HasSubstr("pp.v1.WorkerRegistry/RegisterWorker"),
                      HasSubstr(absl::StrCat("\"", alias, "\" is not in the caller's certificate"))));
    EXPECT_EQ(Heartbeat(*Registry("w0"), alias).error_code(), grpc::StatusCode::PERMISSION_DENIED)
        << alias;
  }
  EXPECT_TRUE(Register(*Registry("w1"), "w1").ok());
  absl::StatusOr<std::vector<pp::v1::WorkerInfo>> workers =
      testing_support::ListWorkers(cluster_->stub());
  ASSERT_TRUE(workers.ok()) << workers.status();
  for (const pp::v1::WorkerInfo& worker : *workers) {
    EXPECT_TRUE(worker.name() == "w0" || worker.name() == "w1") << worker.name();
  }
}

TEST_F(IdentityTest, AWorkersStatusIsForTheCoordinatorOnly) {
  ASSERT_NO_FATAL_FAILURE(StartSecureCluster(2));
  for (const char* caller : {"w1", "ops"}) {
    pp::v1::WorkerStatus status;
    const grpc::Status refused = GetStatus(*Worker("w0", caller), &status);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::PERMISSION_DENIED) << caller;
    EXPECT_THAT(refused.error_message(),
                AllOf(HasSubstr("pp.v1.Worker/GetStatus"), HasSubstr("only the coordinator")));
    EXPECT_TRUE(status.name().empty()) << caller;
  }
  pp::v1::WorkerStatus status;
  const grpc::Status probed = GetStatus(*Worker("w0", "ppcoord"), &status);
  EXPECT_TRUE(probed.ok()) << probed.error_message();
  EXPECT_EQ(status.name(), "w0");
}

// A worker's log lines reach users only through ppcoord's GetJobLogs: ReadTaskLog on the worker
// takes the coordinator's certificate alone.
TEST_F(IdentityTest, AWorkersTaskLogIsForTheCoordinatorOnlyAndUsersReadItThroughIt) {
  ASSERT_NO_FATAL_FAILURE(StartSecureCluster(2));
  absl::StatusOr<std::string> id =
      testing_support::SubmitJob(cluster_->stub(), SpecFrom(R"pb(
                                   name: "logged"
                                   model { n_layers: 2 seq_len: 32 d_model: 32 n_heads: 4 }
                                   parallel { pipeline: 2 }
                                   train { steps: 3 microbatches: 4 microbatch_size: 2 }
                                 )pb"));
  ASSERT_TRUE(id.ok()) << id.status() << cluster_->Logs();
  absl::StatusOr<pp::v1::Job> done =
      testing_support::WaitSucceeded(cluster_->stub(), *id, absl::Seconds(120));
  ASSERT_TRUE(done.ok()) << done.status() << cluster_->Logs();
  auto read = [&](const std::string& caller, pp::v1::ReadTaskLogResponse* lines) {
    grpc::ClientContext context;
    SetDeadline(context);
    pp::v1::ReadTaskLogRequest request;
    request.set_job_id(*id);
    return Worker("w0", caller)->ReadTaskLog(&context, request, lines);
  };
  for (const char* caller : {"w1", "ops"}) {
    pp::v1::ReadTaskLogResponse lines;
    const grpc::Status refused = read(caller, &lines);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::PERMISSION_DENIED) << caller;
    EXPECT_THAT(refused.error_message(),
                AllOf(HasSubstr("pp.v1.Worker/ReadTaskLog"), HasSubstr("only the coordinator")));
    EXPECT_EQ(lines.lines_size(), 0) << caller;
  }
  pp::v1::ReadTaskLogResponse lines;
  const grpc::Status read_by_coordinator = read("ppcoord", &lines);
  EXPECT_TRUE(read_by_coordinator.ok()) << read_by_coordinator.error_message();
  EXPECT_GT(lines.lines_size(), 0);

  // ppcoord reads both workers over its mutual TLS.
  grpc::ClientContext context;
  SetDeadline(context);
  pp::v1::GetJobLogsRequest request;
  request.set_job_id(*id);
  pp::v1::GetJobLogsResponse page;
  const grpc::Status logs = cluster_->stub().GetJobLogs(&context, request, &page);
  ASSERT_TRUE(logs.ok()) << logs.error_message();
  EXPECT_TRUE(page.unreachable().empty());
  int ended = 0;
  for (const pp::v1::JobLogLine& line : page.lines()) {
    ended += absl::StartsWith(line.text(), "task ended: ok after step 3");
  }
  EXPECT_EQ(ended, 2) << "one end line per rank";
}

TEST_F(IdentityTest, ADeniedCertificateIsRefusedOnceCoordinatorGetsSighup) {
  ASSERT_NO_FATAL_FAILURE(StartSecureCluster(2, {"--deny_certs=" + deny_}));
  ASSERT_TRUE(Heartbeat(*Registry("w1"), "w1").ok());
  ASSERT_NO_FATAL_FAILURE(Deny(deny_, "w1"));
  testing_support::Process& ppcoord = cluster_->coordinator_process();
  ppcoord.Signal(SIGHUP);
  ASSERT_TRUE(Eventually(
      [&] {
        return Heartbeat(*Registry("w1"), "w1").error_code() ==
               grpc::StatusCode::UNAUTHENTICATED;
      },
      kReloadTimeout))
      << cluster_->Logs();
  const grpc::Status kv = KvSet(*Registry("w1"), "job/1/x");
  EXPECT_EQ(kv.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(kv.error_message(),
              AllOf(HasSubstr("pp.v1.WorkerRegistry/KvSet"), HasSubstr("w1"),
                    HasSubstr("is revoked (--deny_certs=" + deny_ + ")")));
  const grpc::Status listed = ListJobs(*Jobs("w1"));
  EXPECT_EQ(listed.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(listed.error_message(), HasSubstr("pp.v1.Coordinator/ListJobs"));
  // Everyone else goes on; SIGHUP did not stop ppcoord.
  EXPECT_TRUE(Heartbeat(*Registry("w0"), "w0").ok());
  EXPECT_TRUE(ListJobs(*Jobs("ops")).ok());
  EXPECT_TRUE(ppcoord.running());

  // A bad file at reload keeps the list from before, with one line saying so.
  std::ofstream(deny_) << "not a fingerprint\n";
  ppcoord.Signal(SIGHUP);
  const std::string kept = "--deny_certs=" + deny_ +
                           " line 1: not a SHA-256 certificate fingerprint (64 hex digits, colons "
                           "allowed); still denying the 1 certificate read before";
  ASSERT_TRUE(Eventually([&] { return absl::StrContains(ppcoord.Log(), kept); }, kReloadTimeout))
      << ppcoord.LogTail();
  EXPECT_EQ(Heartbeat(*Registry("w1"), "w1").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(Heartbeat(*Registry("w0"), "w0").ok());
  EXPECT_TRUE(ppcoord.running());
}

TEST_F(IdentityTest, AWorkerRefusesADeniedCoordinatorCertificateOnceItGetsSighup) {
  const std::string worker_deny = (dir_ / "worker-deny").string();
  std::ofstream(worker_deny) << "";
  ASSERT_NO_FATAL_FAILURE(StartSecureCluster(1, {}, {"--deny_certs=" + worker_deny}));
  pp::v1::WorkerStatus status;
  ASSERT_TRUE(GetStatus(*Worker("w0", "ppcoord"), &status).ok());
  ASSERT_NO_FATAL_FAILURE(Deny(worker_deny, "ppcoord"));
  cluster_->worker("w0").Signal(SIGHUP);
  grpc::Status refused;
  ASSERT_TRUE(Eventually(
      [&] {
        refused = GetStatus(*Worker("w0", "ppcoord"), &status);
        return refused.error_code() == grpc::StatusCode::UNAUTHENTICATED;
      },
      kReloadTimeout))
      << cluster_->Logs();
  EXPECT_THAT(refused.error_message(),
              AllOf(HasSubstr("pp.v1.Worker/GetStatus"), HasSubstr("ppcoord"),
                    HasSubstr("is revoked")));
  EXPECT_TRUE(cluster_->worker("w0").running());
}

// A deny-list that cannot be read stops a daemon at start, with one line naming the file.
TEST_F(IdentityTest, ABadDenyFileStopsTheDaemonAtStart) {
  std::ofstream(deny_, std::ios::app) << "zz-not-hex\n";
  std::vector<std::string> ppcoord = {BinDir() + "/ppcoord", "--grpc=127.0.0.1:0",
                                      "--metrics=127.0.0.1:0",
                                      "--data_dir=" + (dir_ / "coord").string(),
                                      "--deny_certs=" + deny_};
  for (const std::string& flag : TlsFlags(certs_, "ppcoord")) ppcoord.push_back(flag);
  const std::string missing = (dir_ / "missing").string();
  std::vector<std::string> ppworker = {BinDir() + "/ppworker", "--coordinator=127.0.0.1:1",
                                       "--metrics=127.0.0.1:0", "--deny_certs=" + missing};
  for (const std::string& flag : TlsFlags(certs_, "w0")) ppworker.push_back(flag);
  for (const auto& [argv, line] :
       {std::pair(ppcoord, "ppcoord: --deny_certs=" + deny_ +
                               " line 2: not a SHA-256 certificate fingerprint"),
        std::pair(ppworker, "ppworker: --deny_certs=" + missing + ": cannot read")}) {
    absl::StatusOr<testing_support::CommandResult> refused =
        testing_support::RunCommand(argv, absl::Seconds(20));
    ASSERT_TRUE(refused.ok()) << refused.status();
    EXPECT_EQ(refused->exit_code, 2) << argv[0] << ": " << refused->err;
    EXPECT_THAT(refused->err, HasSubstr(line));
    const std::vector<std::string> lines =
        absl::StrSplit(refused->err, '\n', absl::SkipWhitespace());
    EXPECT_EQ(lines.size(), 1u) << refused->err;
  }
}

}  // namespace
}  // namespace pp::security_test
