// The pure parts of worker/calibrate: medians, the link arithmetic, the timing spec, and the
// request checks against hostile values, and the machine identity and cores.
#include <sched.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "worker/calibrate/calibrate.h"

namespace pp::calibrate {
namespace {

using ::testing::HasSubstr;

// Compute costs are means: a stall (a time slice lost to another process on the core) counts.
TEST(MeanTest, CountsTheOutlier) {
  EXPECT_EQ(Mean({3.0}), 3.0);
  EXPECT_EQ(Mean({4.0, 1.0, 100.0, 3.0}), 27.0);
}

TEST(MedianTest, OddEvenAndOne) {
  EXPECT_EQ(Median({3.0}), 3.0);
  EXPECT_EQ(Median({5.0, 1.0, 3.0}), 3.0);
  EXPECT_EQ(Median({4.0, 1.0, 100.0, 2.0}), 3.0);  // (2 + 4) / 2: the outlier does not count
}

TEST(LinkTest, LatencyIsHalfTheSmallRoundTripAndBandwidthTheRest) {
  // A float there and back in 2 ms (the median; the fastest too); 1 MB one way and a float back
  // in 12 ms at best: the bytes took the 10 ms more, 100 MB/s. Slower rounds waited elsewhere.
  const Link link = LinkFromRoundTrips({0.002, 0.002, 0.009}, {0.014, 0.030, 0.012}, 1000000);
  EXPECT_DOUBLE_EQ(link.latency_seconds, 0.001);
  EXPECT_NEAR(link.bytes_per_second, 1e8, 1);
}

TEST(LinkTest, AStreamNoSlowerThanASmallRoundStillGivesAFinitePositiveBandwidth) {
  const Link link = LinkFromRoundTrips({0.004}, {0.003}, 1000);
  EXPECT_DOUBLE_EQ(link.latency_seconds, 0.002);
  EXPECT_DOUBLE_EQ(link.bytes_per_second, 1000 / 0.003);  // the whole stream round
  EXPECT_TRUE(std::isfinite(LinkFromRoundTrips({0.001}, {0.001}, 1000).bytes_per_second));
}

// Under load the small round trips swing: one near the stream's round would leave a tiny
// difference and a huge bandwidth. Below half the stream's round it is not trusted.
TEST(LinkTest, ASmallRoundCloseToTheStreamRoundDoesNotInflateTheBandwidth) {
  const Link link = LinkFromRoundTrips({0.0036}, {0.004}, 64000);
  EXPECT_DOUBLE_EQ(link.bytes_per_second, 64000 / 0.004);
}

pp::v1::CalibrateRequest Valid() {
  pp::v1::CalibrateRequest request;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(R"pb(
    job_id: "j" attempt: 1 rank: 1 world_size: 2
    spec {
      model { vocab_size: 256 seq_len: 16 d_model: 32 n_heads: 2 n_layers: 2 }
      parallel { pipeline: 2 schedule: "auto" recompute: "auto" }
      train { steps: 1 microbatches: 4 microbatch_size: 2 }
      data { format: "generated" }
    }
    sequences: [ 1, 2 ]
    rendezvous_prefix: "j/1/calibrate/"
    budget_seconds: 5
  )pb", &request));
  return request;
}

// The boot id where /proc has it (every Linux), named so that it never equals a hostname.
TEST(MachineTest, IdentityIsTheBootIdAndCoresTheAffinityMask) {
  const std::string machine = MachineIdentity();
  EXPECT_TRUE(machine.rfind("boot:", 0) == 0 || machine.rfind("host:", 0) == 0) << machine;
  EXPECT_GT(machine.size(), 5u) << machine;
  EXPECT_EQ(MachineIdentity(), machine);  // stable
  const int cores = UsableCores();
  EXPECT_GE(cores, 1);
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_EQ(cores, CPU_COUNT(&set));
}

TEST(CheckRequestTest, AcceptsAnAutoSpec) {
  absl::Status s = CheckRequest(Valid());
  EXPECT_TRUE(s.ok()) << s;
}

TEST(CheckRequestTest, RefusesHostileValuesNamingTheField) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    const char* field;
    std::function<void(pp::v1::CalibrateRequest&)> edit;
  };
  const std::vector<Case> cases = {
      {"world_size", [](auto& r) { r.set_world_size(0); }},
      {"world_size", [](auto& r) { r.set_world_size(1 << 30); }},
      {"rank", [](auto& r) { r.set_rank(2); }},
      {"rank", [](auto& r) { r.set_rank(-1); }},
      {"budget_seconds", [](auto& r) { r.set_budget_seconds(0); }},
      {"budget_seconds", [](auto& r) { r.set_budget_seconds(-3); }},
      {"budget_seconds", [](auto& r) { r.set_budget_seconds(1e12); }},
      {"budget_seconds", [nan](auto& r) { r.set_budget_seconds(nan); }},
      {"budget_seconds", [inf](auto& r) { r.set_budget_seconds(inf); }},
      {"message_bytes", [](auto& r) { r.set_message_bytes(-1); }},
      {"message_bytes", [](auto& r) { r.set_message_bytes(int64_t{1} << 40); }},
      {"rendezvous_prefix", [](auto& r) { r.clear_rendezvous_prefix(); }},
      {"rendezvous_prefix", [](auto& r) { r.set_rendezvous_prefix(std::string(5000, 'k')); }},
      {"sequences", [](auto& r) { r.clear_sequences(); }},
      {"sequences", [](auto& r) {
         for (int i = 0; i < 20; ++i) r.add_sequences(1);
       }},
      {"sequences[1]", [](auto& r) { r.set_sequences(1, 0); }},
      {"sequences[0]", [](auto& r) { r.set_sequences(0, -7); }},
      {"sequences[1]", [](auto& r) { r.set_sequences(1, 1 << 30); }},
      // Within the microbatch limit, but its MLP activation (B x T x 4C) is over 2^31 floats.
      {"sequences[1]", [](auto& r) {
         r.set_sequences(1, 65536);
         r.mutable_spec()->mutable_model()->set_d_model(1024);
         r.mutable_spec()->mutable_model()->set_seq_len(1024);
       }},
      {"spec", [](auto& r) { r.mutable_spec()->mutable_model()->set_n_heads(5); }},
      {"spec", [](auto& r) { r.mutable_spec()->mutable_parallel()->set_pipeline(9); }},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    pp::v1::CalibrateRequest r = Valid();
    cases[i].edit(r);
    absl::Status s = CheckRequest(r);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "case " << i;
    EXPECT_THAT(s.message(), HasSubstr(std::string("calibrate request ") + cases[i].field + ":"))
        << "case " << i << ": " << s;
  }
}

TEST(TimingSpecTest, OneMicrobatchOfTheGivenSizeWithoutDataOrTensorParallelism) {
  pp::v1::CalibrateRequest request = Valid();
  request.mutable_spec()->mutable_parallel()->set_data(2);
  request.mutable_spec()->mutable_parallel()->set_tensor(2);
  const pp::v1::JobSpec spec = TimingSpec(request.spec(), 3);
  EXPECT_EQ(spec.train().microbatch_size(), 3);
  EXPECT_EQ(spec.train().microbatches(), 1);
  EXPECT_EQ(spec.parallel().data(), 1);
  EXPECT_EQ(spec.parallel().tensor(), 1);
  EXPECT_EQ(spec.parallel().recompute(), "none");  // "auto" times no recomputation
  EXPECT_EQ(spec.parallel().schedule(), "1f1b");
}

TEST(MessageBytesTest, ZeroMeansTheLargestActivation) {
  pp::v1::CalibrateRequest request = Valid();
  EXPECT_EQ(MessageBytes(request), 2 * 16 * 32 * 4);  // B=2 sequences x T x C floats
  request.set_message_bytes(12345);
  EXPECT_EQ(MessageBytes(request), 12345);
}

}  // namespace
}  // namespace pp::calibrate
