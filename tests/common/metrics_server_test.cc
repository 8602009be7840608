// common/metrics_server.h: /metrics of a registry on a port the kernel picks, errors that name the
// flag, and a prompt stop.
#include "common/metrics_server.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/counter.h"
#include "tests/coordinator/test_support.h"

namespace pp::common {
namespace {

using ::testing::HasSubstr;

HostPort Loopback(int port) { return HostPort{"127.0.0.1", port}; }

TEST(MetricsServerTest, ServesTheRegistryOnAFreePort) {
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::BuildCounter()
      .Name("pp_test_total")
      .Help("a test counter")
      .Register(*registry)
      .Add({{"kind", "x"}})
      .Increment(3);
  absl::StatusOr<std::unique_ptr<MetricsServer>> server =
      MetricsServer::Serve(Loopback(0), registry);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  absl::StatusOr<std::string> body =
      coordinator::testing::HttpGet(absl::StrCat("127.0.0.1:", (*server)->port()), "/metrics");
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_THAT(*body, HasSubstr("pp_test_total{kind=\"x\"} 3"));

  // Stopping does not wait out civetweb's 2 s poll slice.
  const absl::Time start = absl::Now();
  server->reset();
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
}

TEST(MetricsServerTest, ABusyPortIsUnavailableNamingTheAddress) {
  auto registry = std::make_shared<prometheus::Registry>();
  absl::StatusOr<std::unique_ptr<MetricsServer>> first =
      MetricsServer::Serve(Loopback(0), registry);
  ASSERT_TRUE(first.ok()) << first.status();
  const HostPort taken = Loopback((*first)->port());
  absl::StatusOr<std::unique_ptr<MetricsServer>> second = MetricsServer::Serve(taken, registry);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(),
              HasSubstr(absl::StrCat("--metrics=", taken.ToString(), ": cannot listen")));
}

}  // namespace
}  // namespace pp::common
