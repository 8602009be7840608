// Acceptance of train.precision bf16: ppctl up's embedded default job (client/up_spec.cc) trained
// 300 steps by the single-process trainer ends within 2% of fp32's final loss, on the forced
// fallback (PP_BF16_FALLBACK=1) and on oneDNN's bf16 matmul where the CPU has one (AMX tiles or
// AVX512-BF16; PP_BF16_ONEDNN=1 takes it also where the fallback is faster), each path checked
// in the log. Each test trains fp32 and bf16 at once on two threads (one compute thread each): on
// a 2-core Intel Xeon without AMX 151 s (the fallback, on oneDNN's f32 product) and 185 s
// (oneDNN's AVX512-BF16 kernel); with AMX (brg:avx512_core_amx_bf16) 104 s.
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

// fp32 and bf16 trainings of the default job at once, on two threads (one compute thread each),
// with the environment variable `force` (kernels/cpu/cpu_ops.h) set to 1 while they run; stderr
// (the "pp: cpu matmuls in ..." lines) in *log.
struct Pair {
  absl::StatusOr<TrainResult> fp32 = absl::UnknownError("not run");
  absl::StatusOr<TrainResult> bf16 = absl::UnknownError("not run");
  std::string log;
};
Pair TrainFp32AndBf16(const char* force) {
  pp::v1::JobSpec fp32 = client::DefaultUpSpec(2);
  fp32.mutable_parallel()->set_pipeline(1);
  fp32.mutable_checkpoint()->set_every_steps(0);
  common::ApplyDefaults(&fp32);
  EXPECT_EQ(fp32.train().steps(), 300);
  EXPECT_TRUE(common::ValidateJobSpec(fp32).ok()) << common::ValidateJobSpec(fp32);
  pp::v1::JobSpec bf16 = fp32;
  bf16.mutable_train()->set_precision("bf16");
  Pair out;
  setenv(force, "1", 1);
  ::testing::internal::CaptureStderr();
  std::thread reference([&] { out.fp32 = Train(fp32, {}); });
  out.bf16 = Train(bf16, {});
  reference.join();
  out.log = ::testing::internal::GetCapturedStderr();
  unsetenv(force);
  return out;
}

// Final losses within 2%, bf16 different from fp32, and learnt.
void ExpectCloseAndLearnt(const Pair& p, const std::string& path) {
  ASSERT_TRUE(p.fp32.ok()) << p.fp32.status();
  ASSERT_TRUE(p.bf16.ok()) << p.bf16.status();
  const double a = p.fp32->losses.back(), b = p.bf16->losses.back();
  std::cout << "final loss after 300 steps: fp32 " << a << " (" << p.fp32->seconds << " s), bf16 "
            << b << " (" << p.bf16->seconds << " s) on " << path << ", bf16/fp32 " << b / a << "\n";
  EXPECT_LT(std::fabs(b - a) / a, 0.02);
  EXPECT_NE(a, b);                             // bf16 took effect
  EXPECT_LT(b, 0.5 * p.fp32->losses.front());  // and it learnt: from ln 256 = 5.55 to about 1.7
}

TEST(Bf16AcceptanceTest, DefaultJobEndsWithin2PercentOfFp32OnTheForcedFallback) {
  const Pair p = TrainFp32AndBf16(kernels::kForceBf16FallbackEnv);
  EXPECT_EQ(p.log.rfind("pp: cpu matmuls in bf16: fallback, ", 0), 0u) << p.log;
  EXPECT_NE(p.log.find("because PP_BF16_FALLBACK=1 forces it"), std::string::npos) << p.log;
  ExpectCloseAndLearnt(p, "the fallback");
}

// Whether the CPU has the AMX tiles' bf16 products (CPUID, as kernels/cpu/vec_select.cc asks).
bool CpuHasAmxBf16() {
#if defined(__x86_64__) && defined(__GNUC__)
  return __builtin_cpu_supports("amx-tile") && __builtin_cpu_supports("amx-bf16");
#else
  return false;
#endif
}

// The fast path: oneDNN's bf16 matmul, on AMX tiles where the CPU has them (its implementation
// then names avx512_core_amx), on AVX512-BF16 otherwise (taken with PP_BF16_ONEDNN=1 where the
// fallback is the default). Skipped where oneDNN cannot make one (no bf16 instructions): then
// only the fallback exists, and the test above covers it.
TEST(Bf16AcceptanceTest, DefaultJobEndsWithin2PercentOfFp32OnTheOneDnnPath) {
  ASSERT_EQ(std::getenv("PP_BF16_FALLBACK"), nullptr) << "unset PP_BF16_FALLBACK to run this";
  absl::StatusOr<std::unique_ptr<kernels::Ops>> probe =
      kernels::MakeCpuOpsWith(1, kernels::CpuMatmul::kDnnlBf16);
  if (!probe.ok()) GTEST_SKIP() << "no oneDNN bf16 matmul on this CPU: " << probe.status();
  const std::string path = (*probe)->MatmulPath();
  probe->reset();
  const Pair p = TrainFp32AndBf16(kernels::kForceBf16OneDnnEnv);
  const std::string want = "pp: cpu matmuls in bf16: oneDNN matmul (";
  const size_t at = p.log.find(want);
  ASSERT_NE(at, std::string::npos) << p.log;
  const std::string impl = p.log.substr(at + want.size(), p.log.find(')', at) - at - want.size());
  const size_t tiles = path.find("; attention: bf16 tiles (");
  std::cout << "bf16 path: oneDNN " << impl
            << (impl.find("amx") != std::string::npos ? " (AMX tiles)" : " (no AMX)")
            << (tiles != std::string::npos ? ", attention in " + path.substr(tiles + 13)
                                           : ", attention in fp32")
            << "\n";
  EXPECT_EQ(path.substr(0, tiles), "bf16: oneDNN matmul (" + impl + ")");
  EXPECT_NE(p.log.find(path), std::string::npos) << p.log;  // the trainer took that path
  // Where the CPU has AMX tiles the products and the attention run on them.
  if (CpuHasAmxBf16()) {
    EXPECT_NE(impl.find("amx"), std::string::npos) << impl;
    EXPECT_EQ(path.substr(tiles == std::string::npos ? path.size() : tiles),
              "; attention: bf16 tiles (AMX, from T = " +
                  std::to_string(kernels::kAmxAttentionMinSeq) + ")");
  }
  ExpectCloseAndLearnt(p, "oneDNN " + impl);
}

}  // namespace
}  // namespace pp::trainer
