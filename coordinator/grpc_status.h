// absl::Status to grpc::Status for ppcoord's service adapters (internal).
#ifndef PP_COORDINATOR_GRPC_STATUS_H_
#define PP_COORDINATOR_GRPC_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace pp::coordinator {

// The same code and message: absl and gRPC share the canonical code numbers.
inline grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_GRPC_STATUS_H_
