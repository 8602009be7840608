// worker/trainer/flop_rate.h: the peak of several worker processes (capped by the cores, shared on
// a GPU), the text without timing or without a peak, and kernels/peak.h's measurement itself.
#include "worker/trainer/flop_rate.h"

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/peak.h"

namespace pp::trainer {
namespace {

using ::testing::HasSubstr;

// A measured peak of 100 GFLOP/s at `threads`, fp32 1024^3.
kernels::GemmPeak Peak(int threads) {
  kernels::GemmPeak peak;
  peak.flops_per_second = 100e9, peak.size = 1024, peak.threads = threads, peak.runs = 3;
  return peak;
}

PeakSetup Workers(const std::string& device, int threads, int processes) {
  PeakSetup setup;
  setup.device = device, setup.threads = threads, setup.processes = processes;
  return setup;
}

TEST(FlopRateTest, ProcessesMultiplyThePeakUpToTheCores) {
  // 2 processes of 4 threads on 16 cores: both run at full rate, 200 GFLOP/s; 50 is a quarter.
  EXPECT_EQ(FlopRateTextWith(50e9, Peak(4), Workers("cpu", 4, 2), 16),
            "50 GFLOP/s (6N+12LTC per token x tokens/s), 25% of the measured peak 200 GFLOP/s "
            "(fp32 GEMM 1024^3 at 4 threads x 2 processes)");
  // 4 single-thread processes on 2 cores share them: the peak is 2 processes' worth.
  EXPECT_THAT(FlopRateTextWith(50e9, Peak(1), Workers("cpu", 1, 4), 2),
              HasSubstr("25% of the measured peak 200 GFLOP/s (fp32 GEMM 1024^3 at 1 thread x 2 "
                        "processes of 4: 2 cores)"));
  // More threads than cores: the one process measured is the peak, never less.
  EXPECT_THAT(FlopRateTextWith(50e9, Peak(4), Workers("cpu", 4, 1), 2),
              HasSubstr("50% of the measured peak 100 GFLOP/s (fp32 GEMM 1024^3 at 4 threads x 1 "
                        "process)"));
}

TEST(FlopRateTest, WorkersOnOneGpuShareItsRate) {
  EXPECT_THAT(FlopRateTextWith(50e9, Peak(1), Workers("cuda:0", 1, 4), 64),
              HasSubstr("50% of the measured peak 100 GFLOP/s (fp32 GEMM 1024^3 on cuda:0 x 1 "
                        "process of 4: one GPU)"));
}

TEST(FlopRateTest, AFailedMeasurementIsNamedAndNoRateSkipsIt) {
  EXPECT_EQ(FlopRateTextWith(2e6, absl::UnavailableError("no device"), Workers("cpu", 1, 1), 2),
            "2 MFLOP/s (6N+12LTC per token x tokens/s); no measured peak: no device");
  pp::v1::ModelSpec model;
  model.set_n_layers(1), model.set_d_model(8), model.set_seq_len(4), model.set_vocab_size(16);
  EXPECT_EQ(FlopRateText(model, 0, Workers("cpu", 1, 1)),
            "not known (no step timing; the peak was not measured)");
}

TEST(FlopRateTest, AMaskedJobsRateSaysItCountsWholeWindows) {
  PeakSetup setup = Workers("cpu", 1, 1);
  setup.masked_documents = true;
  EXPECT_THAT(FlopRateTextWith(2e6, absl::UnavailableError("no device"), setup, 2),
              HasSubstr("2 MFLOP/s (6N+12LTC per token x tokens/s; 12LTC counts whole windows, "
                        "more than the documents mask computes)"));
  pp::v1::JobSpec spec;
  EXPECT_FALSE(PeakSetupOf(spec, "cpu", 1).masked_documents);
  spec.mutable_data()->set_documents("mask");
  EXPECT_TRUE(PeakSetupOf(spec, "cpu", 1).masked_documents);
}

TEST(GemmPeakTest, MeasuresTheBestOfAtLeastThreeRuns) {
  absl::StatusOr<kernels::GemmPeak> peak =
      kernels::MeasureGemmPeak("cpu", 1, common::Precision::kFp32, /*seconds=*/0.01);
  ASSERT_TRUE(peak.ok()) << peak.status();
  EXPECT_GE(peak->runs, 3);
  EXPECT_EQ(peak->size, 1024);
  EXPECT_GT(peak->flops_per_second, 1e8);  // any CPU of this century, even a loaded one
  EXPECT_EQ(kernels::GemmPeakShape(*peak), "fp32 GEMM 1024^3");
  EXPECT_FALSE(kernels::MeasureGemmPeak("gpu", 1, common::Precision::kFp32).ok());
}

}  // namespace
}  // namespace pp::trainer
