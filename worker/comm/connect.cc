#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/device.h"
#include "worker/comm/transport.h"

namespace pp::comm {

absl::StatusOr<std::vector<int>> PointToPointPeers(const TransportOptions& options) {
  if (!options.point_to_point) return std::vector<int>{};
  if (options.channels < 1 || options.channels > kMaxChannels) {
    return absl::InvalidArgumentError(absl::StrCat(options.channels, " channels, not in [1, ",
                                                   kMaxChannels, "]"));
  }
  std::vector<int> peers = options.peers;
  if (peers.empty()) {
    for (int r = 0; r < options.size; ++r) {
      if (r != options.rank) peers.push_back(r);
    }
  }
  std::set<int> seen;
  for (int peer : peers) {
    if (peer < 0 || peer >= options.size || peer == options.rank || !seen.insert(peer).second) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", options.rank,
                                                     ": bad or repeated peer ", peer,
                                                     " (world size ", options.size, ")"));
    }
  }
  return peers;
}

absl::StatusOr<std::unique_ptr<Transport>> ConnectForDevice(KvStore& store,
                                                            TransportOptions options,
                                                            const std::string& device) {
  absl::StatusOr<common::Device> parsed = common::ParseDevice(device);
  if (!parsed.ok()) return parsed.status();
  if (parsed->cuda) {
    options.cuda_device = parsed->cuda_index;
    return ConnectNccl(store, options);
  }
  const char* kind = std::getenv("PP_TEST_TRANSPORT");
  if (kind == nullptr || *kind == '\0' || std::strcmp(kind, "gloo") == 0) {
    return ConnectGloo(store, options);
  }
  if (std::strcmp(kind, "fifo") == 0) return ConnectFifo(store, options);
  return absl::InvalidArgumentError(absl::StrCat(
      "PP_TEST_TRANSPORT=", kind, " is not a CPU transport (fifo, gloo, or unset for gloo)"));
}

}  // namespace pp::comm
