// Heartbeats while a checkpoint commit is slow, with real processes (ppcoord + ppworker on
// loopback): ppcoord's PP_TEST_COMMIT_PAUSE makes every commit's file I/O take seconds, as a
// checkpoint of several GB on a slow disk would; heartbeats must still be answered at once and no
// live worker may be marked DOWN.
#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/checkpoint.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "pp/v1/coordinator.grpc.pb.h"
#include "tests/support/cluster.h"
#include "tests/support/fixture.h"

namespace pp::robustness {
namespace {

using ::pp::testing_support::ListWorkers;
using ::pp::testing_support::SubmitJob;
using ::pp::testing_support::WaitSucceeded;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr absl::Duration kJobTimeout = absl::Seconds(60);
constexpr absl::Duration kHeartbeatPeriod = absl::Milliseconds(10);

// Sends a Heartbeat every kHeartbeatPeriod until Finish, on a thread of its own. Each latency is
// measured from the moment its heartbeat was due, not from when it was sent, so one call blocked
// for seconds counts for every heartbeat that could not be sent meanwhile (as the workers' own
// heartbeats, due every period, would have waited).
class HeartbeatProbe {
 public:
  explicit HeartbeatProbe(const std::string& address)
      : stub_(pp::v1::WorkerRegistry::NewStub(
            grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))),
        thread_([this] { Loop(); }) {}
  ~HeartbeatProbe() { Finish(); }

  // Stops the loop; the latencies, in milliseconds, sorted.
  std::vector<double> Finish() {
    done_ = true;
    if (thread_.joinable()) thread_.join();
    std::sort(latencies_ms_.begin(), latencies_ms_.end());
    return latencies_ms_;
  }
  int errors() const { return errors_; }

 private:
  void Loop() {
    const absl::Time start = absl::Now();
    for (int64_t i = 0; !done_; ++i) {
      const absl::Time due = start + i * kHeartbeatPeriod;
      if (absl::Now() < due) absl::SleepFor(due - absl::Now());  // pacing, not synchronisation
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
      pp::v1::HeartbeatRequest request;
      request.set_name("heartbeat-probe");  // unknown: answered known=false, through the same lock
      pp::v1::HeartbeatResponse response;
      if (!stub_->Heartbeat(&context, request, &response).ok()) ++errors_;
      latencies_ms_.push_back(absl::ToDoubleMilliseconds(absl::Now() - due));
    }
  }

  std::unique_ptr<pp::v1::WorkerRegistry::Stub> stub_;
  std::atomic<bool> done_{false};
  std::vector<double> latencies_ms_;  // written by the loop only, read after the join
  int errors_ = 0;
  std::thread thread_;
};

class CommitPauseTest : public testing_support::ClusterTest {
 protected:
  CommitPauseTest() : ClusterTest(/*corpus_seed=*/17, /*corpus_bytes=*/50000) {}
};

TEST_F(CommitPauseTest, HeartbeatsAreAnsweredWithin100msWhileACheckpointCommitIsSlow) {
  testing_support::ClusterOptions options;
  options.bin_dir = PP_BIN_DIR;
  options.dir = (dir_ / "cluster").string();
  options.coordinator_flags = {"--worker_timeout=2s", "--heartbeat_interval=200ms"};
  options.coordinator_env = {{"PP_TEST_COMMIT_PAUSE", "3"}};  // longer than worker_timeout
  options.worker_flags = {"--comm_timeout=10s"};
  absl::StatusOr<std::unique_ptr<testing_support::Cluster>> cluster =
      testing_support::Cluster::Start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  cluster_ = *std::move(cluster);
  ASSERT_TRUE(cluster_->AddWorkers(2).ok()) << cluster_->Logs();

  pp::v1::JobSpec spec = SpecFrom(R"pb(
    name: "slowdisk"
    model { seq_len: 32 d_model: 64 n_heads: 4 n_layers: 2 }
    parallel { pipeline: 2 }
    train { microbatches: 4 microbatch_size: 4 seed: 5 steps: 10 }
    checkpoint { every_steps: 5 keep: 3 }
  )pb");
  HeartbeatProbe probe(cluster_->coordinator().grpc);
  absl::StatusOr<std::string> id = SubmitJob(cluster_->stub(), spec);
  ASSERT_TRUE(id.ok()) << id.status();
  absl::StatusOr<pp::v1::Job> done = WaitSucceeded(cluster_->stub(), *id, kJobTimeout);
  const std::vector<double> latencies = probe.Finish();
  ASSERT_GE(latencies.size(), 10u);
  EXPECT_EQ(probe.errors(), 0);
  const double p99 = latencies[latencies.size() * 99 / 100];
  EXPECT_LT(p99, 100.0) << "heartbeat p99 " << p99 << " ms, max " << latencies.back() << " ms over "
                        << latencies.size() << " heartbeats";
  ASSERT_TRUE(done.ok()) << done.status() << cluster_->Logs();

  // Both commits paused (the test is not vacuous) and both checkpoints are there.
  const std::string log = cluster_->coordinator_process().Log();
  EXPECT_THAT(log, HasSubstr("PP_TEST_COMMIT_PAUSE: checkpoint step 5"));
  EXPECT_THAT(log, HasSubstr("PP_TEST_COMMIT_PAUSE: checkpoint step 10"));
  for (int step : {5, 10}) {
    EXPECT_TRUE(std::filesystem::exists(
        common::StepDir(cluster_->checkpoint_root(), *id, step) + "/" + common::kManifestFile));
  }
  EXPECT_EQ(done->last_checkpoint_step(), 10);

  // No live worker was marked DOWN, so the job never restarted.
  EXPECT_THAT(log, Not(HasSubstr(" is DOWN")));
  EXPECT_EQ(done->restarts(), 0);
  EXPECT_EQ(done->restart_log_size(), 0);
  absl::StatusOr<std::vector<pp::v1::WorkerInfo>> workers = ListWorkers(cluster_->stub());
  ASSERT_TRUE(workers.ok()) << workers.status();
  for (const pp::v1::WorkerInfo& w : *workers) EXPECT_NE(w.state(), pp::v1::DOWN) << w.name();
}

}  // namespace
}  // namespace pp::robustness
