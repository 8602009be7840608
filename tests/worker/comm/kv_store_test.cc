// The worker's rendezvous client over the coordinator's KvGet: a registry served by this test
// (real gRPC on loopback port 0) answers each KvGet within a short cap, as ppcoord does, so a key
// set later than one server wait is still found, and a key never set ends at the caller's deadline.
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "pp/v1/coordinator.grpc.pb.h"
#include "worker/comm/transport.h"

namespace pp::comm {
namespace {

// KvGet waits at most kCap, then answers DEADLINE_EXCEEDED: "not yet".
class CappedRegistry : public pp::v1::WorkerRegistry::Service {
 public:
  static constexpr absl::Duration kCap = absl::Milliseconds(100);

  grpc::Status KvGet(grpc::ServerContext*, const pp::v1::KvGetRequest* request,
                     pp::v1::KvGetResponse* response) override {
    absl::MutexLock lock(&mu_);
    ++calls_;
    if (absl::StartsWith(request->keys(0), "other/")) {
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "not a worker of attempt other/1");
    }
    auto present = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return values_.count(request->keys(0)) > 0;
    };
    const absl::Duration wait = std::min(absl::Seconds(request->timeout_seconds()), kCap);
    if (!mu_.AwaitWithTimeout(absl::Condition(&present), wait)) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "not set yet");
    }
    response->add_values(values_[request->keys(0)]);
    return grpc::Status::OK;
  }
  void Put(const std::string& key, const std::string& value) {
    absl::MutexLock lock(&mu_);
    values_[key] = value;
  }
  int calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
};

class KvStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int port = 0;
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&registry_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = pp::v1::WorkerRegistry::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
    kv_ = NewCoordinatorKvStore(stub_.get());
  }
  void TearDown() override { server_->Shutdown(absl::ToChronoTime(absl::Now())); }

  CappedRegistry registry_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<pp::v1::WorkerRegistry::Stub> stub_;
  std::unique_ptr<KvStore> kv_;
};

TEST_F(KvStoreTest, AKeySetAfterSeveralServerWaitsIsFound) {
  std::thread late([this] {
    absl::SleepFor(CappedRegistry::kCap * 5);  // the peer that publishes late
    registry_.Put("j/0/peer", "address");
  });
  absl::StatusOr<std::string> got = kv_->Get("j/0/peer", absl::Seconds(20));
  late.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "address");
  EXPECT_GE(registry_.calls(), 2);  // asked again after a "not yet"
}

TEST_F(KvStoreTest, AKeyNeverSetEndsAtTheCallersDeadline) {
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> got = kv_->Get("j/0/never", CappedRegistry::kCap * 4);
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded) << got.status();
  EXPECT_THAT(got.status().message(), ::testing::HasSubstr("j/0/never"));
  EXPECT_GE(took, CappedRegistry::kCap * 4);
  EXPECT_LT(took, absl::Seconds(10));
}

// A refusal is not "not yet": it ends the wait at once and keeps its code, so the task fails with
// it instead of looking like a lost coordinator.
TEST_F(KvStoreTest, ARefusedKeyFailsAtOnceWithTheRefusalsCode) {
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> got = kv_->Get("other/1/peer", absl::Seconds(20));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kPermissionDenied) << got.status();
  EXPECT_THAT(got.status().message(), ::testing::HasSubstr("not a worker of attempt other/1"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(registry_.calls(), 1);
}

}  // namespace
}  // namespace pp::comm
