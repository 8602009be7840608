// Both daemons of a live cluster, after a job ran on it: grpc.health.v1 Check says SERVING, server
// reflection lists their services, and their /metrics (job series included) pass
// `promtool check metrics` and carry the job's figures.
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "tests/coordinator/test_support.h"
#include "tests/e2e/integration/fixture.h"
#include "tests/support/cluster.h"
#include "tests/support/process.h"

namespace pp::integration {
namespace {

using ::pp::testing_support::CommandResult;
using ::pp::testing_support::RunCommand;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsSupersetOf;

constexpr int kSteps = 3;

class DaemonsTest : public IntegrationTest {
 protected:
  // A finished 2-rank job, so that every per-job series exists.
  void RunJob() {
    ASSERT_NO_FATAL_FAILURE(StartCluster(2));
    pp::v1::JobSpec spec = TinySpec("1f1b", 1, kSteps);
    spec.mutable_parallel()->set_pipeline(2);
    absl::StatusOr<std::string> id = testing_support::SubmitJob(cluster_->stub(), spec);
    ASSERT_TRUE(id.ok()) << id.status();
    job_id_ = *id;
    absl::StatusOr<pp::v1::Job> job =
        testing_support::WaitSucceeded(cluster_->stub(), job_id_, absl::Seconds(30));
    ASSERT_TRUE(job.ok()) << job.status() << "\n" << cluster_->Logs();
  }

  // (name, gRPC address, metrics address) of ppcoord and each worker.
  struct Daemon {
    std::string name, grpc, metrics;
  };
  std::vector<Daemon> Daemons() const {
    std::vector<Daemon> daemons = {
        {"ppcoord", cluster_->coordinator().grpc, cluster_->coordinator().metrics}};
    for (const std::string& name : cluster_->worker_names()) {
      const testing_support::Addresses& worker = cluster_->worker_addresses(name);
      daemons.push_back({name, worker.grpc, worker.metrics});
    }
    return daemons;
  }

  std::string job_id_;
};

TEST_F(DaemonsTest, AnswerHealthAndListTheirServicesThroughReflection) {
  ASSERT_NO_FATAL_FAILURE(RunJob());
  for (const Daemon& d : Daemons()) {
    SCOPED_TRACE(d.name);
    auto channel = grpc::CreateChannel(d.grpc, grpc::InsecureChannelCredentials());
    absl::StatusOr<int> health = coordinator::testing::HealthCheck(channel);
    ASSERT_TRUE(health.ok()) << health.status();
    EXPECT_EQ(*health, 1);  // SERVING
    absl::StatusOr<std::vector<std::string>> services =
        coordinator::testing::ReflectionServices(channel);
    ASSERT_TRUE(services.ok()) << services.status();
    EXPECT_THAT(*services, IsSupersetOf({"grpc.health.v1.Health",
                                         "grpc.reflection.v1alpha.ServerReflection"}));
    if (d.name == "ppcoord") {
      EXPECT_THAT(*services, IsSupersetOf({"pp.v1.Coordinator", "pp.v1.WorkerRegistry"}));
    } else {
      EXPECT_THAT(*services, Contains("pp.v1.Worker"));
    }
  }
}

TEST_F(DaemonsTest, MetricsPassPromtoolAndCarryTheJob) {
  const std::string promtool = PP_PROMTOOL;
  ASSERT_FALSE(promtool.empty())
      << "promtool was not found when configuring: run scripts/setup.sh (Debian's prometheus)";
  ASSERT_NO_FATAL_FAILURE(RunJob());
  for (const Daemon& d : Daemons()) {
    SCOPED_TRACE(d.name);
    absl::StatusOr<std::string> text = coordinator::testing::HttpGet(d.metrics, "/metrics");
    ASSERT_TRUE(text.ok()) << text.status();
    const std::string file = (dir_ / (d.name + ".prom")).string();
    std::ofstream(file) << *text;
    absl::StatusOr<CommandResult> check = RunCommand(
        {"/bin/sh", "-c", absl::StrCat(promtool, " check metrics < ", file)}, absl::Seconds(20));
    ASSERT_TRUE(check.ok()) << check.status();
    EXPECT_EQ(check->exit_code, 0) << check->out << check->err;
    EXPECT_EQ(check->out + check->err, "") << "promtool lint findings";

    const std::string job = absl::StrCat("job=\"", job_id_, "\"");
    if (d.name == "ppcoord") {
      EXPECT_THAT(*text, HasSubstr(absl::StrCat("pp_job_steps_total{", job, "} ", kSteps)));
      EXPECT_THAT(*text, HasSubstr("pp_jobs{state=\"SUCCEEDED\"} 1"));
      EXPECT_THAT(*text, HasSubstr("pp_workers{state=\"IDLE\"} 2"));
    } else {
      EXPECT_THAT(*text, HasSubstr("pp_step_seconds_count{" + job));
      EXPECT_THAT(*text, HasSubstr("pp_tokens_total{" + job));
    }
  }
}

}  // namespace
}  // namespace pp::integration
