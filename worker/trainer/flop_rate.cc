#include "worker/trainer/flop_rate.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/data_spec.h"
#include "common/device.h"
#include "common/model_flops.h"

namespace pp::trainer {
namespace {

// "12.3 GFLOP/s": three significant digits in the unit that keeps the number readable.
std::string RateText(double flops_per_second) {
  if (flops_per_second >= 1e12) return absl::StrFormat("%.3g TFLOP/s", flops_per_second / 1e12);
  if (flops_per_second >= 1e9) return absl::StrFormat("%.3g GFLOP/s", flops_per_second / 1e9);
  return absl::StrFormat("%.3g MFLOP/s", flops_per_second / 1e6);
}

const char* Plural(double n) { return n == 1 ? "" : "s"; }

// The processes whose rates add up: setup.processes, capped at cores / threads on the CPU, 1 on
// a GPU. `why` gets what capped them, "" when nothing did.
double ParallelProcesses(const PeakSetup& setup, bool gpu, int cores, std::string* why) {
  if (gpu) {
    if (setup.processes > 1) *why = "one GPU";  // every worker on it shares its rate
    return 1;
  }
  const double fit = static_cast<double>(std::max(cores, 1)) / std::max(setup.threads, 1);
  const double processes = std::max(1.0, std::min<double>(setup.processes, fit));
  if (processes < setup.processes) *why = absl::StrCat(cores, " cores");
  return processes;
}

}  // namespace

PeakSetup PeakSetupOf(const pp::v1::JobSpec& spec, const std::string& device, int processes) {
  PeakSetup setup;
  setup.device = device;
  setup.threads = std::max(spec.train().threads(), 1);
  absl::StatusOr<common::Precision> precision = common::PrecisionFromName(spec.train().precision());
  setup.precision = precision.ok() ? *precision : common::Precision::kFp32;
  setup.processes = std::max(processes, 1);
  setup.masked_documents = common::MasksDocuments(spec);
  return setup;
}

std::string FlopRateTextWith(double flops_per_second, const absl::StatusOr<kernels::GemmPeak>& peak,
                             const PeakSetup& setup, int cores) {
  std::string text = absl::StrCat(
      RateText(flops_per_second), " (6N+12LTC per token x tokens/s",
      setup.masked_documents ? "; 12LTC counts whole windows, more than the documents mask computes"
                             : "",
      ")");
  if (!peak.ok()) {
    absl::StrAppend(&text, "; no measured peak: ", peak.status().message());
    return text;
  }
  absl::StatusOr<common::Device> device = common::ParseDevice(setup.device);
  const bool gpu = device.ok() && device->cuda;
  std::string capped;
  const double processes = ParallelProcesses(setup, gpu, cores, &capped);
  const double total = peak->flops_per_second * processes;
  // A GPU's rate does not depend on the host threads that launch its GEMMs.
  const std::string where =
      gpu
          ? absl::StrCat("on ", setup.device)
          : absl::StrFormat("at %d thread%s", peak->threads, Plural(peak->threads));
  absl::StrAppendFormat(&text, ", %.3g%% of the measured peak %s (%s %s x %g process%s",
                        total > 0 ? 100 * flops_per_second / total : 0.0, RateText(total),
                        kernels::GemmPeakShape(*peak), where, processes,
                        processes == 1 ? "" : "es");
  if (!capped.empty()) absl::StrAppend(&text, " of ", setup.processes, ": ", capped);
  return absl::StrCat(text, ")");
}

std::string FlopRateText(const pp::v1::ModelSpec& model, double tokens_per_second,
                         const PeakSetup& setup) {
  if (!(tokens_per_second > 0)) return "not known (no step timing; the peak was not measured)";
  const double rate = common::TrainFlopsPerToken(model) * tokens_per_second;
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  return FlopRateTextWith(
      rate, kernels::MeasureGemmPeak(setup.device, setup.threads, setup.precision), setup, cores);
}

}  // namespace pp::trainer
