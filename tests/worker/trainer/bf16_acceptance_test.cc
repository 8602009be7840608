// Acceptance of train.precision bf16: ppctl up's embedded default job (client/up_spec.cc) trained
// 300 steps by the single-process trainer ends within 2% of fp32's final loss, on the forced
// fallback (PP_BF16_FALLBACK=1) and on oneDNN's bf16 matmul where the CPU has one (AMX tiles or
// AVX512-BF16; PP_BF16_ONEDNN=1 takes it also where the fallback is faster), each path checked
// in the log. One test trains three times: fp32 beside the fallback (two threads, one compute
// thread each), then the fast path alone.
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "client/up_spec.h"
#include "common/job_spec.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/vec_kernels.h"
#include "kernels/ops.h"
#include "worker/trainer/trainer.h"

namespace pp::trainer {
namespace {

// The default job in fp32 (the reference) and in bf16 (300 steps each, no checkpoints).
pp::v1::JobSpec DefaultJob(const char* precision) {
  pp::v1::JobSpec spec = client::DefaultUpSpec(2);
  spec.mutable_parallel()->set_pipeline(1);
  spec.mutable_checkpoint()->set_every_steps(0);
  spec.mutable_train()->set_precision(precision);
  common::ApplyDefaults(&spec);
  EXPECT_EQ(spec.train().steps(), 300);
  EXPECT_TRUE(common::ValidateJobSpec(spec).ok()) << common::ValidateJobSpec(spec);
  return spec;
}

// A bf16 training with the environment variable `force` (kernels/cpu/cpu_ops.h) set to 1 while
// it runs, and `beside` (the fp32 reference, when not null) trained at once on a second thread;
// stderr (the "pp: cpu matmuls in ..." lines) in *log.
absl::StatusOr<TrainResult> TrainBf16(const char* force, absl::StatusOr<TrainResult>* beside,
                                      std::string* log) {
  setenv(force, "1", 1);
  ::testing::internal::CaptureStderr();
  std::thread reference;
  if (beside != nullptr)
    reference = std::thread([beside] { *beside = Train(DefaultJob("fp32"), {}); });
  absl::StatusOr<TrainResult> bf16 = Train(DefaultJob("bf16"), {});
  if (reference.joinable()) reference.join();
  *log = ::testing::internal::GetCapturedStderr();
  unsetenv(force);
  return bf16;
}

// Final losses within 2%, bf16 different from fp32, and learnt.
void ExpectCloseAndLearnt(const absl::StatusOr<TrainResult>& fp32,
                          const absl::StatusOr<TrainResult>& bf16, const std::string& path) {
  ASSERT_TRUE(fp32.ok()) << fp32.status();
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  const double a = fp32->losses.back(), b = bf16->losses.back();
  std::cout << "final loss after 300 steps: fp32 " << a << " (" << fp32->seconds << " s), bf16 "
            << b << " (" << bf16->seconds << " s) on " << path << ", bf16/fp32 " << b / a << "\n";
  EXPECT_LT(std::fabs(b - a) / a, 0.02);
  EXPECT_NE(a, b);                           // bf16 took effect
  EXPECT_LT(b, 0.5 * fp32->losses.front());  // and it learnt: from ln 256 = 5.55 to about 1.7
}

// Whether the CPU has the AMX tiles' bf16 products (CPUID, as kernels/cpu/vec_select.cc asks).
bool CpuHasAmxBf16() {
#if defined(__x86_64__) && defined(__GNUC__)
  return __builtin_cpu_supports("amx-tile") && __builtin_cpu_supports("amx-bf16");
#else
  return false;
#endif
}

// The fast path's checks: oneDNN's bf16 matmul, on AMX tiles where the CPU has them (its
// implementation then names avx512_core_amx, the products that fit run on the own tile kernel,
// kernels/cpu/amx_gemm.h, and the attention on the tiles too), on AVX512-BF16 otherwise. `path` is
// what the ops promised, `log` what the trainer printed.
void ExpectOneDnnPath(const std::string& path, const std::string& log, std::string* impl) {
  const std::string want = "pp: cpu matmuls in bf16: oneDNN matmul (";
  const size_t at = log.find(want);
  ASSERT_NE(at, std::string::npos) << log;
  *impl = log.substr(at + want.size(), log.find(')', at) - at - want.size());
  const size_t tiles = path.find("; attention: bf16 tiles (");
  std::cout << "bf16 path: oneDNN " << *impl
            << (impl->find("amx") != std::string::npos ? " (AMX tiles)" : " (no AMX)")
            << (tiles != std::string::npos ? ", attention in " + path.substr(tiles + 13)
                                           : ", attention in fp32")
            << "\n";
  const std::string products = CpuHasAmxBf16() ? kernels::kAmxProductsPath : "";
  EXPECT_EQ(path.substr(0, tiles), "bf16: oneDNN matmul (" + *impl + ")" + products);
  EXPECT_NE(log.find(path), std::string::npos) << log;  // the trainer took that path
  if (CpuHasAmxBf16()) {
    EXPECT_NE(impl->find("amx"), std::string::npos) << *impl;
    EXPECT_EQ(path.substr(tiles == std::string::npos ? path.size() : tiles),
              "; attention: bf16 tiles (AMX, from T = " +
                  std::to_string(kernels::kAmxAttentionMinSeq) + ")");
  }
}

// One test, so the fp32 reference trains once for both paths (it is a third of the work): first
// beside the forced fallback (PP_BF16_FALLBACK=1), then the fast path alone (PP_BF16_ONEDNN=1
// takes it also where the fallback is the default). Where oneDNN cannot make a bf16 matmul (no
// bf16 instructions) only the fallback exists, and the second half says so and stops.
TEST(Bf16AcceptanceTest, DefaultJobEndsWithin2PercentOfFp32OnTheFallbackAndOnOneDnn) {
  ASSERT_EQ(std::getenv("PP_BF16_FALLBACK"), nullptr) << "unset PP_BF16_FALLBACK to run this";
  absl::StatusOr<TrainResult> fp32 = absl::UnknownError("not run");
  std::string log;
  const absl::StatusOr<TrainResult> fallback =
      TrainBf16(kernels::kForceBf16FallbackEnv, &fp32, &log);
  EXPECT_EQ(log.rfind("pp: cpu matmuls in bf16: fallback, ", 0), 0u) << log;
  EXPECT_NE(log.find("because PP_BF16_FALLBACK=1 forces it"), std::string::npos) << log;
  ExpectCloseAndLearnt(fp32, fallback, "the fallback");

  absl::StatusOr<std::unique_ptr<kernels::Ops>> probe =
      kernels::MakeCpuOpsWith(1, kernels::CpuMatmul::kDnnlBf16);
  if (!probe.ok()) {
    std::cout << "no oneDNN bf16 matmul on this CPU (" << probe.status()
              << "): only the fallback above exists\n";
    return;
  }
  const std::string path = (*probe)->MatmulPath();
  probe->reset();
  const absl::StatusOr<TrainResult> fast = TrainBf16(kernels::kForceBf16OneDnnEnv, nullptr, &log);
  std::string impl;
  ExpectOneDnnPath(path, log, &impl);
  ExpectCloseAndLearnt(fp32, fast, "oneDNN " + impl);
}

}  // namespace
}  // namespace pp::trainer
