// Starts the real ppworker binary against a fake WorkerRegistry served by this test, and checks
// what it promises: registration, heartbeats (and re-registration), GetStatus, grpc.health.v1,
// reflection, a one-rank task end to end with its reports and /metrics, the busy refusal, abort,
// a failing task, and a clean exit on SIGTERM.
#include <arpa/inet.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "pp/v1/coordinator.grpc.pb.h"
#include "pp/v1/worker.grpc.pb.h"
#include "worker/data/data.h"

extern char** environ;

namespace {

constexpr auto kWait = std::chrono::seconds(20);  // bound of every wait in this test

class FakeRegistry : public pp::v1::WorkerRegistry::Service {
 public:
  grpc::Status RegisterWorker(grpc::ServerContext*, const pp::v1::RegisterWorkerRequest* request,
                              pp::v1::RegisterWorkerResponse* response) override {
    absl::MutexLock lock(&mu);
    registrations.push_back(request->worker());
    response->set_name(request->worker().name());
    response->set_heartbeat_seconds(0.1);
    return grpc::Status::OK;
  }
  grpc::Status Heartbeat(grpc::ServerContext*, const pp::v1::HeartbeatRequest* request,
                         pp::v1::HeartbeatResponse* response) override {
    absl::MutexLock lock(&mu);
    ++heartbeats;
    response->set_known(!forget_worker);
    forget_worker = false;
    return grpc::Status::OK;
  }
  grpc::Status ReportStep(grpc::ServerContext*, const pp::v1::StepReport* report,
                          pp::v1::ReportResponse*) override {
    absl::MutexLock lock(&mu);
    steps.push_back(*report);
    return grpc::Status::OK;
  }
  grpc::Status ReportTask(grpc::ServerContext*, const pp::v1::TaskReport* report,
                          pp::v1::ReportResponse*) override {
    absl::MutexLock lock(&mu);
    tasks.push_back(*report);
    return grpc::Status::OK;
  }
  grpc::Status ReportCheckpoint(grpc::ServerContext*, const pp::v1::CheckpointReport* report,
                                pp::v1::ReportResponse*) override {
    absl::MutexLock lock(&mu);
    checkpoints.push_back(*report);
    return grpc::Status::OK;
  }
  grpc::Status KvSet(grpc::ServerContext*, const pp::v1::KvSetRequest* request,
                     pp::v1::KvSetResponse*) override {
    absl::MutexLock lock(&mu);
    kv[request->key()] = request->value();
    return grpc::Status::OK;
  }
  grpc::Status KvGet(grpc::ServerContext*, const pp::v1::KvGetRequest* request,
                     pp::v1::KvGetResponse* response) override {
    absl::MutexLock lock(&mu);
    auto all_there = [&] {
      for (const std::string& key : request->keys()) {
        if (kv.count(key) == 0) return false;
      }
      return true;
    };
    if (!mu.AwaitWithTimeout(absl::Condition(&all_there),
                             absl::Seconds(request->timeout_seconds()))) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "keys not set");
    }
    for (const std::string& key : request->keys()) response->add_values(kv[key]);
    return grpc::Status::OK;
  }

  // Waits (bounded) until pred holds under the lock.
  bool WaitFor(const std::function<bool()>& pred) {
    absl::MutexLock lock(&mu);
    return mu.AwaitWithTimeout(absl::Condition(&pred), absl::FromChrono(kWait));
  }

  absl::Mutex mu;
  std::vector<pp::v1::WorkerInfo> registrations;
  int heartbeats = 0;
  bool forget_worker = false;
  std::vector<pp::v1::StepReport> steps;
  std::vector<pp::v1::TaskReport> tasks;
  std::vector<pp::v1::CheckpointReport> checkpoints;
  std::map<std::string, std::string> kv;
};

// GET http://address/metrics, the body ("" on failure).
std::string Scrape(const std::string& address) {
  const size_t colon = address.rfind(':');
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(std::stoi(address.substr(colon + 1)));
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "";
  }
  const std::string request = "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n";
  send(fd, request.data(), request.size(), 0);
  std::string response;
  char buffer[4096];
  ssize_t n;
  while ((n = recv(fd, buffer, sizeof(buffer), 0)) > 0) response.append(buffer, n);
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  return body == std::string::npos ? "" : response.substr(body + 4);
}

class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("daemon_test_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ / "corpus.txt") << pp::data::GenerateCorpus(5, 5000);

    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&registry_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(port, 0);

    const std::string address_file = (dir_ / "worker.json").string();
    std::vector<std::string> args = {PPWORKER_PATH,
                                     "--coordinator=127.0.0.1:" + std::to_string(port),
                                     "--grpc=127.0.0.1:0",
                                     "--metrics=127.0.0.1:0",
                                     "--device=cpu",
                                     "--name=w1",
                                     "--comm_timeout=2s",
                                     "--address_file=" + address_file};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ASSERT_EQ(posix_spawn(&pid_, PPWORKER_PATH, nullptr, nullptr, argv.data(), environ), 0);

    const auto deadline = std::chrono::steady_clock::now() + kWait;
    while (!std::filesystem::exists(address_file) && std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = 0;
        FAIL() << "ppworker exited early with status " << status;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::ifstream in(address_file);
    std::stringstream text;
    text << in.rdbuf();
    // {"grpc":"h:p","metrics":"h:p"}
    auto field = [&](const std::string& name) {
      const std::string s = text.str();
      const size_t at = s.find("\"" + name + "\":\"");
      if (at == std::string::npos) return std::string();
      const size_t start = at + name.size() + 4;
      return s.substr(start, s.find('"', start) - start);
    };
    grpc_address_ = field("grpc");
    metrics_address_ = field("metrics");
    ASSERT_FALSE(grpc_address_.empty()) << "no address file: " << text.str();
    channel_ = grpc::CreateChannel(grpc_address_, grpc::InsecureChannelCredentials());
    worker_ = pp::v1::Worker::NewStub(channel_);
  }

  void TearDown() override {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    std::filesystem::remove_all(dir_);
  }

  // A one-rank job holding the whole model; program: F0 F1 B0 B1 ...
  pp::v1::TaskPlan OneRankPlan(const std::string& job, int steps, int world_size = 1) {
    pp::v1::TaskPlan plan;
    plan.set_job_id(job);
    plan.set_attempt(1);
    plan.set_rank(0);
    plan.set_world_size(world_size);
    pp::v1::JobSpec* spec = plan.mutable_spec();
    spec->set_name(job);
    spec->mutable_model()->set_vocab_size(256);
    spec->mutable_model()->set_seq_len(8);
    spec->mutable_model()->set_d_model(16);
    spec->mutable_model()->set_n_heads(2);
    spec->mutable_model()->set_n_layers(1);
    spec->mutable_parallel()->set_pipeline(1);
    spec->mutable_parallel()->set_schedule("gpipe");
    spec->mutable_train()->set_steps(steps);
    spec->mutable_train()->set_microbatches(2);
    spec->mutable_train()->set_microbatch_size(2);
    spec->mutable_train()->set_lr(1e-3);
    spec->mutable_data()->set_path((dir_ / "corpus.txt").string());
    pp::v1::StageLayers* stage = plan.add_stages();
    stage->set_stage(0);
    stage->set_first_unit(0);
    stage->set_last_unit(2);
    plan.add_stage_to_rank(0);
    for (auto kind : {pp::v1::FORWARD, pp::v1::BACKWARD}) {
      for (int mb = 0; mb < 2; ++mb) {
        pp::v1::Action* a = plan.mutable_program()->add_actions();
        a->set_kind(kind);
        a->set_microbatch(mb);
      }
    }
    plan.set_rendezvous_prefix(job + "/");
    return plan;
  }

  grpc::Status RunTask(const pp::v1::TaskPlan& plan) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + kWait);
    pp::v1::RunTaskResponse response;
    return worker_->RunTask(&context, plan, &response);
  }

  pp::v1::WorkerStatus Status() {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + kWait);
    pp::v1::WorkerStatus status;
    EXPECT_TRUE(worker_->GetStatus(&context, pp::v1::GetStatusRequest(), &status).ok());
    return status;
  }

  const pp::v1::TaskReport* TaskReportOf(const std::string& job) {
    for (const auto& t : registry_.tasks) {
      if (t.job_id() == job) return &t;
    }
    return nullptr;
  }

  std::filesystem::path dir_;
  FakeRegistry registry_;
  std::unique_ptr<grpc::Server> server_;
  pid_t pid_ = 0;
  std::string grpc_address_, metrics_address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pp::v1::Worker::Stub> worker_;
};

TEST_F(DaemonTest, RegistersHeartbeatsAndServesHealthAndReflection) {
  ASSERT_TRUE(registry_.WaitFor([&] { return registry_.heartbeats >= 2; }));
  {
    absl::MutexLock lock(&registry_.mu);
    ASSERT_GE(registry_.registrations.size(), 1u);
    EXPECT_EQ(registry_.registrations[0].name(), "w1");
    EXPECT_EQ(registry_.registrations[0].address(), grpc_address_);
    EXPECT_EQ(registry_.registrations[0].device(), "cpu");
    EXPECT_GT(registry_.registrations[0].memory_bytes(), 0);
    registry_.forget_worker = true;  // next heartbeat: known=false
  }
  ASSERT_TRUE(registry_.WaitFor([&] { return registry_.registrations.size() >= 2; }));

  pp::v1::WorkerStatus status = Status();
  EXPECT_EQ(status.name(), "w1");
  EXPECT_EQ(status.state(), "IDLE");

  auto health = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext health_context;
  grpc::health::v1::HealthCheckResponse health_response;
  ASSERT_TRUE(health->Check(&health_context, grpc::health::v1::HealthCheckRequest(),
                            &health_response)
                  .ok());
  EXPECT_EQ(health_response.status(), grpc::health::v1::HealthCheckResponse::SERVING);

  auto reflection = grpc::reflection::v1alpha::ServerReflection::NewStub(channel_);
  grpc::ClientContext reflection_context;
  reflection_context.set_deadline(std::chrono::system_clock::now() + kWait);
  auto stream = reflection->ServerReflectionInfo(&reflection_context);
  grpc::reflection::v1alpha::ServerReflectionRequest request;
  request.set_list_services("");
  ASSERT_TRUE(stream->Write(request));
  stream->WritesDone();
  grpc::reflection::v1alpha::ServerReflectionResponse response;
  ASSERT_TRUE(stream->Read(&response));
  std::vector<std::string> services;
  for (const auto& s : response.list_services_response().service()) services.push_back(s.name());
  EXPECT_NE(std::find(services.begin(), services.end(), "pp.v1.Worker"), services.end());
  EXPECT_NE(std::find(services.begin(), services.end(), "grpc.health.v1.Health"), services.end());
  while (stream->Read(&response)) {
  }
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(DaemonTest, RunsATaskReportsItAndExportsMetrics) {
  ASSERT_TRUE(RunTask(OneRankPlan("job-a", 3)).ok());
  ASSERT_TRUE(registry_.WaitFor([&] { return TaskReportOf("job-a") != nullptr; }));
  {
    absl::MutexLock lock(&registry_.mu);
    const pp::v1::TaskReport* report = TaskReportOf("job-a");
    EXPECT_TRUE(report->ok()) << report->error();
    EXPECT_EQ(report->worker(), "w1");
    ASSERT_EQ(registry_.steps.size(), 3u);
    for (int k = 0; k < 3; ++k) {
      const pp::v1::StepReport& step = registry_.steps[k];
      EXPECT_EQ(step.step(), k + 1);
      EXPECT_TRUE(step.has_loss());
      EXPECT_GT(step.loss(), 0);
      EXPECT_EQ(step.tokens(), 2 * 2 * 8);
      EXPECT_EQ(step.trace().actions_size(), 4);
    }
  }
  EXPECT_EQ(Status().state(), "IDLE");
  EXPECT_EQ(Status().step(), 3);
  const std::string metrics = Scrape(metrics_address_);
  for (const char* series :
       {"pp_step_seconds_count{job=\"job-a\",rank=\"0\"} 3",
        "pp_busy_seconds_total{job=\"job-a\",phase=\"forward\",rank=\"0\"}",
        "pp_wait_seconds_total{job=\"job-a\",rank=\"0\"}", "pp_bubble_ratio{job=\"job-a\",rank=\"0\"}",
        "pp_activation_bytes{job=\"job-a\",rank=\"0\"}", "pp_loss{job=\"job-a\"}",
        "pp_tokens_total{job=\"job-a\",rank=\"0\"} 96"}) {
    EXPECT_NE(metrics.find(series), std::string::npos) << series << " in\n" << metrics;
  }
  if (std::string(PROMTOOL_PATH).empty()) GTEST_SKIP() << "no promtool: format not linted";
  const std::string file = (dir_ / "metrics.txt").string();
  std::ofstream(file) << metrics;
  const std::string lint = std::string(PROMTOOL_PATH) + " check metrics < " + file + " 2>&1";
  EXPECT_EQ(std::system(lint.c_str()), 0) << lint;
}

TEST_F(DaemonTest, RefusesASecondTaskAndAbortsOnRequest) {
  ASSERT_TRUE(RunTask(OneRankPlan("long", 100000)).ok());
  grpc::Status second = RunTask(OneRankPlan("other", 1));
  EXPECT_EQ(second.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(second.error_message().find("busy with job long"), std::string::npos);
  EXPECT_EQ(Status().state(), "BUSY");
  auto abort = [&](int attempt, const std::string& reason) {
    grpc::ClientContext context;
    pp::v1::AbortTaskRequest request;
    request.set_job_id("long");
    request.set_attempt(attempt);
    request.set_reason(reason);
    pp::v1::AbortTaskResponse response;
    return worker_->AbortTask(&context, request, &response);
  };
  // A late abort of an earlier attempt (the plan is attempt 1) leaves the task running.
  ASSERT_TRUE(abort(0, "stale abort").ok());
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(Status().state(), "BUSY");
  ASSERT_TRUE(abort(1, "test says stop").ok());
  ASSERT_TRUE(registry_.WaitFor([&] { return TaskReportOf("long") != nullptr; }));
  {
    absl::MutexLock lock(&registry_.mu);
    EXPECT_FALSE(TaskReportOf("long")->ok());
    EXPECT_NE(TaskReportOf("long")->error().find("test says stop"), std::string::npos)
        << TaskReportOf("long")->error();
  }
  // Free again: the next task runs.
  ASSERT_TRUE(RunTask(OneRankPlan("after", 1)).ok());
  ASSERT_TRUE(registry_.WaitFor([&] { return TaskReportOf("after") != nullptr; }));
}

TEST_F(DaemonTest, MissingPeerAndBadPlanFailTheTaskWithAReason) {
  ASSERT_TRUE(RunTask(OneRankPlan("lonely", 1, /*world_size=*/2)).ok());
  ASSERT_TRUE(registry_.WaitFor([&] { return TaskReportOf("lonely") != nullptr; }));
  pp::v1::TaskPlan bad = OneRankPlan("bad", 1);
  bad.mutable_spec()->mutable_data()->set_path((dir_ / "missing.txt").string());
  ASSERT_TRUE(RunTask(bad).ok());
  ASSERT_TRUE(registry_.WaitFor([&] { return TaskReportOf("bad") != nullptr; }));
  absl::MutexLock lock(&registry_.mu);
  EXPECT_FALSE(TaskReportOf("lonely")->ok());
  EXPECT_NE(TaskReportOf("lonely")->error().find("rendezvous"), std::string::npos)
      << TaskReportOf("lonely")->error();
  EXPECT_FALSE(TaskReportOf("bad")->ok());
  EXPECT_NE(TaskReportOf("bad")->error().find("missing.txt"), std::string::npos)
      << TaskReportOf("bad")->error();
}

TEST_F(DaemonTest, ExitsCleanlyOnSigterm) {
  ASSERT_TRUE(registry_.WaitFor([&] { return registry_.heartbeats >= 1; }));
  ASSERT_EQ(kill(pid_, SIGTERM), 0);
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  pid_t done = 0;
  while ((done = waitpid(pid_, &status, WNOHANG)) == 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(done, pid_);
  pid_ = 0;
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
