// Prometheus text on http://HOST:PORT/metrics for a daemon (prometheus-cpp's Exposer: civetweb).
// Contract: Serve listens on `address` (port 0: a free port, which port() then names) and serves
// `registry` there; a busy or malformed address is Unavailable "--metrics=ADDRESS: cannot listen:
// WHY". Destroying the server stops serving promptly (well under civetweb's 2 s poll slice).
// Idle connections cannot stall it for long (ppcoord's /metrics is a liveness probe): kThreads
// connections are served at once, each by a thread of its own, and one that has not sent its whole
// request within kRequestTimeoutMs of a thread taking it up (or stalls a read or write that long)
// is closed, so a connection holds a thread about that long at most; no keep-alive.
// Thread-safe as the registry is: metrics may change while a scrape reads them.
#ifndef PP_COMMON_METRICS_SERVER_H_
#define PP_COMMON_METRICS_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/host_port.h"
#include "prometheus/exposer.h"
#include "prometheus/registry.h"

namespace pp::common {

class MetricsServer {
 public:
  static constexpr int kThreads = 16;
  static constexpr int kRequestTimeoutMs = 2000;

  static absl::StatusOr<std::unique_ptr<MetricsServer>> Serve(
      const HostPort& address, std::shared_ptr<prometheus::Registry> registry);
  ~MetricsServer();

  int port() const { return port_; }

 private:
  MetricsServer() = default;

  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::string local_host_;  // where a connection from this machine reaches the listener
  int port_ = 0;
};

}  // namespace pp::common

#endif  // PP_COMMON_METRICS_SERVER_H_
