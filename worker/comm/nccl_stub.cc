// ConnectNccl in builds without CUDA/NCCL.
#include "worker/comm/transport.h"

namespace pp::comm {

absl::StatusOr<std::unique_ptr<Transport>> ConnectNccl(KvStore& store,
                                                       const TransportOptions& options) {
  return absl::UnimplementedError("this ppworker was built without CUDA/NCCL");
}

}  // namespace pp::comm
