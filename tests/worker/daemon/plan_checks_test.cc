// A worker refuses a mesh task plan that does not add up, with an error naming what is wrong,
// before it connects to anyone; off the CPU its groups go through NCCL.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"

#include "common/job_spec.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "kernels/cuda/plugin.h"
#include "worker/comm/transport.h"
#include "worker/daemon/task.h"
#include "worker/data/data.h"

namespace pp::daemon {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::Not;

class NoReports : public TaskReporter {
 public:
  pp::v1::ReportResponse ReportStep(const pp::v1::StepReport&,
                                    const executor::StepResult&) override {
    return {};
  }
  void ReportCheckpoint(const pp::v1::CheckpointReport&, double) override {}
};

// A corpus file for the plans' specs, removed at exit.
std::string Corpus() {
  static const std::string* path = [] {
    auto* p = new std::string((std::filesystem::temp_directory_path() /
                               absl::StrCat("plan_checks_test_", ::getpid(), ".txt"))
                                  .string());
    std::ofstream(*p) << data::GenerateCorpus(1, 1000);
    std::atexit([] { std::filesystem::remove(Corpus()); });
    return p;
  }();
  return *path;
}

// Rank 1 = (dp 0, pp 0, tp 1) of a dp2 x pp1 x tp2 job.
pp::v1::TaskPlan MeshPlan() {
  pp::v1::TaskPlan plan;
  plan.set_job_id("mesh");
  plan.set_rank(1);
  plan.set_world_size(4);
  plan.set_tp_rank(1);
  plan.add_stage_to_rank(1);
  plan.add_stages()->set_stage(0);
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"pb(
        model { vocab_size: 256 seq_len: 8 d_model: 16 n_heads: 2 n_layers: 1 }
        parallel { pipeline: 1 data: 2 tensor: 2 chunks: 1 schedule: "gpipe" }
        train { steps: 1 microbatches: 2 microbatch_size: 1 }
      )pb",
      plan.mutable_spec()));
  plan.mutable_spec()->mutable_data()->set_path(Corpus());
  return plan;
}

absl::Status RunPlan(const pp::v1::TaskPlan& plan, const std::string& device = "cpu") {
  std::unique_ptr<comm::KvStore> kv = comm::NewMemoryKvStore();
  TaskEnv env;
  env.kv = kv.get();
  env.device = device;
  env.comm_timeout = absl::Seconds(2);
  NoReports reporter;
  return Task(plan, env).Run(reporter);
}

TEST(PlanChecksTest, RefusesAWorldThatIsNotTheMesh) {
  pp::v1::TaskPlan plan = MeshPlan();
  plan.set_world_size(3);
  absl::Status status = RunPlan(plan);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("world_size 3"));
}

// Without TLS anyone may call RunTask: a job id that is a path would write its shards outside
// the checkpoint root (checkpoint_dir/<job>/step-N).
TEST(PlanChecksTest, RefusesAJobIdThatIsNotOneMakeJobIdMakes) {
  for (const char* id : {"../../x", "a/b", "", ".", "UPPER", "-lead", "x y"}) {
    pp::v1::TaskPlan plan = MeshPlan();
    plan.set_job_id(id);
    absl::Status status = RunPlan(plan);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << id;
    EXPECT_THAT(std::string(status.message()), HasSubstr("job_id must be")) << id;
  }
  pp::v1::TaskPlan plan = MeshPlan();
  plan.set_job_id("tiny-model-12");
  EXPECT_THAT(std::string(RunPlan(plan).message()), Not(HasSubstr("job_id"))) << "a real id";
}

TEST(PlanChecksTest, RefusesARankThatIsNotItsCoordinates) {
  pp::v1::TaskPlan plan = MeshPlan();
  plan.set_dp_rank(1);  // would be rank 3
  absl::Status status = RunPlan(plan);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("mesh coordinates dp 1 pp 0 tp 1"));
}

// Off the CPU a rank's data- and tensor-parallel groups are NCCL communicators: without a CUDA
// device (or without the plugin) connecting the first group fails and says which device.
TEST(PlanChecksTest, GroupsOffTheCpuConnectThroughNccl) {
  absl::StatusOr<const kernels::CudaPlugin*> plugin = kernels::LoadCudaPlugin();
  int devices = 0;
  PpCudaError error{};
  if (plugin.ok() && (*plugin)->device_count(&devices, &error) == 0 && devices > 0) {
    GTEST_SKIP() << "a CUDA device is present: tests/gpu covers NCCL groups";
  }
  absl::Status status = RunPlan(MeshPlan(), "cuda:0");
  EXPECT_THAT(status.code(), AnyOf(absl::StatusCode::kFailedPrecondition,
                                   absl::StatusCode::kUnavailable, absl::StatusCode::kUnimplemented));
  EXPECT_THAT(std::string(status.message()), HasSubstr("cuda:0"));
}

}  // namespace
}  // namespace pp::daemon
