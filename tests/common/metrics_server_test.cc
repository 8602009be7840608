// common/metrics_server.h: /metrics of a registry on a port the kernel picks, errors that name the
// flag, a prompt stop, and idle connections that cannot stall a scrape.
#include "common/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <vector>

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

// A connected TCP socket to 127.0.0.1:port that sends nothing; -1 when connect fails.
int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Whether the server closes `fd` (end of stream, or a reset) within `timeout`.
bool ClosedWithin(int fd, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  char buffer[512];
  for (absl::Time now = absl::Now(); now < deadline; now = absl::Now()) {
    pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
    if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(deadline - now) + 1)) <= 0) continue;
    if (read(fd, buffer, sizeof(buffer)) <= 0) return true;  // anything it says before is fine
  }
  return false;
}

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

// ppcoord's /metrics is a liveness probe: more idle connections than it has threads delay a scrape
// by one request timeout at most, and each is closed after it.
TEST(MetricsServerTest, IdleConnectionsNeitherStallAScrapeNorStayOpen) {
  auto registry = std::make_shared<prometheus::Registry>();
  absl::StatusOr<std::unique_ptr<MetricsServer>> server =
      MetricsServer::Serve(Loopback(0), registry);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  std::vector<int> idle;
  for (int i = 0; i < MetricsServer::kThreads + 4; ++i) {
    idle.push_back(Connect(port));
    ASSERT_GE(idle.back(), 0) << i;
  }
  const absl::Duration timeout = absl::Milliseconds(MetricsServer::kRequestTimeoutMs);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> body =
      coordinator::testing::HttpGet(absl::StrCat("127.0.0.1:", port), "/metrics");
  EXPECT_TRUE(body.ok()) << body.status();
  EXPECT_LT(absl::Now() - start, 2 * timeout + absl::Seconds(2));
  for (int fd : idle) {
    EXPECT_TRUE(ClosedWithin(fd, timeout + absl::Seconds(3)));
    close(fd);
  }
}

}  // namespace
}  // namespace pp::common
