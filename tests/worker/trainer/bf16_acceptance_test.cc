// Acceptance of train.precision bf16: ppctl up's embedded default job (client/up_spec.cc) trained
// 300 steps by the single-process trainer ends within 2% of fp32's final loss, and the forced
// fallback (PP_BF16_FALLBACK=1) is taken and logged. The two runs train at once on two threads
// (one compute thread each): 285 s measured on the shared 2-core machine.
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

#include "client/up_spec.h"
#include "common/job_spec.h"
#include "gtest/gtest.h"
#include "worker/trainer/trainer.h"

namespace pp::trainer {
namespace {

TEST(Bf16AcceptanceTest, DefaultJobEndsWithin2PercentOfFp32OnTheForcedFallback) {
  pp::v1::JobSpec fp32 = client::DefaultUpSpec(2);
  fp32.mutable_parallel()->set_pipeline(1);
  fp32.mutable_checkpoint()->set_every_steps(0);
  common::ApplyDefaults(&fp32);
  ASSERT_EQ(fp32.train().steps(), 300);
  ASSERT_TRUE(common::ValidateJobSpec(fp32).ok()) << common::ValidateJobSpec(fp32);
  pp::v1::JobSpec bf16 = fp32;
  bf16.mutable_train()->set_precision("bf16");

  setenv("PP_BF16_FALLBACK", "1", 1);
  ::testing::internal::CaptureStderr();
  absl::StatusOr<TrainResult> want = absl::UnknownError("not run");
  std::thread reference([&] { want = Train(fp32, {}); });
  absl::StatusOr<TrainResult> got = Train(bf16, {});
  reference.join();
  const std::string log = ::testing::internal::GetCapturedStderr();
  unsetenv("PP_BF16_FALLBACK");
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_TRUE(got.ok()) << got.status();

  EXPECT_EQ(log.rfind("pp: cpu matmuls in bf16: fallback, ", 0), 0u) << log;
  EXPECT_NE(log.find("because PP_BF16_FALLBACK=1 forces it"), std::string::npos) << log;
  const double a = want->losses.back(), b = got->losses.back();
  std::cout << "final loss after 300 steps: fp32 " << a << " (" << want->seconds << " s), bf16 "
            << b << " (" << got->seconds << " s), bf16/fp32 " << b / a << "\n";
  EXPECT_LT(std::fabs(b - a) / a, 0.02);
  EXPECT_NE(a, b);  // bf16 took effect
  EXPECT_LT(b, 0.5 * want->losses.front());  // and it learnt: from ln 256 = 5.55 to about 1.7
}

}  // namespace
}  // namespace pp::trainer
