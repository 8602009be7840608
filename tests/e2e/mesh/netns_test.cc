// Jobs across emulated hosts (tests/support/netns.h): each worker in a network namespace of its
// own host with its own address, joined through a bridge, ppcoord on the bridge's root side.
// What loopback cannot show: placement sees the hosts (a tensor-parallel group shares one, the
// pipeline crosses between them), jobs still train like the reference over real addresses, and a
// link shaped to a few Mbit/s bounds the step by the bytes the schedule sends over it.
// Needs root and a kernel with namespaces, veth and tbf: the tests skip, saying why, elsewhere.
#include <algorithm>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/substitute.h"
#include "common/step_math.h"
#include "gtest/gtest.h"
#include "tests/support/cluster.h"
#include "tests/support/fixture.h"
#include "tests/support/netns.h"

namespace pp::mesh {
namespace {

using ::pp::testing_support::Cluster;
using ::pp::testing_support::ClusterOptions;
using ::pp::testing_support::GetJob;
using ::pp::testing_support::LinkShape;
using ::pp::testing_support::ListWorkers;
using ::pp::testing_support::Match;
using ::pp::testing_support::NetnsBed;
using ::pp::testing_support::WorkerOptions;

class NetnsTest : public testing_support::ClusterTest {
 protected:
  // `hosts` namespaces with `per_host` workers each: w<h*per_host + k> on host h.
  void StartBed(int hosts, int per_host) {
    absl::StatusOr<std::unique_ptr<NetnsBed>> bed = NetnsBed::Create(hosts);
    if (!bed.ok()) GTEST_SKIP() << "no network namespaces here: " << bed.status();
    bed_ = *std::move(bed);
    ClusterOptions options;
    options.bin_dir = PP_BIN_DIR;
    options.dir = (dir_ / "cluster").string();
    options.coordinator_host = bed_->root_address();
    // Plaintext off loopback is refused without --insecure; this bridge reaches nothing else.
    options.coordinator_flags = {"--worker_timeout=2s", "--heartbeat_interval=200ms",
                                 "--insecure"};
    options.worker_flags = {"--comm_timeout=20s", "--drain_timeout=30s", "--insecure"};
    absl::StatusOr<std::unique_ptr<Cluster>> cluster = Cluster::Start(options);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    for (int h = 0; h < hosts; ++h) {
      for (int k = 0; k < per_host; ++k) {
        WorkerOptions worker;
        worker.host = bed_->address(h);
        worker.run_in = bed_->Exec(h, {});
        const std::string name = absl::StrCat("w", h * per_host + k);
        ASSERT_TRUE(cluster_->StartWorker(name, worker).ok()) << cluster_->Logs();
        host_of_[name] = bed_->address(h);
      }
    }
  }

  // Runs `spec` to its end, watched from its submission: the median step_seconds of steps 2..
  // (the first step also connects the ranks).
  double MedianStepSeconds(const pp::v1::JobSpec& spec) {
    absl::StatusOr<std::string> id = testing_support::SubmitJob(cluster_->stub(), spec);
    EXPECT_TRUE(id.ok()) << id.status();
    if (!id.ok()) return 0;
    absl::StatusOr<std::unique_ptr<testing_support::JobWatch>> watch =
        testing_support::JobWatch::Open(cluster_->stub(), *id, absl::Seconds(60));
    EXPECT_TRUE(watch.ok()) << watch.status();
    if (!watch.ok()) return 0;
    absl::StatusOr<std::vector<pp::v1::JobEvent>> events = (*watch)->Rest();
    EXPECT_TRUE(events.ok() && events->back().kind() == pp::v1::EVENT_FINISHED)
        << (events.ok() ? events->back().message() : events.status().ToString()) << "\n"
        << cluster_->Logs();
    std::vector<double> seconds;
    for (const pp::v1::JobEvent& e : events.ok() ? *events : std::vector<pp::v1::JobEvent>{}) {
      if (e.kind() == pp::v1::EVENT_STEP && e.step() >= 2) seconds.push_back(e.step_seconds());
    }
    EXPECT_FALSE(seconds.empty());
    if (seconds.empty()) return 0;
    std::sort(seconds.begin(), seconds.end());
    return seconds[seconds.size() / 2];
  }

  std::unique_ptr<NetnsBed> bed_;
  std::map<std::string, std::string> host_of_;  // worker name -> its host's address
};

TEST_F(NetnsTest, PlacementSeesHostsAndJobsTrainAcrossThem) {
  ASSERT_NO_FATAL_FAILURE(StartBed(/*hosts=*/2, /*per_host=*/2));
  if (bed_ == nullptr) return;
  absl::StatusOr<std::vector<pp::v1::WorkerInfo>> workers = ListWorkers(cluster_->stub());
  ASSERT_TRUE(workers.ok()) << workers.status();
  ASSERT_EQ(workers->size(), 4u);
  for (const pp::v1::WorkerInfo& w : *workers) {
    EXPECT_EQ(w.host(), host_of_.at(w.name())) << w.name();
    EXPECT_EQ(w.address().rfind(host_of_.at(w.name()) + ":", 0), 0u) << w.address();
  }

  // D=4 over both hosts: the activations cross the bridge, the bits stay the reference's.
  const pp::v1::JobSpec pipeline = SpecFrom(R"pb(
    name: "across" model { seq_len: 16 d_model: 32 n_heads: 4 n_layers: 2 }
    parallel { pipeline: 4 schedule: "1f1b" }
    train { steps: 4 microbatches: 4 microbatch_size: 2 seed: 5 })pb");
  const std::string across = Run(pipeline);
  ASSERT_FALSE(across.empty()) << cluster_->Logs();
  ExpectMatchesReference(pipeline, across, Match::kBitwise);

  // D=2 x TP=2: each pipeline rank's tensor-parallel pair on one host, whichever order the
  // workers came in.
  const pp::v1::JobSpec tensor = SpecFrom(R"pb(
    name: "tp" model { seq_len: 16 d_model: 32 n_heads: 4 n_layers: 2 }
    parallel { pipeline: 2 tensor: 2 schedule: "1f1b" }
    train { steps: 4 microbatches: 4 microbatch_size: 2 seed: 5 })pb");
  const std::string tp = Run(tensor);
  ASSERT_FALSE(tp.empty()) << cluster_->Logs();
  absl::StatusOr<pp::v1::Job> job = GetJob(cluster_->stub(), tp);
  ASSERT_TRUE(job.ok()) << job.status();
  std::map<int, std::vector<std::string>> hosts_of_pp;
  for (const pp::v1::RankPlacement& rank : job->placement()) {
    hosts_of_pp[rank.pp()].push_back(host_of_.at(rank.worker()));
  }
  ASSERT_EQ(hosts_of_pp.size(), 2u);
  for (const auto& [pp, hosts] : hosts_of_pp) {
    ASSERT_EQ(hosts.size(), 2u);
    EXPECT_EQ(hosts[0], hosts[1]) << "pipeline rank " << pp << "'s TP group spans two hosts";
  }
  EXPECT_NE(hosts_of_pp[0][0], hosts_of_pp[1][0]);
  ExpectMatchesReference(tensor, tp, Match::kClose);
}

// 4 Mbit/s each way between the hosts, D=2 with one rank on each: a step sends M activations
// forward and M gradients back, B x T x C floats each, so it cannot take less than
// M x B x T x C x 32 bits / rate (the two directions overlap). Unshaped it takes a small part of that.
TEST_F(NetnsTest, ShapedLinkBoundsTheStep) {
  ASSERT_NO_FATAL_FAILURE(StartBed(/*hosts=*/2, /*per_host=*/1));
  if (bed_ == nullptr) return;
  constexpr int M = 8, B = 4, T = 64, C = 64;
  constexpr int64_t kRate = 4'000'000;
  const double bound = double{M} * B * T * C * 32 / kRate;  // 1.05 s
  const pp::v1::JobSpec spec = SpecFrom(absl::Substitute(R"pb(
    name: "shaped" model { seq_len: $0 d_model: $1 n_heads: 4 n_layers: 2 }
    parallel { pipeline: 2 schedule: "1f1b" }
    train { steps: 4 microbatches: $2 microbatch_size: $3 seed: 5 })pb", T, C, M, B));
  const double unshaped = MedianStepSeconds(spec);

  ASSERT_TRUE(bed_->Shape(1, LinkShape{kRate, absl::ZeroDuration()}).ok());
  const double shaped = MedianStepSeconds(spec);
  std::cout << "step seconds: unshaped " << unshaped << ", at 4 Mbit/s " << shaped
            << " (bound " << bound << ")\n";
  EXPECT_GE(shaped, 0.9 * bound);
  EXPECT_LT(unshaped, 0.5 * bound);
}

// parallel.schedule "auto" on four emulated hosts, once with free links and once with every link
// shaped to 50 Mbit/s (netem's delay is not in every kernel; tbf is): calibration measures the
// shaped bandwidth, and the planner reproduces the seed's advice from it, choosing fewer chunks
// when bandwidth is scarce. A fresh bed and ppcoord for each, so nothing is cached across them.
TEST_F(NetnsTest, AutoChoosesFewerChunksOnASlowLink) {
  constexpr int64_t kRate = 50'000'000;
  pp::v1::JobSpec spec = SpecFrom(R"pb(
    name: "auto" model { seq_len: 128 d_model: 128 n_heads: 4 n_layers: 22 }
    parallel { pipeline: 4 schedule: "auto" auto_plan { calibration_seconds: 5 max_replans: -1 } }
    train { steps: 3 microbatches: 4 microbatch_size: 1 seed: 5 })pb");
  spec.mutable_parallel()->set_chunks(0);  // chosen
  std::map<bool, pp::v1::Job> jobs;
  for (const bool shaped : {false, true}) {
    cluster_.reset();
    bed_.reset();
    ASSERT_NO_FATAL_FAILURE(StartBed(/*hosts=*/4, /*per_host=*/1));
    if (bed_ == nullptr) return;
    for (int h = 0; shaped && h < 4; ++h) {
      ASSERT_TRUE(bed_->Shape(h, LinkShape{kRate, absl::ZeroDuration()}).ok());
    }
    const std::string id = Run(spec);
    ASSERT_FALSE(id.empty()) << cluster_->Logs();
    absl::StatusOr<pp::v1::Job> job = GetJob(cluster_->stub(), id);
    ASSERT_TRUE(job.ok()) << job.status();
    jobs[shaped] = *job;
    const pp::v1::JobPlan& plan = job->plan();
    const double measured =
        static_cast<double>(common::GlobalTokensPerStep(job->spec())) / job->tokens_per_second();
    std::cout << (shaped ? "50 Mbit/s: " : "unshaped:  ") << plan.chosen() << ", predicted "
              << plan.predicted_step_seconds() << " s, measured " << measured << " s (last step)"
              << "; link 0->1 " << plan.calibration().ranks(0).link_bytes_per_second() / 1e6
              << " MB/s, " << plan.calibration().ranks(0).link_latency_seconds() * 1e3
              << " ms\n";
    // Shaped, every link measures the rate: tbf lets a burst of 10 ms at the rate (62.5 KB)
    // through unshaped, most of one 64 KiB activation (a single message read 12 to 42 MB/s), but
    // calibration streams 512 KiB a round, so at most about 1.1x the rate gets through.
    for (int r = 0; shaped && r < 3; ++r) {
      EXPECT_GT(plan.calibration().ranks(r).link_bytes_per_second(), 0.5 * kRate / 8) << r;
      EXPECT_LT(plan.calibration().ranks(r).link_bytes_per_second(), 2.0 * kRate / 8) << r;
    }
  }
  EXPECT_LT(jobs[true].spec().parallel().chunks(), jobs[false].spec().parallel().chunks())
      << "unshaped: " << jobs[false].plan().chosen() << "\n50 Mbit/s: " << jobs[true].plan().chosen();
}

}  // namespace
}  // namespace pp::mesh
