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

// Sequence i's tensors are row slices of the packed ones: its qkv rows [cu[i], cu[i+1]) of 3C,
// its output rows of C, and its (1,NH,L,2) stats, 2 NH floats a token before it.
void AttentionForwardVarlen(Ops& ops, float* out, float* stats, const float* qkv, const int32_t* cu,
                            int S, int C, int NH) {
  for (int i = 0; i < S; ++i) {
    const size_t first = static_cast<size_t>(cu[i]);
    ops.AttentionForward(out + first * C, stats + first * 2 * NH, qkv + first * 3 * C, nullptr, 1,
                         cu[i + 1] - cu[i], C, NH);
  }
}

void AttentionBackwardVarlen(Ops& ops, float* dqkv, const float* dout, const float* qkv,
                             const float* stats, const int32_t* cu, int S, int C, int NH) {
  for (int i = 0; i < S; ++i) {
    const size_t first = static_cast<size_t>(cu[i]);
    ops.AttentionBackward(dqkv + first * 3 * C, dout + first * C, qkv + first * 3 * C,
                          stats + first * 2 * NH, nullptr, 1, cu[i + 1] - cu[i], C, NH);
  }
}

}  // namespace pp::kernels
