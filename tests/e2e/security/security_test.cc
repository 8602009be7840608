// Security with real processes: ppcoord and ppworkers on loopback with mutual TLS, certificates
// made by openssl in the test, a token file with one user per role and --data_root /
// --checkpoint_root on every daemon. Each test calls the daemons as an attacker or a user would,
// over its own gRPC channel.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/tls.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
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

using ::pp::testing_support::GetJob;
using ::pp::testing_support::JobWatch;
using ::pp::testing_support::SubmitJob;
using ::pp::testing_support::WaitSucceeded;
using ::testing::HasSubstr;

class SecurityTest : public testing_support::ClusterTest {
 protected:
  void SetUp() override {
    ClusterTest::SetUp();
    certs_ = (dir_ / "certs").string();
    const absl::Status made = MakeCertFolder(certs_, {"ppcoord", "w0", "w1"}, {"ops"});
    ASSERT_TRUE(made.ok()) << made;
    const absl::Status rogue_ca = MakeCa(certs_, "rogue-ca");
    ASSERT_TRUE(rogue_ca.ok()) << rogue_ca;
    const absl::Status rogue = MakeCert(certs_, "rogue-ca", "w9");
    ASSERT_TRUE(rogue.ok()) << rogue;
    tokens_ = certs_ + "/tokens";
    std::ofstream(tokens_) << "# TOKEN ROLE NAME\n"
                              "tok-view view vera\n"
                              "tok-alice submit alice\n"
                              "tok-bob submit bob\n";
  }

  std::vector<std::string> TlsFlags(const std::string& name) const {
    return security_test::TlsFlags(certs_, name);
  }

  // ppcoord with TLS and tokens; the harness's stub is an admin by the "ops" certificate.
  void StartSecureCluster(int workers) {
    absl::StatusOr<std::unique_ptr<testing_support::Cluster>> cluster = security_test::
        StartSecureCluster({.certs = certs_,
                            .root = dir_.string(),
                            .cluster_dir = (dir_ / "cluster").string(),
                            .bin_dir = BinDir(),
                            .coordinator_flags = {"--auth_tokens=" + tokens_},
                            .credentials = Credentials("ops", ""),
                            .workers = workers});
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
  }

  // TLS trusting the CA, with `cert`'s client certificate (none when empty) and `token` as a
  // bearer token (none when empty).
  std::shared_ptr<grpc::ChannelCredentials> Credentials(const std::string& cert,
                                                        const std::string& token,
                                                        const std::string& ca = "ca") const {
    return ClientCredentials(certs_, cert, token, ca);
  }

  std::unique_ptr<pp::v1::Coordinator::Stub> Client(
      std::shared_ptr<grpc::ChannelCredentials> credentials) const {
    return pp::v1::Coordinator::NewStub(
        grpc::CreateChannel(cluster_->coordinator().grpc, std::move(credentials)));
  }
  std::unique_ptr<pp::v1::WorkerRegistry::Stub> Registry(
      std::shared_ptr<grpc::ChannelCredentials> credentials) const {
    return pp::v1::WorkerRegistry::NewStub(
        grpc::CreateChannel(cluster_->coordinator().grpc, std::move(credentials)));
  }
  std::unique_ptr<pp::v1::Worker::Stub> Worker(
      const std::string& name, std::shared_ptr<grpc::ChannelCredentials> credentials) const {
    return pp::v1::Worker::NewStub(
        grpc::CreateChannel(cluster_->worker_addresses(name).grpc, std::move(credentials)));
  }

  pp::v1::JobSpec Spec() const {
    pp::v1::JobSpec spec = SpecFrom(R"pb(
      name: "secure"
      model { n_layers: 2 seq_len: 32 d_model: 32 n_heads: 4 }
      parallel { pipeline: 2 }
      train { steps: 3 microbatches: 4 microbatch_size: 2 }
    )pb");
    return spec;
  }

  std::string certs_;
  std::string tokens_;
};

TEST_F(SecurityTest, PlaintextClientsCannotTalkToTlsDaemons) {
  ASSERT_NO_FATAL_FAILURE(StartSecureCluster(1));
  auto plain = Client(grpc::InsecureChannelCredentials());
  EXPECT_EQ(ListJobs(*plain).error_code(), grpc::StatusCode::UNAVAILABLE);
  auto worker = Worker("w0", grpc::InsecureChannelCredentials());
  grpc::ClientContext context;
  SetDeadline(context);
  pp::v1::WorkerStatus status;
  EXPECT_EQ(worker->GetStatus(&context, pp::v1::GetStatusRequest(), &status).error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

TEST_F(SecurityTest, TheJobApiWantsAKnownToken) {
  ASSERT_NO_FATAL_FAILURE(StartSecureCluster(0));
  const grpc::Status none = ListJobs(*Client(Credentials("", "")));
  EXPECT_EQ(none.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(none.error_message(), HasSubstr("Bearer TOKEN"));
  const grpc::Status unknown = ListJobs(*Client(Credentials("", "tok-nobody")));
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(unknown.error_message(), HasSubstr("unknown token"));
  EXPECT_THAT(unknown.error_message(), ::testing::Not(HasSubstr("tok-nobody")));
  EXPECT_TRUE(ListJobs(*Client(Credentials("ops", ""))).ok()) << "an admin certificate is an admin";
}

TEST_F(SecurityTest, AViewTokenReadsButCannotSubmit) {
  ASSERT_NO_FATAL_FAILURE(StartSecureCluster(0));
  auto viewer = Client(Credentials("", "tok-view"));
  EXPECT_TRUE(ListJobs(*viewer).ok());
  const grpc::Status submit = Submit(*viewer, Spec());
  EXPECT_EQ(submit.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(submit.error_message(), HasSubstr("user vera has role view"));
}

TEST_F(SecurityTest, ASubmitTokenOwnsItsJobsOnly) {
  // No workers: the job stays queued until it is cancelled.
  ASSERT_NO_FATAL_FAILURE(StartSecureCluster(0));
  auto alice = Client(Credentials("", "tok-alice"));
  auto bob = Client(Credentials("", "tok-bob"));
  std::string id;
  ASSERT_TRUE(Submit(*alice, Spec(), &id).ok());
  absl::StatusOr<pp::v1::Job> job = GetJob(*alice, id);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->owner(), "alice");
  absl::StatusOr<std::unique_ptr<JobWatch>> watch = JobWatch::Open(*alice, id, kCallTimeout);
  ASSERT_TRUE(watch.ok()) << watch.status();

  const grpc::Status stolen = Cancel(*bob, id);
  EXPECT_EQ(stolen.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(stolen.error_message(), HasSubstr("belongs to alice"));
  ASSERT_TRUE(Cancel(*alice, id).ok());
  absl::StatusOr<std::vector<pp::v1::JobEvent>> events = (*watch)->Rest();
  ASSERT_TRUE(events.ok()) << events.status();
  absl::StatusOr<pp::v1::Job> cancelled = GetJob(*bob, id);
  ASSERT_TRUE(cancelled.ok());
  EXPECT_EQ(cancelled->state(), pp::v1::CANCELLED);
}

TEST_F(SecurityTest, AJobRunsOverMutualTls) {
  ASSERT_NO_FATAL_FAILURE(StartSecureCluster(2));
  auto alice = Client(Credentials("", "tok-alice"));
  std::string id;
  ASSERT_TRUE(Submit(*alice, Spec(), &id).ok());
  absl::StatusOr<pp::v1::Job> done = WaitSucceeded(*alice, id, absl::Seconds(60));
  ASSERT_TRUE(done.ok()) << done.status() << cluster_->Logs();
}

TEST_F(SecurityTest, OnlyCaWorkersRegisterAndOnlyUnderTheirOwnName) {
  ASSERT_NO_FATAL_FAILURE(StartSecureCluster(1));
  EXPECT_EQ(Register(*Registry(Credentials("w9", "", "ca")), "w9").error_code(),
            grpc::StatusCode::UNAVAILABLE)
      << "a certificate of another CA fails the handshake";
  const grpc::Status anonymous = Register(*Registry(Credentials("", "")), "w1");
  EXPECT_EQ(anonymous.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  const grpc::Status impostor = Register(*Registry(Credentials("w1", "")), "w0");
  EXPECT_EQ(impostor.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(impostor.error_message(), HasSubstr("\"w0\" is not in the caller's certificate"));
  EXPECT_TRUE(Register(*Registry(Credentials("w1", "")), "w1").ok());

  grpc::ClientContext context;
  SetDeadline(context);
  pp::v1::KvGetRequest get;
  get.add_keys("any/key");
  pp::v1::KvGetResponse values;
  EXPECT_EQ(Registry(Credentials("", ""))->KvGet(&context, get, &values).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(SecurityTest, WorkersTakeTasksOnlyFromTheCoordinator) {
  ASSERT_NO_FATAL_FAILURE(StartSecureCluster(2));
  auto from_peer = Worker("w0", Credentials("w1", ""));
  grpc::ClientContext context;
  SetDeadline(context);
  pp::v1::AbortTaskRequest abort;
  abort.set_job_id("any");
  abort.set_attempt(1000000);
  pp::v1::AbortTaskResponse aborted;
  const grpc::Status forged = from_peer->AbortTask(&context, abort, &aborted);
  EXPECT_EQ(forged.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(forged.error_message(), HasSubstr("only the coordinator (ppcoord)"));
  grpc::ClientContext run_context;
  SetDeadline(run_context);
  pp::v1::TaskPlan plan;
  plan.set_job_id("any");
  pp::v1::RunTaskResponse ran;
  EXPECT_EQ(from_peer->RunTask(&run_context, plan, &ran).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(SecurityTest, PathsOutsideTheRootsAreRefused) {
  ASSERT_NO_FATAL_FAILURE(StartSecureCluster(1));
  pp::v1::JobSpec outside = Spec();
  outside.mutable_data()->set_path("/etc/passwd");
  const grpc::Status submit = Submit(*Client(Credentials("", "tok-alice")), outside);
  EXPECT_EQ(submit.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(submit.error_message(),
              HasSubstr("\"/etc/passwd\" is outside the allowed --data_root"));

  // A symlink inside the root that leads out of it is outside too.
  const std::string link = (dir_ / "passwd-link").string();
  std::filesystem::create_symlink("/etc/passwd", link);
  auto as_coordinator = Worker("w0", Credentials("ppcoord", ""));
  for (const std::string& path :
       {std::string("/etc/passwd"), link, (dir_ / ".." / "elsewhere.txt").string()}) {
    grpc::ClientContext context;
    SetDeadline(context);
    pp::v1::TaskPlan plan;
    plan.set_job_id("forged");
    *plan.mutable_spec() = Spec();
    plan.mutable_spec()->mutable_data()->set_path(path);
    pp::v1::RunTaskResponse ran;
    const grpc::Status status = as_coordinator->RunTask(&context, plan, &ran);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << path;
    EXPECT_THAT(status.error_message(), HasSubstr("is outside the allowed --data_root")) << path;
  }
  grpc::ClientContext context;
  SetDeadline(context);
  pp::v1::TaskPlan plan;
  plan.set_job_id("forged");
  *plan.mutable_spec() = Spec();
  plan.set_checkpoint_dir("/tmp");
  pp::v1::RunTaskResponse ran;
  const grpc::Status status = as_coordinator->RunTask(&context, plan, &ran);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("outside the allowed --checkpoint_root"));
}

// Evaluation data and initial weights are files the job reads too (common/job_spec.h
// SpecInputPaths): the same roots hold for them at SubmitJob and at RunTask.
TEST_F(SecurityTest, EveryFileASpecReadsIsUnderTheRoots) {
  ASSERT_NO_FATAL_FAILURE(StartSecureCluster(1));
  pp::v1::JobSpec eval_outside = Spec();
  eval_outside.mutable_eval()->set_batches(1);
  eval_outside.mutable_eval()->mutable_data()->set_path("/etc/passwd");
  const grpc::Status eval_submit = Submit(*Client(Credentials("", "tok-alice")), eval_outside);
  EXPECT_EQ(eval_submit.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(eval_submit.error_message(),
              HasSubstr("eval.data.path \"/etc/passwd\" is outside the allowed --data_root"));
  pp::v1::JobSpec init_outside = Spec();
  init_outside.mutable_model()->set_init_from("/etc");
  const grpc::Status init_submit = Submit(*Client(Credentials("", "tok-alice")), init_outside);
  EXPECT_EQ(init_submit.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(init_submit.error_message(),
              HasSubstr("model.init_from \"/etc\" is outside the allowed --data_root"));

  auto as_coordinator = Worker("w0", Credentials("ppcoord", ""));
  for (const bool eval : {true, false}) {
    grpc::ClientContext context;
    SetDeadline(context);
    pp::v1::TaskPlan plan;
    plan.set_job_id("forged");
    *plan.mutable_spec() = Spec();
    if (eval) {
      plan.mutable_spec()->mutable_eval()->mutable_data()->set_path("/etc/passwd");
    } else {
      plan.mutable_spec()->mutable_model()->set_init_from("/etc");
    }
    pp::v1::RunTaskResponse ran;
    const grpc::Status status = as_coordinator->RunTask(&context, plan, &ran);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(),
                HasSubstr(eval ? "task plan eval.data.path" : "task plan model.init_from"));
  }
}

TEST_F(SecurityTest, PpctlSpeaksTlsWithItsTokenFile) {
  ASSERT_NO_FATAL_FAILURE(StartSecureCluster(0));
  const std::string token_file = certs_ + "/alice.token";
  std::ofstream(token_file) << "tok-alice\n";
  const std::string ppctl = cluster_->ppctl();
  const std::string at = "--coordinator=" + cluster_->coordinator().grpc;
  const std::string ca = "--ca=" + Files(certs_, "ca").cert;
  auto run = [](const std::vector<std::string>& argv) {
    absl::StatusOr<testing_support::CommandResult> result =
        testing_support::RunCommand(argv, absl::Seconds(30));
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *result : testing_support::CommandResult{};
  };
  const testing_support::CommandResult listed =
      run({ppctl, "list", at, ca, "--token_file=" + token_file});
  EXPECT_EQ(listed.exit_code, 0) << listed.err;

  const testing_support::CommandResult no_token =
      run({ppctl, "list", at, ca, "--token_file=" + certs_ + "/missing"});
  EXPECT_NE(no_token.exit_code, 0);
  EXPECT_THAT(no_token.err, HasSubstr("--token_file=" + certs_ + "/missing: cannot read"));

  const std::string empty_home = (dir_ / "home").string();
  const testing_support::CommandResult anonymous =
      run({"/usr/bin/env", "-u", "PPCTL_TOKEN_FILE", "HOME=" + empty_home, ppctl, "list", at, ca});
  EXPECT_NE(anonymous.exit_code, 0);
  EXPECT_THAT(anonymous.err, HasSubstr("not authenticated"));

  const testing_support::CommandResult plaintext =
      run({ppctl, "list", at, "--rpc_timeout=2s", "--token_file=" + token_file});
  EXPECT_NE(plaintext.exit_code, 0);
  EXPECT_THAT(plaintext.err, HasSubstr("a TLS ppcoord needs --ca"));
}

// ppctl up runs secure by default: its printed line reaches the cluster with its CA and token,
// and nothing reaches it without them.
TEST_F(SecurityTest, PpctlUpRunsSecureAndSaysHowToReachIt) {
  const std::string job = (dir_ / "long.json").string();
  std::ofstream(job) << R"({"name": "long",
      "model": {"vocabSize": 256, "seqLen": 32, "dModel": 32, "nHeads": 2, "nLayers": 2},
      "parallel": {"pipeline": 2, "schedule": "1f1b"},
      "train": {"steps": 100000, "microbatches": 4, "microbatchSize": 4},
      "data": {"format": "generated", "generatedTokens": 65536, "generatedSeed": 3}})";
  const std::string ppctl = BinDir() + "/ppctl";
  const std::string log = (dir_ / "up.log").string();
  absl::StatusOr<std::unique_ptr<testing_support::Process>> up = testing_support::Process::Start(
      {ppctl, "up", "--workers=2", "--job=" + job, "--data_dir=" + (dir_ / "up").string()}, log);
  ASSERT_TRUE(up.ok()) << up.status();
  const std::regex reach(
      R"(reach it: ppctl (--coordinator=\S+) (--ca=\S+) (--token_file=\S+) list)");
  std::smatch match;
  std::string out;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  // The reach line comes before the submission; "job long-1:" after it, with the job's id.
  auto ready = [&] {
    return std::regex_search(out, match, reach) && out.find("\njob long-1:") != std::string::npos;
  };
  while (!ready() && (*up)->running() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
    (void)(*up)->Wait(absl::ZeroDuration());
    out = (*up)->Log();
  }
  ASSERT_TRUE(ready()) << out;
  const std::string at = match[1], ca = match[2], token = match[3];
  auto run = [](const std::vector<std::string>& argv) {
    absl::StatusOr<testing_support::CommandResult> result =
        testing_support::RunCommand(argv, absl::Seconds(30));
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *result : testing_support::CommandResult{};
  };
  const testing_support::CommandResult listed = run({ppctl, "list", at, ca, token});
  EXPECT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_THAT(listed.out, HasSubstr("long-1"));
  const testing_support::CommandResult anonymous =
      run({"/usr/bin/env", "-u", "PPCTL_TOKEN_FILE", "HOME=" + (dir_ / "home").string(), ppctl,
           "list", at, ca});
  EXPECT_THAT(anonymous.err, HasSubstr("not authenticated"));
  const testing_support::CommandResult plaintext =
      run({ppctl, "list", at, token, "--rpc_timeout=2s"});
  EXPECT_THAT(plaintext.err, HasSubstr("a TLS ppcoord needs --ca"));
  (*up)->Signal(SIGTERM);
  EXPECT_TRUE((*up)->Wait(absl::Seconds(30)).ok()) << (*up)->Log();
}

// Off loopback, even with TLS, a daemon must be told which folders jobs may name.
TEST_F(SecurityTest, DaemonsOffLoopbackNeedTheirRoots) {
  const std::string bin = BinDir();
  std::vector<std::string> ppcoord = {bin + "/ppcoord", "--grpc=0.0.0.0:0", "--metrics=127.0.0.1:0",
                                      "--data_dir=" + (dir_ / "coord").string()};
  for (const std::string& flag : TlsFlags("ppcoord")) ppcoord.push_back(flag);
  std::vector<std::string> ppworker = {bin + "/ppworker", "--coordinator=127.0.0.1:1",
                                       "--grpc=0.0.0.0:0", "--metrics=127.0.0.1:0",
                                       "--data_root=" + dir_.string()};
  for (const std::string& flag : TlsFlags("w0")) ppworker.push_back(flag);
  for (const auto& [argv, missing] :
       {std::pair(ppcoord, "--data_root"), std::pair(ppworker, "--checkpoint_root")}) {
    absl::StatusOr<testing_support::CommandResult> refused =
        testing_support::RunCommand(argv, absl::Seconds(20));
    ASSERT_TRUE(refused.ok()) << refused.status();
    EXPECT_EQ(refused->exit_code, 2) << argv[0];
    EXPECT_THAT(refused->err, HasSubstr(absl::StrCat(missing, " is needed with --grpc=0.0.0.0:0")));
  }
}

TEST_F(SecurityTest, PlaintextOffLoopbackNeedsInsecure) {
  const std::string ppcoord = BinDir() + "/ppcoord";
  const std::string data = (dir_ / "open").string();
  absl::StatusOr<testing_support::CommandResult> refused = testing_support::RunCommand(
      {ppcoord, "--grpc=0.0.0.0:0", "--metrics=127.0.0.1:0", "--data_dir=" + data},
      absl::Seconds(20));
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_EQ(refused->exit_code, 2);
  EXPECT_THAT(refused->err, HasSubstr("--grpc=0.0.0.0:0 is not a loopback address"));

  const std::string log = (dir_ / "insecure.log").string();
  absl::StatusOr<std::unique_ptr<testing_support::Process>> open = testing_support::Process::Start(
      {ppcoord, "--grpc=0.0.0.0:0", "--metrics=127.0.0.1:0", "--data_dir=" + data, "--insecure"},
      log);
  ASSERT_TRUE(open.ok()) << open.status();
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (!absl::StrContains((*open)->Log(), "ppcoord: serving") && (*open)->running() &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
    (void)(*open)->Wait(absl::ZeroDuration());
  }
  const std::string text = (*open)->Log();
  EXPECT_THAT(text, HasSubstr("ppcoord: serving"));
  EXPECT_THAT(text, HasSubstr("WARNING: --insecure"));
}

}  // namespace
}  // namespace pp::security_test
