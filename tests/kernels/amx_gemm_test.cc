// The AMX tile products (kernels/cpu/amx_gemm.h): the packed layouts element by element, the
// products against a double reference, and their bits under any split of the rows; then the CPU
// backend's bf16 path on them against oneDNN's. Skipped where the process has no AMX tiles.
#include "kernels/cpu/amx_gemm.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/vec_kernels.h"
#include "tests/kernels/kernel_test_util.h"

namespace pp::kernels {
namespace {

#define SKIP_WITHOUT_AMX()                                                      \
  if (AmxAttentionKernels() == nullptr) {                                       \
    GTEST_SKIP() << "this CPU (or its kernel) gives this process no AMX tiles"; \
  }

// The bf16 bits of x as to_bf16 makes them (vec_kernels.h): nearest even, NaNs made quiet.
uint16_t ToBf16(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u | 0x00400000u) >> 16);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
float Bf16Value(uint16_t b) { return std::bit_cast<float>(uint32_t{b} << 16); }
bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Element (i, j) of B (k, n) packed: panel j / 16, pair i / 2, column j % 16, half i % 2.
uint16_t Packed(const std::vector<uint32_t>& p, int k, int i, int j) {
  const uint32_t word = p[(size_t(j / 16) * (k / 2) + i / 2) * 16 + j % 16];
  return static_cast<uint16_t>(i % 2 == 0 ? word : word >> 16);
}

// Values with every rounding case: ties to even both ways, NaNs, infinities, subnormals, the
// largest float (rounds to infinity), signed zeros; the rest random.
std::vector<float> Awkward(size_t n, uint64_t seed) {
  std::vector<float> v = Random(n, seed, 3.0f);
  const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0x7fc00001u, 0x7f800001u, 0xff800000u,
                              0x00000001u, 0x807fffffu, 0x7f7fffffu, 0x80000000u, 0x3f80ffffu};
  for (size_t i = 0; i < n; i += 7) v[i] = std::bit_cast<float>(special[(i / 7) % 10]);
  return v;
}

// Each way of packing, from fp32 and from bf16 bits, in parts as the pool and AdamW split it:
// every element rounded as to_bf16 rounds it and in its place; what no part covers untouched.
TEST(AmxGemmTest, PackingRoundsAsToBf16AndPutsEveryElementInItsPlace) {
  SKIP_WITHOUT_AMX();
  const int k = 96, n = 64, ld = 100;  // x's rows longer than B's rows and columns
  const std::vector<float> x = Awkward(size_t(ld) * ld, 3);
  std::vector<uint16_t> bits(x.size());
  for (size_t i = 0; i < x.size(); ++i) bits[i] = ToBf16(x[i]);
  const uint32_t kUntouched = 0xdeadbeefu;
  for (bool from_bits : {false, true}) {
    SCOPED_TRACE(from_bits ? "from bf16 bits" : "from fp32");
    std::vector<uint32_t> rows(amx::PackedWords(k, n), kUntouched), columns(rows);
    // Rows: columns [0, 16) whole, then rows [0, 34) and [34, 96) of columns [16, 48) (blocks
    // of 32 rows: a part ends and starts inside one).
    // Columns: columns [0, 32) whole, then the sum's [0, 64) of columns [32, 48).
    auto pack = [&](auto* src) {
      amx::PackRows(rows.data(), src, ld, k, 0, k, 0, 16);
      amx::PackRows(rows.data(), src + 16, ld, k, 0, 34, 16, 48);
      amx::PackRows(rows.data(), src + size_t(34) * ld + 16, ld, k, 34, k, 16, 48);
      amx::PackColumns(columns.data(), src, ld, k, 0, k, 0, 32);
      amx::PackColumns(columns.data(), src + size_t(32) * ld, ld, k, 0, 64, 32, 48);
    };
    if (from_bits) {
      pack(bits.data());
    } else {
      pack(x.data());
    }
    for (int i = 0; i < k; ++i) {
      for (int j = 0; j < n; ++j) {
        const size_t word = (size_t(j / 16) * (k / 2) + i / 2) * 16 + j % 16;
        if (j >= 48) {
          ASSERT_EQ(rows[word], kUntouched) << i << "," << j;
        } else {
          ASSERT_EQ(Packed(rows, k, i, j), bits[size_t(i) * ld + j]) << i << "," << j;
        }
        if (j >= 48 || (j >= 32 && i >= 64)) {
          ASSERT_EQ(columns[word], kUntouched) << i << "," << j;
        } else {
          ASSERT_EQ(Packed(columns, k, i, j), bits[size_t(j) * ld + i]) << i << "," << j;
        }
      }
    }
  }
}

// The weight gradient's A (dout^T in bf16 rows): each element rounded as to_bf16 and in its
// place, columns split in two parts, rows of out longer than k; the rest untouched.
TEST(AmxGemmTest, TransposeToBf16RoundsAsToBf16AndTransposes) {
  SKIP_WITHOUT_AMX();
  const int k = 64, cols = 48, ld = 50, ldo = 70;
  const std::vector<float> x = Awkward(size_t(k) * ld, 11);
  std::vector<uint16_t> out(size_t(cols) * ldo, 0xbeef);
  amx::TransposeToBf16(out.data(), ldo, x.data(), ld, k, 0, 16);
  amx::TransposeToBf16(out.data(), ldo, x.data(), ld, k, 16, 48);
  for (int j = 0; j < cols; ++j) {
    for (int i = 0; i < ldo; ++i) {
      const uint16_t want = i < k ? ToBf16(x[size_t(i) * ld + j]) : uint16_t{0xbeef};
      ASSERT_EQ(out[size_t(j) * ldo + i], want) << i << "," << j;
    }
  }
}

struct Case {
  int m, n, k;
};

// C (m, n) from A (m, k) rows lda apart and B (k, n), in double, of the bf16 values.
std::vector<double> Reference(const std::vector<uint16_t>& a, int lda, const std::vector<float>& b,
                              const Case& c) {
  std::vector<double> out(size_t(c.m) * c.n, 0.0);
  for (int i = 0; i < c.m; ++i) {
    for (int j = 0; j < c.n; ++j) {
      double s = 0.0;
      for (int p = 0; p < c.k; ++p) {
        s += double(Bf16Value(a[size_t(i) * lda + p])) * Bf16Value(ToBf16(b[size_t(p) * c.n + j]));
      }
      out[size_t(i) * c.n + j] = s;
    }
  }
  return out;
}

std::vector<uint16_t> RandomBf16(size_t n, uint64_t seed) {
  const std::vector<float> v = Random(n, seed);
  std::vector<uint16_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = ToBf16(v[i]);
  return out;
}

// Tails of 1 to 15 rows, one tile of rows, one and two of columns, several blocks of 256
// columns, sums of one to three tile steps; C's rows longer than n, A's longer than k.
TEST(AmxGemmTest, ProductsMatchTheReferenceWithAccumulationAndBias) {
  SKIP_WITHOUT_AMX();
  for (const Case& c : {Case{1, 16, 32}, Case{15, 48, 64}, Case{16, 32, 96}, Case{33, 80, 32},
                        Case{50, 288, 64}, Case{64, 528, 96}}) {
    SCOPED_TRACE(std::to_string(c.m) + " x " + std::to_string(c.n) + " x " + std::to_string(c.k));
    const int lda = c.k + 8, ldc = c.n + 5;
    const std::vector<uint16_t> a = RandomBf16(size_t(c.m) * lda, 1);
    const std::vector<float> b = Random(size_t(c.k) * c.n, 2), bias = Random(c.n, 3);
    const std::vector<float> before = Random(size_t(c.m) * ldc, 4);
    std::vector<uint32_t> packed(amx::PackedWords(c.k, c.n));
    amx::PackRows(packed.data(), b.data(), c.n, c.k, 0, c.k, 0, c.n);
    const std::vector<double> want = Reference(a, lda, b, c);
    std::vector<float> plain(before), with_bias(before), summed(before);
    amx::Gemm(plain.data(), ldc, a.data(), lda, packed.data(), c.m, c.n, c.k, false, nullptr);
    amx::Gemm(with_bias.data(), ldc, a.data(), lda, packed.data(), c.m, c.n, c.k, false,
              bias.data());
    amx::Gemm(summed.data(), ldc, a.data(), lda, packed.data(), c.m, c.n, c.k, true, nullptr);
    for (int i = 0; i < c.m; ++i) {
      for (int j = 0; j < ldc; ++j) {
        const size_t at = size_t(i) * ldc + j;
        if (j >= c.n) {  // past the matrix: untouched
          ASSERT_EQ(std::bit_cast<uint32_t>(plain[at]), std::bit_cast<uint32_t>(before[at]));
          ASSERT_EQ(std::bit_cast<uint32_t>(summed[at]), std::bit_cast<uint32_t>(before[at]));
          continue;
        }
        const double w = want[size_t(i) * c.n + j], tol = 1e-5 * (1.0 + std::fabs(w));
        ASSERT_NEAR(plain[at], w, tol) << i << "," << j;
        ASSERT_EQ(std::bit_cast<uint32_t>(with_bias[at]),
                  std::bit_cast<uint32_t>(plain[at] + bias[j]))
            << i << "," << j;
        ASSERT_NEAR(summed[at], w + before[at], tol) << i << "," << j;
      }
    }
  }
}

// Each row's sums are its own: the rows computed in any parts, tails or whole tiles, at any
// offset, have the bits of one call over all of them.
TEST(AmxGemmTest, AnySplitOfTheRowsGivesTheBitsOfOneCall) {
  SKIP_WITHOUT_AMX();
  const Case c{77, 96, 64};
  const std::vector<uint16_t> a = RandomBf16(size_t(c.m) * c.k, 5);
  const std::vector<float> b = Random(size_t(c.k) * c.n, 6);
  std::vector<uint32_t> packed(amx::PackedWords(c.k, c.n));
  amx::PackRows(packed.data(), b.data(), c.n, c.k, 0, c.k, 0, c.n);
  std::vector<float> whole(size_t(c.m) * c.n);
  amx::Gemm(whole.data(), c.n, a.data(), c.k, packed.data(), c.m, c.n, c.k, false, nullptr);
  for (const std::vector<int>& cuts :
       {std::vector<int>{0, 16, 77}, {0, 7, 77}, {0, 1, 2, 40, 77}, {0, 33, 48, 64, 77}}) {
    std::vector<float> parts(whole.size());
    for (size_t i = 0; i + 1 < cuts.size(); ++i) {
      amx::Gemm(parts.data() + size_t(cuts[i]) * c.n, c.n, a.data() + size_t(cuts[i]) * c.k, c.k,
                packed.data(), cuts[i + 1] - cuts[i], c.n, c.k, false, nullptr);
    }
    ASSERT_TRUE(SameBits(parts, whole)) << cuts[1];
  }
}

// Through the backend: bf16's three products on the tiles (their shapes fit) against oneDNN's
// (PP_BF16_AMX_PRODUCTS=0): the same exact products summed in another order; and 2 threads
// give 1 thread's bits.
TEST(AmxGemmTest, TheBackendsProductsOnTilesMatchOneDnnsAndKeepTheirBitsOverThreads) {
  SKIP_WITHOUT_AMX();
  const int N = 200, IC = 96, OC = 160;  // rows enough for the pool to split both ways
  const std::vector<float> inp = Random(size_t(N) * IC, 7), w = Random(size_t(OC) * IC, 8);
  const std::vector<float> dout = Random(size_t(N) * OC, 9), bias = Random(OC, 10);
  struct Out {
    std::vector<float> out, dinp, dweight;
    std::string path;
  };
  auto run = [&](const char* amx, int threads) {
    setenv(kAmxProductsEnv, amx, 1);
    std::unique_ptr<Ops> ops = MakeCpuOps(threads, common::Precision::kBf16);
    unsetenv(kAmxProductsEnv);
    Out o{std::vector<float>(size_t(N) * OC), std::vector<float>(size_t(N) * IC),
          std::vector<float>(size_t(OC) * IC), ops->MatmulPath()};
    std::vector<float*> dev;
    for (const std::vector<float>* h : {&inp, &w, &dout, &bias}) {
      dev.push_back(ops->Alloc(h->size()));
      ops->CopyToDevice(dev.back(), h->data(), h->size());
    }
    float *out = ops->Alloc(o.out.size()), *dinp = ops->Alloc(o.dinp.size());
    float* dweight = ops->Alloc(o.dweight.size());
    ops->MatmulForward(out, dev[0], dev[1], dev[3], N, IC, OC);
    ops->MatmulBackwardInput(dinp, dev[2], dev[1], N, IC, OC);
    ops->MatmulBackwardWeight(dweight, nullptr, dev[2], dev[0], N, IC, OC);
    ops->CopyToHost(o.out.data(), out, o.out.size());
    ops->CopyToHost(o.dinp.data(), dinp, o.dinp.size());
    ops->CopyToHost(o.dweight.data(), dweight, o.dweight.size());
    for (float* p : {out, dinp, dweight}) ops->Free(p);
    for (float* p : dev) ops->Free(p);
    return o;
  };
  const Out tiles = run("1", 1), onednn = run("0", 1), split = run("1", 2);
  EXPECT_NE(tiles.path.find(kAmxProductsPath), std::string::npos) << tiles.path;
  EXPECT_EQ(onednn.path.find(kAmxProductsPath), std::string::npos) << onednn.path;
  for (auto [got, want, name] : {std::tuple{&tiles.out, &onednn.out, "MatmulForward"},
                                 {&tiles.dinp, &onednn.dinp, "MatmulBackwardInput"},
                                 {&tiles.dweight, &onednn.dweight, "MatmulBackwardWeight"}}) {
    for (size_t i = 0; i < got->size(); ++i) {
      ASSERT_NEAR((*got)[i], (*want)[i], 1e-5 * (1.0 + std::fabs((*want)[i]))) << name << " " << i;
    }
  }
  EXPECT_TRUE(SameBits(split.out, tiles.out));
  EXPECT_TRUE(SameBits(split.dinp, tiles.dinp));
  EXPECT_TRUE(SameBits(split.dweight, tiles.dweight));
}

}  // namespace
}  // namespace pp::kernels
