// The CPU backend in bf16 (kernels/cpu/cpu_ops.h): the conversion rounds to nearest even in every
// kernel table; the fallbacks' three Matmul ops are bitwise the fp32 ops on bf16-rounded operands
// (dbias from the unrounded gradient) for every thread count; the oneDNN path's plumbing
// (transposes as strides, += as a sum post-op, row blocks over the pool) matches OpenBLAS in f32,
// and its bf16 primitive matches the fallback where this CPU can create it; MakeOps picks and logs
// the path, PP_BF16_FALLBACK=1 forces the fallback and PP_BF16_ONEDNN=1 oneDNN's bf16 matmul.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/vec_kernels.h"
#include "kernels/ops.h"
#include "tests/kernels/kernel_test_util.h"

namespace pp::kernels {
namespace {

using common::Precision;

TEST(Bf16Test, RoundsToNearestEvenInEveryTable) {
  // fp32 bits -> bf16 bits. Ties (low half 0x8000) go to the even kept part; NaN stays NaN.
  const std::vector<std::pair<uint32_t, uint16_t>> cases = {
      {0x3f800000, 0x3f80},  // 1
      {0x3f808000, 0x3f80},  // 1 + half an ulp: tie, even stays
      {0x3f818000, 0x3f82},  // tie, odd rounds up
      {0x3f808001, 0x3f81},  // above the tie
      {0x3f807fff, 0x3f80},  // below it
      {0xbf818000, 0xbf82},  // the sign does not change the rounding
      {0x7f7fffff, 0x7f80},  // the largest float rounds to Inf
      {0x7f800000, 0x7f80},  // Inf
      {0xff800000, 0xff80},  // -Inf
      {0x7f800001, 0x7fc0},  // a signalling NaN becomes quiet, not Inf
      {0xffc00001, 0xffc0},  // a negative quiet NaN
      {0x00018000, 0x0002},  // a subnormal tie, odd rounds up
      {0x00008000, 0x0000},  // the smallest tie rounds to +0
      {0x80000000, 0x8000},  // -0
  };
  // Past the vector widths, so the vector and the remainder loops both run.
  const size_t n = cases.size() * 5;
  std::vector<float> in(n);
  for (size_t i = 0; i < n; ++i) in[i] = std::bit_cast<float>(cases[i % cases.size()].first);
  for (const VecKernels* k : RunnableVecKernels()) {
    std::vector<float> rounded(n);
    std::vector<uint16_t> bits(n);
    k->round_bf16(rounded.data(), in.data(), n);
    k->to_bf16(bits.data(), in.data(), n);
    for (size_t i = 0; i < n; ++i) {
      const auto [from, want] = cases[i % cases.size()];
      EXPECT_EQ(bits[i], want) << k->isa << std::hex << " from 0x" << from;
      EXPECT_EQ(std::bit_cast<uint32_t>(rounded[i]), uint32_t{want} << 16)
          << k->isa << std::hex << " from 0x" << from;
    }
  }
}

// The products' shapes: N rows not a multiple of the 48-row blocks, so two threads split unevenly.
struct Dims {
  int N = 100, IC = 40, OC = 72;
};

struct Operands {
  explicit Operands(Dims d = {})
      : dims(d),
        inp(Random(size_t(d.N) * d.IC, 1)),
        weight(Random(size_t(d.OC) * d.IC, 2, 0.3f)),
        bias(Random(d.OC, 3)),
        dout(Random(size_t(d.N) * d.OC, 4)),
        dinp0(Random(size_t(d.N) * d.IC, 5)),
        dweight0(Random(size_t(d.OC) * d.IC, 6)),
        dbias0(Random(d.OC, 7)) {}
  Dims dims;
  std::vector<float> inp, weight, bias, dout, dinp0, dweight0, dbias0;
};

// The three Matmul ops' outputs (Forward with and without bias; the backward ones add into
// non-zero buffers).
struct Results {
  std::vector<float> out, out_nobias, dinp, dweight, dbias;
};
Results RunMatmuls(Ops& ops, const Operands& x) {
  const auto [N, IC, OC] = x.dims;
  Results r;
  r.out.assign(size_t(N) * OC, -1.0f), r.out_nobias.assign(size_t(N) * OC, -1.0f);
  r.dinp = x.dinp0, r.dweight = x.dweight0, r.dbias = x.dbias0;
  ops.MatmulForward(r.out.data(), x.inp.data(), x.weight.data(), x.bias.data(), N, IC, OC);
  ops.MatmulForward(r.out_nobias.data(), x.inp.data(), x.weight.data(), nullptr, N, IC, OC);
  ops.MatmulBackwardInput(r.dinp.data(), x.dout.data(), x.weight.data(), N, IC, OC);
  ops.MatmulBackwardWeight(r.dweight.data(), r.dbias.data(), x.dout.data(), x.inp.data(), N, IC,
                           OC);
  return r;
}

std::vector<float> Rounded(const std::vector<float>& v) {
  std::vector<float> r(v.size());
  vec_generic::kTable.round_bf16(r.data(), v.data(), v.size());
  return r;
}

void ExpectBitwise(const std::vector<float>& got, const std::vector<float>& want,
                   const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << what;
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, double rel,
                const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, std::fabs(double(got[i]) - want[i]) / (1.0 + std::fabs(want[i])));
  }
  EXPECT_LE(worst, rel) << what;
}

// Both fallbacks: OpenBLAS, and oneDNN's f32 matmul where this CPU has it.
TEST(Bf16Test, FallbackIsTheFp32ProductOnRoundedOperandsForEveryThreadCount) {
  const Operands x;
  Operands rounded = x;
  rounded.inp = Rounded(x.inp), rounded.weight = Rounded(x.weight), rounded.dout = Rounded(x.dout);
  for (auto [bf16_kind, fp32_kind] : {std::pair{CpuMatmul::kSgemmBf16, CpuMatmul::kSgemm},
                                      {CpuMatmul::kDnnlF32Bf16, CpuMatmul::kDnnlF32}}) {
    for (int threads : {1, 2, 3}) {
      absl::StatusOr<std::unique_ptr<Ops>> bf16 = MakeCpuOpsWith(threads, bf16_kind);
      if (!bf16.ok() && bf16_kind == CpuMatmul::kDnnlF32Bf16) break;  // no oneDNN in this build
      ASSERT_TRUE(bf16.ok()) << bf16.status();
      SCOPED_TRACE((*bf16)->MatmulPath() + ", threads " + std::to_string(threads));
      std::unique_ptr<Ops> fp32 = *MakeCpuOpsWith(threads, fp32_kind);
      const Results got = RunMatmuls(**bf16, x);
      const Results want = RunMatmuls(*fp32, rounded);
      ExpectBitwise(got.out, want.out, "MatmulForward");
      ExpectBitwise(got.out_nobias, want.out_nobias, "MatmulForward without bias");
      ExpectBitwise(got.dinp, want.dinp, "MatmulBackwardInput");
      ExpectBitwise(got.dweight, want.dweight, "MatmulBackwardWeight dweight");
      // dbias is a column sum of the unrounded gradient, as in fp32.
      const Results fp32_raw = RunMatmuls(*fp32, x);
      ExpectBitwise(got.dbias, fp32_raw.dbias, "MatmulBackwardWeight dbias");
      // And bf16 is not fp32: the rounding reached every product.
      EXPECT_NE(std::memcmp(got.out.data(), fp32_raw.out.data(), got.out.size() * 4), 0);
      EXPECT_NE(std::memcmp(got.dinp.data(), fp32_raw.dinp.data(), got.dinp.size() * 4), 0);
      EXPECT_NE(std::memcmp(got.dweight.data(), fp32_raw.dweight.data(), got.dweight.size() * 4),
                0);
    }
  }
}

// The fast path's code in f32, which oneDNN runs on any x86-64 CPU: layouts, transposes, +=,
// row blocks over the pool.
TEST(Bf16Test, OneDnnPlumbingInF32MatchesOpenBlas) {
  absl::StatusOr<std::unique_ptr<Ops>> one = MakeCpuOpsWith(1, CpuMatmul::kDnnlF32);
  if (!one.ok()) GTEST_SKIP() << "no oneDNN f32 matmul: " << one.status();
  std::cout << "oneDNN f32 path: " << (*one)->MatmulPath() << "\n";
  const Operands x;
  const Results sgemm = RunMatmuls(**MakeCpuOpsWith(1, CpuMatmul::kSgemm), x);
  const Results got = RunMatmuls(**one, x);
  ExpectNear(got.out, sgemm.out, 1e-5, "MatmulForward");
  ExpectNear(got.out_nobias, sgemm.out_nobias, 1e-5, "MatmulForward without bias");
  ExpectNear(got.dinp, sgemm.dinp, 1e-5, "MatmulBackwardInput");
  ExpectNear(got.dweight, sgemm.dweight, 1e-5, "MatmulBackwardWeight");
  ExpectBitwise(got.dbias, sgemm.dbias, "dbias (own column sums)");
  absl::StatusOr<std::unique_ptr<Ops>> two = MakeCpuOpsWith(2, CpuMatmul::kDnnlF32);
  ASSERT_TRUE(two.ok()) << two.status();
  const Results split = RunMatmuls(**two, x);
  ExpectBitwise(split.out, got.out, "MatmulForward over 2 threads");
  ExpectBitwise(split.dinp, got.dinp, "MatmulBackwardInput over 2 threads");
  ExpectBitwise(split.dweight, got.dweight, "MatmulBackwardWeight over 2 threads");
}

TEST(Bf16Test, OneDnnBf16MatchesTheFallbackWhereTheCpuHasIt) {
  absl::StatusOr<std::unique_ptr<Ops>> fast = MakeCpuOpsWith(1, CpuMatmul::kDnnlBf16);
  if (!fast.ok()) GTEST_SKIP() << "no bf16 fast path on this CPU: " << fast.status();
  std::cout << "oneDNN bf16 path: " << (*fast)->MatmulPath() << "\n";
  const Operands x;
  const Results want = RunMatmuls(**MakeCpuOpsWith(1, CpuMatmul::kSgemmBf16), x);
  const Results got = RunMatmuls(**fast, x);
  // The same exact products summed in another order: fp32 rounding apart.
  ExpectNear(got.out, want.out, 1e-5, "MatmulForward");
  ExpectNear(got.out_nobias, want.out_nobias, 1e-5, "MatmulForward without bias");
  ExpectNear(got.dinp, want.dinp, 1e-5, "MatmulBackwardInput");
  ExpectNear(got.dweight, want.dweight, 1e-5, "MatmulBackwardWeight");
  ExpectBitwise(got.dbias, want.dbias, "dbias");
}

// IC = 2048: the backward products' B operand (the weight, then the input) has rows 8 KiB
// apart in fp32 and 4 KiB in bf16, which Prepare copies to padded rows on oneDNN (cpu_products.cc).
// The padded products equal the unpadded paths' up to summation order, on 1 and 2 threads alike.
TEST(Bf16Test, CacheAliasingRowsAreCopiedToPaddedRowsWithoutChangingTheProducts) {
  const Operands x(Dims{.N = 100, .IC = 2048, .OC = 72});
  for (auto [fast_kind, plain_kind] : {std::pair{CpuMatmul::kDnnlF32, CpuMatmul::kSgemm},
                                       {CpuMatmul::kDnnlF32Bf16, CpuMatmul::kSgemmBf16},
                                       {CpuMatmul::kDnnlBf16, CpuMatmul::kSgemmBf16}}) {
    absl::StatusOr<std::unique_ptr<Ops>> fast = MakeCpuOpsWith(1, fast_kind);
    if (!fast.ok()) continue;  // this CPU's oneDNN lacks the path: nothing is padded there
    SCOPED_TRACE((*fast)->MatmulPath());
    const Results want = RunMatmuls(**MakeCpuOpsWith(1, plain_kind), x);
    const Results got = RunMatmuls(**fast, x);
    ExpectNear(got.dinp, want.dinp, 1e-5, "MatmulBackwardInput");
    ExpectNear(got.dweight, want.dweight, 1e-5, "MatmulBackwardWeight");
    ExpectNear(got.out, want.out, 1e-5, "MatmulForward");
    const Results split = RunMatmuls(**MakeCpuOpsWith(2, fast_kind), x);
    ExpectBitwise(split.dinp, got.dinp, "MatmulBackwardInput over 2 threads");
    ExpectBitwise(split.dweight, got.dweight, "MatmulBackwardWeight over 2 threads");
  }
}

// bf16 takes oneDNN's bf16 matmul where it runs on AMX tiles or the CPU is not Intel's (whose
// cores without AMX run it at half the fp32 rate), else the fallback on fp32's product, naming why.
TEST(Bf16Test, MakeOpsPicksAndLogsThePathAndTheVariablesForceEither) {
  unsetenv(kForceBf16FallbackEnv);
  unsetenv(kForceBf16OneDnnEnv);
  absl::StatusOr<std::unique_ptr<Ops>> onednn = MakeCpuOpsWith(1, CpuMatmul::kDnnlBf16);
#if defined(__x86_64__) && defined(__GNUC__)
  const bool intel = __builtin_cpu_is("intel");
#else
  const bool intel = false;
#endif
  const bool fast =
      onednn.ok() && ((*onednn)->MatmulPath().find("amx") != std::string::npos || !intel);
  ::testing::internal::CaptureStderr();
  absl::StatusOr<std::unique_ptr<Ops>> chosen = MakeOps("cpu", 1, Precision::kBf16);
  const std::string chosen_log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  const std::string path = (*chosen)->MatmulPath();
  std::cout << "bf16 path: " << path << "\n";
  if (fast) {
    EXPECT_EQ(path, (*onednn)->MatmulPath());
  } else {
    EXPECT_EQ(path.rfind("bf16: fallback, ", 0), 0u) << path;
    EXPECT_NE(path.find(onednn.ok() ? "has no AMX tiles" : "because "), std::string::npos) << path;
  }
  EXPECT_EQ(chosen_log, "pp: cpu matmuls in " + path + "\n");

  // PP_BF16_ONEDNN=1 takes oneDNN's bf16 matmul wherever it exists.
  setenv(kForceBf16OneDnnEnv, "1", 1);
  ::testing::internal::CaptureStderr();
  absl::StatusOr<std::unique_ptr<Ops>> taken = MakeOps("cpu", 1, Precision::kBf16);
  ::testing::internal::GetCapturedStderr();
  unsetenv(kForceBf16OneDnnEnv);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(
      (*taken)->MatmulPath().rfind(onednn.ok() ? "bf16: oneDNN matmul (" : "bf16: fallback, ", 0),
      0u)
      << (*taken)->MatmulPath();

  // PP_BF16_FALLBACK=1 forces the fallback, whatever PP_BF16_ONEDNN says.
  setenv(kForceBf16FallbackEnv, "1", 1);
  setenv(kForceBf16OneDnnEnv, "1", 1);
  ::testing::internal::CaptureStderr();
  absl::StatusOr<std::unique_ptr<Ops>> forced = MakeOps("cpu", 2, Precision::kBf16);
  const std::string forced_log = ::testing::internal::GetCapturedStderr();
  unsetenv(kForceBf16FallbackEnv);
  unsetenv(kForceBf16OneDnnEnv);
  ASSERT_TRUE(forced.ok()) << forced.status();
  EXPECT_EQ((*forced)->MatmulPath().rfind("bf16: fallback, ", 0), 0u) << (*forced)->MatmulPath();
  EXPECT_NE(forced_log.find("because PP_BF16_FALLBACK=1 forces it"), std::string::npos)
      << forced_log;
  // The forced backend computes fp32's product on rounded operands, bit for bit.
  const Operands x;
  Operands rounded = x;
  rounded.inp = Rounded(x.inp), rounded.weight = Rounded(x.weight), rounded.dout = Rounded(x.dout);
  absl::StatusOr<std::unique_ptr<Ops>> fp32 = MakeOps("cpu", 2);
  ASSERT_TRUE(fp32.ok()) << fp32.status();
  ExpectBitwise(RunMatmuls(**forced, x).dweight, RunMatmuls(**fp32, rounded).dweight,
                "forced fallback");
}

// One head (T 40, hs 32) forward through the Ops, and through a table directly.
std::vector<float> OpsAttention(Ops& ops, const std::vector<float>& qkv, int T, int C) {
  float* q = ops.Alloc(qkv.size());
  float* out = ops.Alloc(size_t(T) * C);
  float* stats = ops.Alloc(size_t(T) * 2);
  ops.CopyToDevice(q, qkv.data(), qkv.size());
  ops.AttentionForward(out, stats, q, nullptr, 1, T, C, 1);
  std::vector<float> got(size_t(T) * C);
  ops.CopyToHost(got.data(), out, got.size());
  for (float* p : {q, out, stats}) ops.Free(p);
  return got;
}
std::vector<float> TableAttention(const VecKernels& k, const std::vector<float>& qkv, int T,
                                  int C) {
  std::vector<float> out(size_t(T) * C), stats(size_t(T) * 2);
  std::vector<float> scratch(k.attention_scratch_floats(T, C));
  k.attention_forward(out.data(), stats.data(), HeadView{qkv.data(), T, C, C, nullptr},
                      scratch.data());
  return out;
}

// bf16 attention tiles go with oneDNN's bf16 products: on AMX wherever the CPU has it, else on
// AVX512-BF16 on a CPU not made by Intel, and the path says which; PP_BF16_ATTENTION=1 takes
// AVX512-BF16's on any CPU with it (AMX's where present), =0 neither. The Ops then compute the
// bits of the table the path names.
TEST(Bf16Test, AttentionTakesBf16TilesByTheRuleAndTheVariableDecides) {
  unsetenv(kBf16AttentionEnv);
  setenv(kForceBf16OneDnnEnv, "1", 1);  // the fast path wherever oneDNN can create it
  absl::StatusOr<std::unique_ptr<Ops>> plain = MakeOps("cpu", 1, Precision::kBf16);
  setenv(kBf16AttentionEnv, "1", 1);
  absl::StatusOr<std::unique_ptr<Ops>> taken = MakeOps("cpu", 1, Precision::kBf16);
  setenv(kBf16AttentionEnv, "0", 1);
  absl::StatusOr<std::unique_ptr<Ops>> refused = MakeOps("cpu", 1, Precision::kBf16);
  unsetenv(kBf16AttentionEnv);
  unsetenv(kForceBf16OneDnnEnv);
  ASSERT_TRUE(plain.ok() && taken.ok() && refused.ok());
  const VecKernels* amx = AmxAttentionKernels();
  const VecKernels* bf16 = amx != nullptr ? amx : Bf16AttentionKernels();
  const std::string suffix =
      std::string("; attention: bf16 tiles (") +
      (amx != nullptr ? "AMX, from T = " + std::to_string(kAmxAttentionMinSeq) : "AVX512-BF16") +
      ")";
  auto ends_in_suffix = [&](const Ops& ops) {
    const std::string path = ops.MatmulPath();
    return path.size() > suffix.size() && path.substr(path.size() - suffix.size()) == suffix;
  };
  const bool fast = (*plain)->MatmulPath().rfind("bf16: oneDNN matmul (", 0) == 0;
#if defined(__x86_64__) && defined(__GNUC__)
  const bool intel = __builtin_cpu_is("intel");
#else
  const bool intel = false;
#endif
  std::cout << "bf16 path with PP_BF16_ONEDNN=1: " << (*plain)->MatmulPath() << "\n";
  EXPECT_EQ(ends_in_suffix(**plain), fast && bf16 != nullptr && (amx != nullptr || !intel));
  EXPECT_EQ(ends_in_suffix(**taken), fast && bf16 != nullptr);
  EXPECT_FALSE(ends_in_suffix(**refused));
  const int T = kAmxAttentionMinSeq + 4, C = 32;  // long enough for either table's tiles
  const std::vector<float> qkv = Random(size_t(T) * 3 * C, 5, 2.0f);
  const std::vector<float> fp32_bits = TableAttention(VecKernelsForThisCpu(), qkv, T, C);
  EXPECT_EQ(OpsAttention(**refused, qkv, T, C), fp32_bits);
  if (!ends_in_suffix(**taken)) return;
  const std::vector<float> bf16_bits = TableAttention(*bf16, qkv, T, C);
  EXPECT_NE(bf16_bits, fp32_bits);
  EXPECT_EQ(OpsAttention(**taken, qkv, T, C), bf16_bits);
}

// fp32 logs nothing; its path is oneDNN where that is an AVX-512 kernel, else OpenBLAS, and
// PP_FP32_OPENBLAS=1 forces OpenBLAS.
TEST(Bf16Test, Fp32TakesOneDnnOnAvx512AndTheVariableForcesOpenBlas) {
  absl::StatusOr<std::unique_ptr<Ops>> dnnl = MakeCpuOpsWith(1, CpuMatmul::kDnnlF32);
  const bool avx512 = dnnl.ok() && (*dnnl)->MatmulPath().find("avx512") != std::string::npos;
  ::testing::internal::CaptureStderr();
  absl::StatusOr<std::unique_ptr<Ops>> fp32 = MakeOps("cpu", 1);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  ASSERT_TRUE(fp32.ok());
  EXPECT_EQ((*fp32)->MatmulPath(), avx512 ? (*dnnl)->MatmulPath() : "fp32: OpenBLAS sgemm");
  setenv(kForceFp32OpenBlasEnv, "1", 1);
  absl::StatusOr<std::unique_ptr<Ops>> openblas = MakeOps("cpu", 2);
  unsetenv(kForceFp32OpenBlasEnv);
  ASSERT_TRUE(openblas.ok());
  EXPECT_EQ((*openblas)->MatmulPath(), "fp32: OpenBLAS sgemm");
}

}  // namespace
}  // namespace pp::kernels
