#include "kernels/peak.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/device.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/ops.h"

namespace pp::kernels {
namespace {

constexpr int kMinRuns = 3;

// Values in [-1, 1): no denormals or infinities that could slow a product down.
std::vector<float> Pattern(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 251) / 125.5f - 1.0f;
  return v;
}

// Seconds of one MatmulForward(out, a, b) of size^3, waited for on the device.
double TimeOne(Ops& ops, float* out, const float* a, const float* b, int size) {
  const auto start = std::chrono::steady_clock::now();
  ops.MatmulForward(out, a, b, nullptr, size, size, size);
  ops.Synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

absl::StatusOr<GemmPeak> MeasureGemmPeak(const std::string& device, int threads,
                                         common::Precision precision, double seconds) {
  absl::StatusOr<common::Device> parsed = common::ParseDevice(device);
  if (!parsed.ok()) return parsed.status();
  // The CPU's own constructor: MakeOps would print the bf16 path to stderr a second time, after
  // the run's own backend did.
  absl::StatusOr<std::unique_ptr<Ops>> ops =
      parsed->cuda
          ? MakeOps(device, threads, precision)
          : absl::StatusOr<std::unique_ptr<Ops>>(MakeCpuOps(std::max(threads, 1), precision));
  if (!ops.ok()) return ops.status();
  GemmPeak peak;
  peak.size = (*ops)->Name() == "cpu" ? 1024 : 4096;
  peak.threads = std::max(threads, 1);
  peak.precision = precision;
  const size_t n = static_cast<size_t>(peak.size) * peak.size;
  float* a = (*ops)->Alloc(n);
  float* b = (*ops)->Alloc(n);
  float* out = (*ops)->AllocUninitialized(n);
  const std::vector<float> host = Pattern(n);
  (*ops)->CopyToDevice(a, host.data(), n);
  (*ops)->CopyToDevice(b, host.data(), n);
  TimeOne(**ops, out, a, b, peak.size);  // warm-up: pool threads, packing buffers, GPU clocks
  double best = 0, total = 0;
  while (peak.runs < kMinRuns || total < seconds) {
    const double t = TimeOne(**ops, out, a, b, peak.size);
    best = peak.runs == 0 ? t : std::min(best, t);
    total += t;
    ++peak.runs;
  }
  (*ops)->Free(a), (*ops)->Free(b), (*ops)->Free(out);
  peak.flops_per_second = best > 0 ? 2.0 * peak.size * peak.size * peak.size / best : 0;
  return peak;
}

std::string GemmPeakShape(const GemmPeak& peak) {
  return absl::StrCat(common::PrecisionName(peak.precision), " GEMM ", peak.size, "^3");
}

}  // namespace pp::kernels
