// pp.v1.Worker/Calibrate on real ppworker daemons: three workers called at once meet through
// ppcoord's rendezvous and each answers within its budget with every unit timed and its link
// measured; a worker refuses a hostile request and a spec whose data lies outside its data_root.
#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "pp/v1/worker.grpc.pb.h"
#include "tests/e2e/integration/fixture.h"
#include "tests/support/cluster.h"

namespace pp::integration {
namespace {

using ::testing::HasSubstr;

class CalibrateTest : public IntegrationTest {
 protected:
  pp::v1::CalibrateRequest Request(int rank, int world, double budget) const {
    pp::v1::CalibrateRequest request;
    request.set_job_id("cal");
    request.set_attempt(1);
    request.set_rank(rank);
    request.set_world_size(world);
    *request.mutable_spec() = TinySpec("auto", 0, 1);
    request.mutable_spec()->mutable_parallel()->set_pipeline(world);
    request.add_sequences(1);
    request.add_sequences(8);
    request.set_rendezvous_prefix("cal/1/calibrate/");
    request.set_budget_seconds(budget);
    return request;
  }

  grpc::Status Call(const std::string& worker, const pp::v1::CalibrateRequest& request,
                    pp::v1::RankCalibration* answer, double deadline_seconds) const {
    auto stub = pp::v1::Worker::NewStub(grpc::CreateChannel(
        cluster_->worker_addresses(worker).grpc, grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::milliseconds(static_cast<int>(deadline_seconds * 1000)));
    return stub->Calibrate(&context, request, answer);
  }
};

TEST_F(CalibrateTest, ThreeWorkersAtOnceAnswerWithinTheBudget) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(3));
  constexpr double kBudget = 4;
  std::vector<pp::v1::RankCalibration> answers(3);
  std::vector<grpc::Status> statuses(3);
  std::vector<double> wall(3);
  std::vector<std::thread> calls;
  for (int r = 0; r < 3; ++r) {
    calls.emplace_back([&, r] {
      const auto start = std::chrono::steady_clock::now();
      statuses[r] = Call("w" + std::to_string(r), Request(r, 3, kBudget), &answers[r], 20);
      wall[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    });
  }
  for (std::thread& t : calls) t.join();
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(r);
    ASSERT_TRUE(statuses[r].ok()) << statuses[r].error_message() << "\n" << cluster_->Logs();
    const pp::v1::RankCalibration& c = answers[r];
    EXPECT_LT(wall[r], kBudget + 2);  // one action past the deadline, and the RPC itself
    EXPECT_GT(c.seconds(), 0);
    EXPECT_EQ(c.rank(), r);
    EXPECT_FALSE(c.worker().empty());
    EXPECT_GT(c.free_memory_bytes(), 0);
    // Three ppworkers on one machine: one identity, and at least a core each may use.
    EXPECT_FALSE(c.machine().empty());
    EXPECT_EQ(c.machine(), answers[0].machine());
    EXPECT_GE(c.cores(), 1);
    // Both sizes of every unit. Which costs more is ranks_test's to check, on a lone rank: here
    // the three workers' start-ups fall into each other's timing windows.
    ASSERT_EQ(c.units_size(), 3 * 2);
    std::set<std::pair<std::string, int>> seen;
    for (const pp::v1::UnitCost& u : c.units()) {
      EXPECT_GT(u.forward(), 0) << u.ShortDebugString();
      EXPECT_GT(u.backward(), 0) << u.ShortDebugString();
      EXPECT_GT(u.backward_input(), 0) << u.ShortDebugString();
      EXPECT_GT(u.backward_weight(), 0) << u.ShortDebugString();
      seen.insert({u.unit(), u.sequences()});
    }
    EXPECT_EQ(seen.size(), 6u);
    EXPECT_TRUE(seen.count({"block", 1}) && seen.count({"block", 8}));
    if (r < 2) {
      EXPECT_GT(c.link_latency_seconds(), 0);
      EXPECT_GT(c.link_bytes_per_second(), 0);
    } else {
      EXPECT_EQ(c.link_bytes_per_second(), 0);
    }
  }
}

TEST_F(CalibrateTest, RefusesHostileRequestsAndDataOutsideTheDataRoot) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1));
  pp::v1::RankCalibration answer;
  pp::v1::CalibrateRequest hostile = Request(0, 1, 1);
  hostile.set_budget_seconds(-1);
  grpc::Status status = Call("w0", hostile, &answer, 10);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("budget_seconds"));
  hostile = Request(0, 1, 1);
  hostile.set_sequences(0, 0);
  status = Call("w0", hostile, &answer, 10);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("sequences[0]"));

  testing_support::WorkerOptions rooted;
  rooted.flags = {"--data_root=" + (dir_ / "elsewhere").string()};
  std::filesystem::create_directories(dir_ / "elsewhere");
  ASSERT_TRUE(cluster_->StartWorker("rooted", rooted).ok()) << cluster_->Logs();
  status = Call("rooted", Request(0, 1, 1), &answer, 10);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("data_root"));
}

}  // namespace
}  // namespace pp::integration
