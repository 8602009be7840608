// The headers the product's gRPC-facing files spend most of their compile time parsing: gRPC and
// the generated protocol. Compiled once into a precompiled header that the libraries and
// programs linking pp_proto or gRPC reuse (top CMakeLists.txt; cmake/precompiled_headers.cmake).
// Code still includes what it uses: builds without precompiled headers compile it all plainly.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "pp/v1/checkpoint.pb.h"
#include "pp/v1/coordinator.grpc.pb.h"
#include "pp/v1/job.pb.h"
#include "pp/v1/worker.grpc.pb.h"
