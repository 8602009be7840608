// The files a job names, with real processes (docs/security.md "Files a job names"): ppcoord reads
// a spec's files only when the spec comes in (SubmitJob, PlanJob, ResumeJob), never under the
// lock its other RPCs and the workers' heartbeats wait on; PlanJob applies SubmitJob's
// --data_root, so a view token learns nothing of the files outside it; a file under a root is
// opened without following a symlink out of it, in ppcoord and in ppworker; and no refusal quotes
// a file's bytes.
#include <signal.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/checkpoint.h"
#include "common/hf_gpt2.h"
#include "common/job_spec.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "pp/v1/coordinator.grpc.pb.h"
#include "tests/e2e/security/calls.h"
#include "tests/e2e/security/test_certs.h"
#include "tests/support/cluster.h"
#include "tests/support/fixture.h"
#include "worker/trainer/trainer.h"

namespace pp::security_test {
namespace {

namespace fs = std::filesystem;
using ::pp::testing_support::GetJob;
using ::pp::testing_support::ListWorkers;
using ::pp::testing_support::SubmitJob;
using ::pp::testing_support::WaitForJob;
using ::pp::testing_support::WaitSucceeded;
using ::testing::HasSubstr;
using ::testing::Not;

// What a file outside the root holds: no answer may carry it.
constexpr char kSecret[] = "TOPSECRET-4f1c";
// The size of the data file that ppcoord must not read under its lock: sparse, all zero tokens.
// Reading it takes minutes on any machine (memory bandwidth alone), far past kCallTimeout.
constexpr uintmax_t kHugeDataBytes = uintmax_t{1} << 40;

bool Ended(const pp::v1::Job& job) {
  return job.state() == pp::v1::SUCCEEDED || job.state() == pp::v1::FAILED ||
         job.state() == pp::v1::CANCELLED;
}

class PlanningIoTest : public testing_support::ClusterTest {
 protected:
  void SetUp() override {
    ClusterTest::SetUp();
    certs_ = (dir_ / "certs").string();
    const absl::Status made = MakeCertFolder(certs_, {"ppcoord", "w0", "w1"}, {"ops"});
    ASSERT_TRUE(made.ok()) << made;
    tokens_ = certs_ + "/tokens";
    std::ofstream(tokens_) << "tok-view view vera\ntok-alice submit alice\n";
    outside_ = dir_.string() + "-outside";  // a sibling of the root: outside it
    fs::remove_all(outside_);
    fs::create_directories(outside_);
    std::ofstream(outside_ + "/secret.txt") << kSecret << " is not JSON, nor anyone's to read\n";
  }
  void TearDown() override {
    ClusterTest::TearDown();
    fs::remove_all(outside_);
  }

  // ppcoord with TLS, tokens and --data_root=dir_ (so are the workers); the harness's stub is an
  // admin by the "ops" certificate.
  void StartSecure(int workers) {
    absl::StatusOr<std::unique_ptr<testing_support::Cluster>> cluster =
        StartSecureCluster({.certs = certs_,
                            .root = dir_.string(),
                            .cluster_dir = (dir_ / "cluster").string(),
                            .bin_dir = BinDir(),
                            .coordinator_flags = {"--auth_tokens=" + tokens_},
                            .worker_flags = {},
                            .credentials = ClientCredentials(certs_, "ops", ""),
                            .workers = workers});
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
  }

  std::unique_ptr<pp::v1::Coordinator::Stub> Client(const std::string& token) const {
    return pp::v1::Coordinator::NewStub(grpc::CreateChannel(
        cluster_->coordinator().grpc, ClientCredentials(certs_, "", token)));
  }

  static grpc::Status Plan(pp::v1::Coordinator::Stub& stub, const pp::v1::JobSpec& spec) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kCallTimeout));
    pp::v1::PlanJobRequest request;
    *request.mutable_spec() = spec;
    pp::v1::PlanJobResponse response;
    return stub.PlanJob(&context, request, &response);
  }

  pp::v1::JobSpec Small() const {
    return SpecFrom(R"pb(
      name: "files"
      model { n_layers: 1 seq_len: 16 d_model: 16 n_heads: 2 }
      parallel { pipeline: 1 }
      train { steps: 1 microbatches: 2 microbatch_size: 2 }
    )pb");
  }

  // `n` uint16 tokens below 200 at `path`, and a spec reading them.
  pp::v1::JobSpec Uint16Spec(const std::string& path, int n) const {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    for (int i = 0; i < n; ++i) {
      const uint16_t token = static_cast<uint16_t>(i % 200);
      out.write(reinterpret_cast<const char*>(&token), 2);
    }
    pp::v1::JobSpec spec = Small();
    spec.mutable_data()->set_path(path);
    spec.mutable_data()->set_format("uint16");
    return spec;
  }

  // Replaces `path` at once (a rename) with a sparse file of kHugeDataBytes zero tokens: a valid
  // uint16 corpus that takes minutes to read through.
  static void MakeHuge(const std::string& path) {
    const std::string huge = path + ".huge";
    std::ofstream(huge).close();
    std::error_code error;
    fs::resize_file(huge, kHugeDataBytes, error);
    ASSERT_FALSE(error) << "cannot make a sparse file of " << kHugeDataBytes << " bytes: "
                        << error.message();
    fs::rename(huge, path);
  }

  std::string certs_, tokens_, outside_;
};

// parallel.schedule "auto": once its workers are placed, ppcoord decides the plan under its lock
// (calibration.cc Decide). That decision used to validate the spec again, reading the whole data
// file under the lock: every other RPC and every heartbeat waited for it.
//
// Why this cannot flake: the decision's input is arranged before it runs, with no race against
// the coordinator. Job A calibrates w0 and w1 and ends; w1 is killed and seen DOWN, so job B,
// submitted next (its small data file read then), waits QUEUED. Only then is B's data file
// replaced by a huge one, and w1 started again: B is placed on the same workers, reuses A's
// cached calibration and is decided at once. Reading the huge file takes minutes, so a GetJob
// issued while the old code decides waits far past its 10 s deadline, on any machine; the new
// code reads no file there and answers in milliseconds, the 10 s leaving room for any load. Every
// wait is bounded; the polls only observe state.
TEST_F(PlanningIoTest, DecidingAnAutoJobReadsNoDataFileUnderTheLock) {
  ASSERT_NO_FATAL_FAILURE(StartSecure(2));
  const std::string data = (dir_ / "tokens.u16").string();
  pp::v1::JobSpec spec = Uint16Spec(data, 4096);
  spec.set_name("auto");
  spec.mutable_model()->set_n_layers(2);
  spec.mutable_train()->set_steps(2);
  spec.mutable_train()->set_microbatches(4);
  spec.mutable_parallel()->set_pipeline(2);
  spec.mutable_parallel()->set_schedule("auto");
  spec.mutable_parallel()->set_chunks(0);
  spec.mutable_parallel()->clear_partition();
  pp::v1::AutoPlanSpec* bounds = spec.mutable_parallel()->mutable_auto_plan();
  bounds->set_calibration_seconds(1);
  bounds->set_trial_steps(-1);
  bounds->set_max_replans(-1);
  auto alice = Client("tok-alice");
  absl::StatusOr<std::string> first = SubmitJob(*alice, spec);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<pp::v1::Job> calibrated = WaitSucceeded(*alice, *first, absl::Seconds(120));
  ASSERT_TRUE(calibrated.ok()) << calibrated.status() << cluster_->Logs();

  cluster_->worker("w1").Signal(SIGKILL);
  const absl::Time down_by = absl::Now() + absl::Seconds(30);
  bool down = false;
  while (!down && absl::Now() < down_by) {
    absl::StatusOr<std::vector<pp::v1::WorkerInfo>> workers = ListWorkers(cluster_->stub());
    ASSERT_TRUE(workers.ok()) << workers.status();
    for (const pp::v1::WorkerInfo& w : *workers) {
      down |= w.name() == "w1" && w.state() == pp::v1::DOWN;
    }
    if (!down) absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_TRUE(down) << "w1 was not seen DOWN\n" << cluster_->Logs();
  absl::StatusOr<std::string> second = SubmitJob(*alice, spec);
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_NO_FATAL_FAILURE(MakeHuge(data));
  testing_support::WorkerOptions w1;
  w1.flags = TlsFlags(certs_, "w1");
  ASSERT_TRUE(cluster_->LaunchWorker("w1", w1).ok()) << cluster_->Logs();

  auto viewer = Client("tok-view");
  const absl::Time placed_by = absl::Now() + absl::Seconds(90);
  absl::StatusOr<pp::v1::Job> job;
  while (true) {
    const absl::Time asked = absl::Now();
    job = GetJob(*viewer, *second);
    ASSERT_TRUE(job.ok()) << "GetJob while the job was placed and decided: " << job.status()
                          << " after " << absl::Now() - asked << "\n" << cluster_->Logs();
    if (job->state() == pp::v1::RUNNING || Ended(*job) || absl::Now() >= placed_by) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(job->state(), pp::v1::RUNNING) << job->ShortDebugString() << cluster_->Logs();
  EXPECT_TRUE(job->plan().calibration().cached()) << "decided from the first job's calibration";
}

// A restarted ppcoord plans its stored jobs again under its lock, before it serves: reading their
// data files there delayed its start by as long as they take to read. Deterministic as above: the
// huge file is in place before ppcoord restarts, and the restart is bounded by the harness's 20 s.
TEST_F(PlanningIoTest, ARestartReadsNoStoredJobsData) {
  ASSERT_NO_FATAL_FAILURE(StartSecure(0));
  const std::string data = (dir_ / "tokens.u16").string();
  absl::StatusOr<std::string> id = SubmitJob(cluster_->stub(), Uint16Spec(data, 4096));
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_NO_FATAL_FAILURE(MakeHuge(data));
  cluster_->KillCoordinator();
  const absl::Status restarted = cluster_->RestartCoordinator();
  ASSERT_TRUE(restarted.ok()) << restarted << "\n" << cluster_->Logs();
  absl::StatusOr<pp::v1::Job> job = GetJob(cluster_->stub(), *id);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), pp::v1::QUEUED) << job->reason();
}

// A view token may plan. PlanJob used to skip --data_root: it told whether any file on the host
// existed, what it was, its size, and quoted the first bytes of any file named as config.json.
TEST_F(PlanningIoTest, PlanJobAppliesSubmitJobsDataRoot) {
  ASSERT_NO_FATAL_FAILURE(StartSecure(0));
  auto viewer = Client("tok-view");
  auto alice = Client("tok-alice");
  fs::create_directories(outside_ + "/model");
  fs::copy_file(outside_ + "/secret.txt", outside_ + "/model/config.json");
  const std::string roots =
      absl::StrCat("is outside the allowed --data_root (", dir_.string(), ")");
  std::vector<std::string> answers;
  for (const std::string name : {"secret.txt", "absent.bin", "model"}) {
    SCOPED_TRACE(name);
    const std::string path = outside_ + "/" + name;
    pp::v1::JobSpec spec = Small();
    if (name == "model") {
      spec.mutable_model()->set_init_from(path);
    } else {
      spec.mutable_data()->set_path(path);
    }
    const grpc::Status planned = Plan(*viewer, spec);
    EXPECT_EQ(planned.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(planned.error_message(), HasSubstr(roots));
    EXPECT_THAT(planned.error_message(), Not(HasSubstr(kSecret)));
    absl::StatusOr<std::string> submitted = SubmitJob(*alice, spec);
    EXPECT_THAT(std::string(submitted.status().message()), HasSubstr(planned.error_message()))
        << "SubmitJob's checks";
    answers.push_back(absl::StrReplaceAll(planned.error_message(), {{path, "PATH"}}));
  }
  EXPECT_EQ(answers[0], answers[1]) << "the same answer whether the file exists or not";
}

// A config.json under the root that is not JSON: the parser's message quoted the bytes around
// the error, and the refusal passed it on.
TEST_F(PlanningIoTest, NoRefusalQuotesAFilesBytes) {
  ASSERT_NO_FATAL_FAILURE(StartSecure(0));
  const fs::path model = dir_ / "not-json";
  fs::create_directories(model);
  fs::copy_file(outside_ + "/secret.txt", model / "config.json");
  pp::v1::JobSpec spec = Small();
  spec.mutable_model()->set_init_from(model.string());
  const grpc::Status planned = Plan(*Client("tok-view"), spec);
  EXPECT_EQ(planned.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(planned.error_message(), HasSubstr("config.json: not a JSON object"));
  EXPECT_THAT(planned.error_message(), Not(HasSubstr(kSecret)));
}

// model.init_from is a folder under the root, but the config.json in it is a symlink to a file
// outside: it was followed, and its bytes came back in the refusal. A symlink that stays inside
// the root (as the Hugging Face cache makes them) still works.
TEST_F(PlanningIoTest, AConfigSymlinkedOutOfTheRootIsRefused) {
  ASSERT_NO_FATAL_FAILURE(StartSecure(0));
  const fs::path linked = dir_ / "linked";
  fs::create_directories(linked);
  fs::create_symlink(outside_ + "/secret.txt", linked / "config.json");
  pp::v1::JobSpec spec = Small();
  spec.mutable_model()->set_init_from(linked.string());
  const std::string refusal =
      absl::StrCat("model.init_from: config.json \"", (linked / "config.json").string(),
                   "\" is outside the allowed --data_root");
  const grpc::Status planned = Plan(*Client("tok-view"), spec);
  EXPECT_EQ(planned.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(planned.error_message(), HasSubstr(refusal));
  EXPECT_THAT(planned.error_message(), Not(HasSubstr(kSecret)));
  absl::StatusOr<std::string> submitted = SubmitJob(*Client("tok-alice"), spec);
  EXPECT_THAT(std::string(submitted.status().message()), HasSubstr(refusal));
  EXPECT_THAT(std::string(submitted.status().message()), Not(HasSubstr(kSecret)));

  const fs::path cached = dir_ / "hub";
  fs::create_directories(cached / "blobs");
  fs::create_directories(cached / "snapshot");
  pp::v1::JobSpec model = spec;
  common::ApplyDefaults(&model);
  std::ofstream((cached / "blobs" / "1a2b").string()) << common::HfGpt2ConfigJson(model.model());
  fs::create_symlink("../blobs/1a2b", cached / "snapshot" / "config.json");
  spec.mutable_model()->set_init_from((cached / "snapshot").string());
  const grpc::Status inside = Plan(*Client("tok-view"), spec);
  EXPECT_TRUE(inside.ok()) << inside.error_message();
}

// ppcoord reads only config.json; each worker reads the weights. A model.safetensors symlinked to
// another model's weights outside the root was loaded, and the job trained from them.
TEST_F(PlanningIoTest, WeightsSymlinkedOutOfTheRootFailTheJobOnTheWorker) {
  pp::v1::JobSpec spec = Small();
  common::ApplyDefaults(&spec);
  trainer::TrainOptions options;
  options.checkpoint_root = outside_ + "/trained";
  absl::StatusOr<trainer::TrainResult> trained = trainer::Train(spec, options);
  ASSERT_TRUE(trained.ok()) << trained.status();
  absl::StatusOr<common::Checkpoint> saved = common::LoadCheckpoint(
      common::StepDir(options.checkpoint_root, spec.name(), spec.train().steps()));
  ASSERT_TRUE(saved.ok()) << saved.status();
  ASSERT_TRUE(common::WriteHfGpt2(outside_ + "/hf", spec.model(), saved->tensors).ok());
  const fs::path linked = dir_ / "linked-weights";
  fs::create_directories(linked);
  fs::copy_file(outside_ + "/hf/config.json", linked / "config.json");
  fs::create_symlink(outside_ + "/hf/model.safetensors", linked / "model.safetensors");

  ASSERT_NO_FATAL_FAILURE(StartSecure(1));
  spec.mutable_model()->set_init_from(linked.string());
  spec.set_max_restarts(0);
  auto alice = Client("tok-alice");
  absl::StatusOr<std::string> id = SubmitJob(*alice, spec);
  ASSERT_TRUE(id.ok()) << id.status();
  absl::StatusOr<pp::v1::Job> job = WaitForJob(*alice, *id, Ended, absl::Seconds(60));
  ASSERT_TRUE(job.ok()) << job.status() << cluster_->Logs();
  EXPECT_EQ(job->state(), pp::v1::FAILED) << "trained from weights outside the root";
  EXPECT_THAT(job->reason(),
              HasSubstr(absl::StrCat("model.init_from: model.safetensors \"",
                                     (linked / "model.safetensors").string(),
                                     "\" is outside the allowed --data_root")));
}

}  // namespace
}  // namespace pp::security_test
