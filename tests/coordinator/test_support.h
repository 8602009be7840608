// Helpers for the ppcoord tests: a fake worker daemon, raw health/reflection calls (their protos
// ship inside libgrpc++, not as headers), and an HTTP scrape of /metrics.
#ifndef PP_TESTS_COORDINATOR_TEST_SUPPORT_H_
#define PP_TESTS_COORDINATOR_TEST_SUPPORT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/server.h"
#include "pp/v1/coordinator.grpc.pb.h"
#include "pp/v1/worker.grpc.pb.h"

namespace pp::coordinator::testing {

// A Worker service on a free loopback port that registers with the coordinator and heartbeats
// every 50 ms with the job it holds. It runs nothing: RunTask records the plan; AbortTask (or an
// abort_jobs answer) drops the job.
class FakeWorker final : public pp::v1::Worker::Service {
 public:
  // `memory_bytes`: what it announces (WorkerInfo.memory_bytes); 0 = unknown.
  FakeWorker(const std::string& name, const std::string& coordinator, int64_t memory_bytes = 0);
  ~FakeWorker() override;

  void StopHeartbeats();
  // Gone as after SIGKILL: no heartbeats, and its server refuses connections (the answers of calls
  // it already handled are still delivered).
  void Vanish();
  bool WaitForTask(absl::Duration timeout);  // true once a RunTask arrived
  std::vector<pp::v1::TaskPlan> tasks();
  std::vector<std::string> aborted_jobs();
  std::string job();  // the job it holds, "" when free
  // Says the task ended (TaskReport, error_code = `code` when not ok; drained: it stopped at the
  // coordinator's stop_after_step) and drops the job.
  void FinishTask(bool ok, const std::string& error,
                  absl::StatusCode code = absl::StatusCode::kInternal, bool drained = false);
  int calibrations();  // Calibrate calls answered so far
  pp::v1::WorkerRegistry::Stub& registry() { return *registry_; }
  const std::string& name() const { return name_; }

  grpc::Status RunTask(grpc::ServerContext*, const pp::v1::TaskPlan* plan,
                       pp::v1::RunTaskResponse*) override;
  grpc::Status AbortTask(grpc::ServerContext*, const pp::v1::AbortTaskRequest* request,
                         pp::v1::AbortTaskResponse*) override;
  // Every unit at every requested size: forward 1 ms per sequence (the head 1.5x, the embedding
  // 0.1x), backward twice that (I and W half each), optimizer 10 us; the link to the next rank
  // 10 us and 10 GB/s; no machine (alone).
  grpc::Status Calibrate(grpc::ServerContext*, const pp::v1::CalibrateRequest* request,
                         pp::v1::RankCalibration* answer) override;

 private:
  void Register();
  void HeartbeatLoop();

  const std::string name_;
  const int64_t memory_bytes_;
  std::unique_ptr<pp::v1::WorkerRegistry::Stub> registry_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  absl::Mutex mu_;
  std::vector<pp::v1::TaskPlan> tasks_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> aborted_ ABSL_GUARDED_BY(mu_);
  std::string job_ ABSL_GUARDED_BY(mu_);
  int attempt_ ABSL_GUARDED_BY(mu_) = 0;
  bool heartbeating_ ABSL_GUARDED_BY(mu_) = true;
  int calibrations_ ABSL_GUARDED_BY(mu_) = 0;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool serving_ = true;  // touched by the test thread only
  std::thread heartbeat_;
};

// grpc.health.v1.Health/Check for service "": the ServingStatus number (1 = SERVING).
absl::StatusOr<int> HealthCheck(const std::shared_ptr<grpc::Channel>& channel);

// Service names listed by grpc.reflection.v1alpha.ServerReflection (list_services).
absl::StatusOr<std::vector<std::string>> ReflectionServices(
    const std::shared_ptr<grpc::Channel>& channel);

// Body of GET http://<address>/metrics (an error unless the answer is 200).
absl::StatusOr<std::string> HttpGet(const std::string& address, const std::string& path);

// Polls `condition` every 20 ms until it holds or `timeout` passes; returns its last value.
bool WaitUntil(const std::function<bool()>& condition, absl::Duration timeout);

}  // namespace pp::coordinator::testing

#endif  // PP_TESTS_COORDINATOR_TEST_SUPPORT_H_
