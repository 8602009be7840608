// pp.v1.Worker's RunTask with real processes and mutual TLS: what a task plan may name is checked
// before the worker answers, whoever sends it. The job id names the task's checkpoint folder
// (<checkpoint_dir>/<job_id>/step-N), so a path there would write outside --checkpoint_root;
// without TLS anyone may send a plan, and here the test sends it as the coordinator itself.
#include <filesystem>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "pp/v1/worker.grpc.pb.h"
#include "tests/e2e/security/test_certs.h"
#include "tests/support/cluster.h"
#include "tests/support/fixture.h"

namespace pp::security_test {
namespace {

using ::testing::HasSubstr;

class TaskPlanTest : public testing_support::ClusterTest {
 protected:
  void SetUp() override {
    ClusterTest::SetUp();
    certs_ = (dir_ / "certs").string();
    const absl::Status made = MakeCertFolder(certs_, {"ppcoord", "w0"}, {"ops"});
    ASSERT_TRUE(made.ok()) << made;
    absl::StatusOr<std::unique_ptr<testing_support::Cluster>> cluster =
        StartSecureCluster({.certs = certs_,
                            .root = dir_.string(),
                            .cluster_dir = (dir_ / "cluster").string(),
                            .bin_dir = BinDir(),
                            .credentials = ClientCredentials(certs_, "ops", ""),
                            .workers = 1});
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
  }

  // RunTask on w0 as the holder of ppcoord's certificate, the one caller a worker takes tasks from.
  grpc::Status RunTaskAsCoordinator(const pp::v1::TaskPlan& plan) const {
    auto worker = pp::v1::Worker::NewStub(grpc::CreateChannel(
        cluster_->worker_addresses("w0").grpc, ClientCredentials(certs_, "ppcoord", "")));
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    pp::v1::RunTaskResponse response;
    return worker->RunTask(&context, plan, &response);
  }

  std::string certs_;
};

// Before: RunTask took the plan and the task failed later (or, earlier still, wrote its shards
// under <checkpoint_dir>/../../x).
TEST_F(TaskPlanTest, AJobIdThatIsAPathIsRefusedBeforeTheTaskStarts) {
  // "../../x" from here is dir_/x: still the test's own folder, outside the checkpoint folder.
  const std::filesystem::path checkpoints = dir_ / "ckpt" / "runs";
  for (const char* id : {"../../x", "a/b", "..", "UPPER"}) {
    SCOPED_TRACE(id);
    pp::v1::TaskPlan plan;
    plan.set_job_id(id);
    plan.set_world_size(1);
    plan.set_checkpoint_dir(checkpoints.string());
    *plan.mutable_spec() = SpecFrom(R"pb(
      model { n_layers: 1 seq_len: 16 d_model: 16 n_heads: 2 }
      train { steps: 1 microbatches: 1 microbatch_size: 1 }
      checkpoint { every_steps: 1 }
    )pb");
    const grpc::Status status = RunTaskAsCoordinator(plan);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr("job_id must be"));
  }
  EXPECT_FALSE(std::filesystem::exists(dir_ / "x"));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "ckpt")) << "no task wrote anything";
}

}  // namespace
}  // namespace pp::security_test
