#include "kernels/ops.h"

#include <iostream>

#include "absl/strings/str_cat.h"
#include "common/device.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/plugin.h"

namespace pp::kernels {
namespace {

// The CUDA backend lives in the plugin; only this path loads it.
absl::StatusOr<std::unique_ptr<Ops>> MakeCudaOps(const std::string& device, int index,
                                                  common::Precision precision) {
  absl::StatusOr<const CudaPlugin*> plugin = LoadCudaPlugin();
  if (!plugin.ok()) {
    return absl::Status(plugin.status().code(),
                        absl::StrCat(device, ": ", plugin.status().message()));
  }
  Ops* ops = nullptr;
  PpCudaError error{};
  const int code = (*plugin)->make_ops(index, precision == common::Precision::kBf16 ? 1 : 0,
                                       &ops, &error);
  if (code != 0) return PluginStatus(code, error);
  return std::unique_ptr<Ops>(ops);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Ops>> MakeOps(const std::string& device, int threads,
                                              common::Precision precision) {
  absl::StatusOr<common::Device> parsed = common::ParseDevice(device);
  if (!parsed.ok()) return parsed.status();
  absl::StatusOr<std::unique_ptr<Ops>> ops =
      parsed->cuda ? MakeCudaOps(device, parsed->cuda_index, precision)
                   : MakeCpuOps(threads < 1 ? 1 : threads, precision);
  if (ops.ok() && precision == common::Precision::kBf16) {
    std::cerr << "pp: " << (*ops)->Name() << " matmuls in " << (*ops)->MatmulPath() << "\n";
  }
  return ops;
}

bool CudaDeviceAvailable() {
  absl::StatusOr<const CudaPlugin*> plugin = LoadCudaPlugin();
  if (!plugin.ok()) return false;
  int count = 0;
  PpCudaError error{};
  return (*plugin)->device_count(&count, &error) == 0 && count > 0;
}

}  // namespace pp::kernels
