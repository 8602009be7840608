// Shared by the integration tests: a per-test folder with a small generated corpus, the tiny job
// spec every test starts from, and a loopback cluster of the real binaries (PP_BIN_DIR).
#ifndef PP_TESTS_INTEGRATION_FIXTURE_H_
#define PP_TESTS_INTEGRATION_FIXTURE_H_

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "pp/v1/job.pb.h"
#include "tests/integration/cluster.h"
#include "worker/data/data.h"

namespace pp::integration {

class IntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = absl::StrCat(info->test_suite_name(), "_", info->name());
    for (char& c : name) {
      if (c == '/') c = '_';
    }
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("pp_integration_", ::getpid(), "_", name);
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    corpus_ = (dir_ / "corpus.txt").string();
    std::ofstream(corpus_) << data::GenerateCorpus(7, 20000);
  }
  void TearDown() override {
    cluster_.reset();  // stop the processes before their folder goes
    std::filesystem::remove_all(dir_);
  }

  // 6 blocks (8 partition units: D=4 with V=2 fits), C=32, T=16, M=8 microbatches of 2; a small
  // grad_clip so that clipping (the cross-stage norm) matters in every step.
  pp::v1::JobSpec TinySpec(const std::string& schedule, int chunks, int steps) const {
    pp::v1::JobSpec spec;
    spec.set_name("tiny");
    pp::v1::ModelSpec* model = spec.mutable_model();
    model->set_vocab_size(256);
    model->set_seq_len(16);
    model->set_d_model(32);
    model->set_n_heads(2);
    model->set_n_layers(6);
    spec.mutable_parallel()->set_pipeline(4);
    spec.mutable_parallel()->set_chunks(chunks);
    spec.mutable_parallel()->set_schedule(schedule);
    pp::v1::TrainSpec* train = spec.mutable_train();
    train->set_steps(steps);
    train->set_microbatches(8);
    train->set_microbatch_size(2);
    train->set_lr(1e-3);
    train->set_weight_decay(0.1);
    train->set_grad_clip(0.5);
    train->set_seed(3);
    spec.mutable_data()->set_path(corpus_);
    return spec;
  }

  std::string WriteSpec(const pp::v1::JobSpec& spec, const std::string& file) const {
    std::string json;
    EXPECT_TRUE(google::protobuf::util::MessageToJsonString(spec, &json).ok());
    const std::string path = (dir_ / file).string();
    std::ofstream(path) << json;
    return path;
  }

  // ppcoord with fast failure detection; `workers` ppworker processes registered and IDLE.
  void StartCluster(int workers) {
    ClusterOptions options;
    options.bin_dir = PP_BIN_DIR;
    options.dir = (dir_ / "cluster").string();
    options.coordinator_flags = {"--worker_timeout=2s", "--heartbeat_interval=200ms"};
    options.worker_flags = {"--comm_timeout=10"};
    absl::StatusOr<std::unique_ptr<Cluster>> cluster = Cluster::Start(options);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    if (workers > 0) {
      absl::Status added = cluster_->AddWorkers(workers);
      ASSERT_TRUE(added.ok()) << added;
    }
  }

  std::filesystem::path dir_;
  std::string corpus_;
  std::unique_ptr<Cluster> cluster_;
};

}  // namespace pp::integration

#endif  // PP_TESTS_INTEGRATION_FIXTURE_H_
