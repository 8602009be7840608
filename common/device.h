// The device a worker computes on, as --device and TaskEnv::device spell it: "cpu" (CPU kernels,
// Gloo over TCP) or "cuda:N" (GPU N, NCCL). Contract: ParseDevice accepts exactly those two shapes,
// N in decimal digits (whether GPU N exists is for the CUDA plugin to say); anything else is
// InvalidArgument reading "--FLAG=VALUE: want cpu or cuda:N" when `flag` is given, "device 'VALUE':
// want cpu or cuda:N" otherwise. Pure functions: thread-safe.
#ifndef PP_COMMON_DEVICE_H_
#define PP_COMMON_DEVICE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pp::common {

struct Device {
  bool cuda = false;   // false: the CPU
  int cuda_index = 0;  // GPU N of cuda:N

  // "cpu" or "cuda:N" again.
  std::string ToString() const;
};

absl::StatusOr<Device> ParseDevice(absl::string_view text, absl::string_view flag = "");

}  // namespace pp::common

#endif  // PP_COMMON_DEVICE_H_
