#include "common/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <exception>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace pp::common {
namespace {

// A TCP connection that is opened and closed at once; errors do not matter.
void Knock(const std::string& host, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) return;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  (void)connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  close(fd);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Serve(
    const HostPort& address, std::shared_ptr<prometheus::Registry> registry) {
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  try {
    // civetweb binds port 0 itself (GetListeningPorts says which), and reports a busy or
    // malformed address by throwing.
    server->exposer_ = std::make_unique<prometheus::Exposer>(std::vector<std::string>{
        "listening_ports", address.ToString(), "num_threads", absl::StrCat(kThreads),
        "request_timeout_ms", absl::StrCat(kRequestTimeoutMs), "enable_keep_alive", "no"});
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("--metrics=", address.ToString(), ": cannot listen: ", e.what()));
  }
  server->registry_ = std::move(registry);
  server->exposer_->RegisterCollectable(server->registry_);
  const std::vector<int> ports = server->exposer_->GetListeningPorts();
  server->port_ = ports.empty() ? 0 : ports.front();
  server->local_host_ =
      address.IsWildcard() || address.host == "localhost" ? "127.0.0.1" : address.host;
  return server;
}

MetricsServer::~MetricsServer() {
  // civetweb's listener polls in 2 s slices before it sees the stop flag; a connection wakes
  // it, so shutting down does not wait out the slice.
  std::atomic<bool> stopped = false;
  std::thread waker([this, &stopped] {
    while (!stopped) {
      Knock(local_host_, port_);
      absl::SleepFor(absl::Milliseconds(20));
    }
  });
  exposer_.reset();
  stopped = true;
  waker.join();
}

}  // namespace pp::common
