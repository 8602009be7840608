// Prometheus text on http://HOST:PORT/metrics for a daemon (prometheus-cpp's Exposer: civetweb).
// Contract: Serve listens on `address` (port 0: a free port, which port() then names) and serves
// `registry` there; a busy or malformed address is Unavailable "--metrics=ADDRESS: cannot listen:
// WHY". Destroying the server stops serving promptly (well under civetweb's 2 s poll slice).
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
