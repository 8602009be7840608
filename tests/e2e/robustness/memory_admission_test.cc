// Admission by memory with real processes (ppcoord + ppworker on loopback): a worker started
// with a small --memory_bytes makes ppcoord refuse, at submit, a job whose estimated peak exceeds
// it, naming the rank, the estimate and the worker; a job that fits runs to the end on it.
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/support/cluster.h"
#include "tests/support/fixture.h"

namespace pp::robustness {
namespace {

using ::pp::testing_support::ListWorkers;
using ::pp::testing_support::SubmitJob;
using ::pp::testing_support::WaitSucceeded;
using ::testing::HasSubstr;

class MemoryAdmissionTest : public testing_support::ClusterTest {
 protected:
  MemoryAdmissionTest() : ClusterTest(/*corpus_seed=*/19, /*corpus_bytes=*/20000) {}

  pp::v1::JobSpec Spec(int d_model) const {
    pp::v1::JobSpec spec = SpecFrom(R"pb(
      name: "memory"
      model { seq_len: 32 n_heads: 4 n_layers: 2 }
      parallel { pipeline: 1 }
      train { steps: 2 microbatches: 2 microbatch_size: 2 seed: 5 }
    )pb");
    spec.mutable_model()->set_d_model(d_model);
    return spec;
  }

  // PlanJob's estimate for the single rank of `spec`.
  int64_t Estimate(const pp::v1::JobSpec& spec) {
    pp::v1::PlanJobRequest request;
    *request.mutable_spec() = spec;
    pp::v1::PlanJobResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    const grpc::Status status = cluster_->stub().PlanJob(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.memory_size(), 1);
    return response.memory_size() == 1 ? response.memory(0).total() : 0;
  }
};

TEST_F(MemoryAdmissionTest, AnOversizedJobIsRefusedAtSubmitAndOneThatFitsRuns) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(0));
  const pp::v1::JobSpec fits = Spec(/*d_model=*/32), too_big = Spec(/*d_model=*/512);
  const int64_t small = Estimate(fits), large = Estimate(too_big);
  ASSERT_GT(small, 0);
  ASSERT_GT(large, small + (int64_t{16} << 20));  // 512 x 512 blocks: tens of MiB more
  const int64_t budget = small + (large - small) / 2;
  testing_support::WorkerOptions worker;
  worker.flags = {absl::StrCat("--memory_bytes=", budget)};
  ASSERT_TRUE(cluster_->StartWorker("w0", worker).ok()) << cluster_->Logs();
  absl::StatusOr<std::vector<pp::v1::WorkerInfo>> workers = ListWorkers(cluster_->stub());
  ASSERT_TRUE(workers.ok()) << workers.status();
  ASSERT_EQ(workers->size(), 1u);
  EXPECT_EQ((*workers)[0].memory_bytes(), budget);  // the flag, not the host's memory

  absl::StatusOr<std::string> refused = SubmitJob(cluster_->stub(), too_big);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  const std::string message(refused.status().message());
  EXPECT_THAT(message, HasSubstr(absl::StrCat("rank 0 needs an estimated")));
  EXPECT_THAT(message, HasSubstr(absl::StrCat("(", large, " bytes)")));
  EXPECT_THAT(message, HasSubstr(absl::StrCat("worker w0 has ")));
  EXPECT_THAT(message, HasSubstr(absl::StrCat("(", budget, " bytes)")));

  absl::StatusOr<std::string> id = SubmitJob(cluster_->stub(), fits);
  ASSERT_TRUE(id.ok()) << id.status();
  absl::StatusOr<pp::v1::Job> done = WaitSucceeded(cluster_->stub(), *id, absl::Seconds(60));
  ASSERT_TRUE(done.ok()) << done.status() << cluster_->Logs();
  EXPECT_EQ(done->placement(0).worker(), "w0");
}

}  // namespace
}  // namespace pp::robustness
