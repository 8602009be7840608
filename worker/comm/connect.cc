#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/device.h"
#include "worker/comm/transport.h"

namespace pp::comm {

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
