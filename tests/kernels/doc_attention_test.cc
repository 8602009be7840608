// Packed documents (kernels/ops.h doc_start, issue 33): block-causal attention on every kernel
// table this CPU runs, against a double reference that masks with an explicit "same document
// and not in the future" test, on shapes that are not multiples of the tiles or vectors, with
// one-token documents and a document that starts at T - 1 (outputs, the softmax row stats the
// forward keeps, and the gradients the backward computes from them); all-zero starts give the
// bits of null starts; and the Ops give the same bits twice and on any thread count.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/vec_kernels.h"
#include "kernels/ops.h"
#include "tests/kernels/kernel_test_util.h"

namespace pp::kernels {
namespace {

// Starts (T) of one row whose documents begin at 0 and at each of `begins` inside (0, T).
std::vector<int32_t> StartsAt(int T, const std::vector<int>& begins) {
  std::vector<int32_t> starts(T);
  int cur = 0;
  for (int t = 0; t < T; ++t) {
    if (std::find(begins.begin(), begins.end(), t) != begins.end()) cur = t;
    starts[t] = cur;
  }
  return starts;
}

// Row layouts for T: one document (all zeros); a few, with one-token documents and one that
// starts at T - 1; every token its own document; documents across tile and vector boundaries.
std::vector<std::vector<int32_t>> Layouts(int T) {
  std::vector<int> every(T);
  for (int t = 0; t < T; ++t) every[t] = t;
  return {StartsAt(T, {}), StartsAt(T, {1, 2, T / 3, T / 3 + 1, T - 1}), StartsAt(T, every),
          StartsAt(T, {5, 9, 10, 17, 33, 40, 41, 77, 110, T - 1})};
}

// (B,T) starts: row b takes layout (b + shift) of Layouts(T).
std::vector<int32_t> BatchStarts(int B, int T, int shift) {
  const auto layouts = Layouts(T);
  std::vector<int32_t> all;
  for (int b = 0; b < B; ++b) {
    const auto& row = layouts[(b + shift) % layouts.size()];
    all.insert(all.end(), row.begin(), row.end());
  }
  return all;
}

// The explicit block-causal mask: key j is visible to query t of row b when it is not in the
// future and belongs to the same document.
bool Visible(const std::vector<int32_t>& starts, int b, int T, int t, int j) {
  return j <= t && starts[size_t(b) * T + t] == starts[size_t(b) * T + j];
}

struct Ref {
  std::vector<double> out, att, stats, dqkv;  // (B,T,C), (B,NH,T,T), (B,NH,T,2), (B,T,3C)
};

struct Shape {
  int B, T, C, NH;
  int hs() const { return C / NH; }
  size_t Qkv(int b, int t, int part, int h) const {
    return (size_t(b) * T + t) * 3 * C + size_t(part) * C + size_t(h) * hs();
  }
};

// Forward of head h of row b in double: att, stats (each row's maximum score, 1 / sum of
// exponentials) and out.
void RefForwardHead(const std::vector<double>& qkv, const std::vector<int32_t>& starts, Shape s,
                    int b, int h, Ref* r) {
  const int T = s.T, hs = s.hs();
  double* P = &r->att[(size_t(b) * s.NH + h) * T * T];
  for (int t = 0; t < T; ++t) {
    double mx = -1e300, sum = 0;
    for (int j = 0; j < T; ++j) {
      if (!Visible(starts, b, T, t, j)) continue;
      double d = 0;
      for (int i = 0; i < hs; ++i) d += qkv[s.Qkv(b, t, 0, h) + i] * qkv[s.Qkv(b, j, 1, h) + i];
      P[t * T + j] = d / std::sqrt(double(hs));
      mx = std::max(mx, P[t * T + j]);
    }
    for (int j = 0; j < T; ++j) {
      if (Visible(starts, b, T, t, j)) sum += (P[t * T + j] = std::exp(P[t * T + j] - mx));
    }
    double* stats = &r->stats[((size_t(b) * s.NH + h) * T + t) * 2];
    stats[0] = mx, stats[1] = 1.0 / sum;
    for (int j = 0; j < T; ++j) {
      if (!Visible(starts, b, T, t, j)) continue;
      P[t * T + j] /= sum;
      for (int i = 0; i < hs; ++i) {
        r->out[(size_t(b) * T + t) * s.C + h * hs + i] += P[t * T + j] * qkv[s.Qkv(b, j, 2, h) + i];
      }
    }
  }
}

// Backward of head h of row b in double, by hand: dP = dO V^T, dS = P (dP - rowsum(P dP)),
// dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO.
void RefBackwardHead(const std::vector<double>& qkv, const std::vector<float>& dout,
                     const std::vector<int32_t>& starts, Shape s, int b, int h, Ref* r) {
  const int T = s.T, hs = s.hs();
  const double scale = 1.0 / std::sqrt(double(hs));
  const double* P = &r->att[(size_t(b) * s.NH + h) * T * T];
  const float* dO = &dout[size_t(b) * T * s.C + h * hs];
  for (int t = 0; t < T; ++t) {
    std::vector<double> dS(T, 0.0);
    double dot = 0;
    for (int j = 0; j < T; ++j) {
      if (!Visible(starts, b, T, t, j)) continue;
      for (int i = 0; i < hs; ++i) dS[j] += double(dO[t * s.C + i]) * qkv[s.Qkv(b, j, 2, h) + i];
      dot += P[t * T + j] * dS[j];
    }
    for (int j = 0; j < T; ++j) {
      if (!Visible(starts, b, T, t, j)) continue;
      dS[j] = P[t * T + j] * (dS[j] - dot);
      for (int i = 0; i < hs; ++i) {
        r->dqkv[s.Qkv(b, t, 0, h) + i] += scale * dS[j] * qkv[s.Qkv(b, j, 1, h) + i];
        r->dqkv[s.Qkv(b, j, 1, h) + i] += scale * dS[j] * qkv[s.Qkv(b, t, 0, h) + i];
        r->dqkv[s.Qkv(b, j, 2, h) + i] += P[t * T + j] * dO[t * s.C + i];
      }
    }
  }
}

Ref RefPacked(const std::vector<double>& qkv, const std::vector<float>& dout,
              const std::vector<int32_t>& starts, Shape s) {
  Ref r;
  r.out.assign(size_t(s.B) * s.T * s.C, 0.0);
  r.att.assign(size_t(s.B) * s.NH * s.T * s.T, 0.0);
  r.stats.assign(size_t(s.B) * s.NH * s.T * 2, 0.0);
  r.dqkv.assign(size_t(s.B) * s.T * 3 * s.C, 0.0);
  for (int b = 0; b < s.B; ++b) {
    for (int h = 0; h < s.NH; ++h) {
      RefForwardHead(qkv, starts, s, b, h, &r);
      if (!dout.empty()) RefBackwardHead(qkv, dout, starts, s, b, h, &r);
    }
  }
  return r;
}

std::vector<double> ToDouble(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// The hand-derived reference gradient against central differences of the reference forward.
TEST(DocAttentionKernelsTest, ReferenceGradientMatchesFiniteDifferences) {
  const Shape s{2, 7, 6, 2};
  const auto starts = BatchStarts(s.B, s.T, 1);
  auto qkv = Random(size_t(s.B) * s.T * 3 * s.C, 300, 1.5f);
  auto dout = Random(size_t(s.B) * s.T * s.C, 301);
  std::vector<double> x = ToDouble(qkv);
  const Ref want = RefPacked(x, dout, starts, s);
  auto objective = [&](const std::vector<double>& v) {
    const Ref f = RefPacked(v, {}, starts, s);
    double sum = 0;
    for (size_t i = 0; i < f.out.size(); ++i) sum += dout[i] * f.out[i];
    return sum;
  };
  for (size_t i = 0; i < x.size(); ++i) {
    std::vector<double> xp = x, xm = x;
    xp[i] += 1e-6, xm[i] -= 1e-6;
    const double numeric = (objective(xp) - objective(xm)) / 2e-6;
    ASSERT_NEAR(want.dqkv[i], numeric, 1e-6 + 1e-6 * std::abs(numeric)) << "dqkv[" << i << "]";
  }
}

// One head through a table: out, stats and dqkv (written over `pre`, which must not show).
struct HeadRun {
  std::vector<float> out, stats, dqkv;
};

HeadRun RunHead(const VecKernels& k, const std::vector<float>& qkv, const std::vector<float>& dout,
                const int32_t* starts, int T, int hs, const std::vector<float>& pre) {
  HeadRun run{std::vector<float>(size_t(T) * hs, -1.0f), std::vector<float>(size_t(T) * 2, -1.0f),
              pre};
  // NaN scratch: a read of anything the kernels did not write first shows in the results
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> scratch(AttentionScratchFloats(T, hs), nan);
  const HeadView head{qkv.data(), T, hs, hs, starts};
  k.attention_forward(run.out.data(), run.stats.data(), head, scratch.data());
  std::fill(scratch.begin(), scratch.end(), nan);
  k.attention_backward(run.dqkv.data(), dout.data(), run.stats.data(), head, scratch.data());
  return run;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
bool SameBits(const HeadRun& a, const HeadRun& b) {
  return SameBits(a.out, b.out) && SameBits(a.stats, b.stats) && SameBits(a.dqkv, b.dqkv);
}

// One head's random qkv (scaled 2), dout and dqkv prefill for shape s, seeded by `seed`.
struct HeadInputs {
  std::vector<float> qkv, dout, pre;
};
HeadInputs RandomHead(const Shape& s, int seed) {
  HeadInputs in{Random(size_t(s.T) * 3 * s.C, s.T * seed + s.C, 2.0f),
                Random(size_t(s.T) * s.C, s.T * (seed + 2) + s.C),
                {}};
  in.pre = Random(in.qkv.size(), 66 + seed);
  return in;
}

const Shape kHeadShapes[] = {{1, 1, 8, 1},    {1, 7, 20, 1},  {1, 37, 20, 1},
                             {1, 130, 64, 1}, {1, 33, 48, 1}, {1, 66, 5, 1}};

// A softmax row stat against the reference's: the maximum score, or 1 / sum.
void ExpectStatNear(float got, double want, const std::string& what, size_t i) {
  ASSERT_NEAR(got, want, 2e-6 + 2e-6 * std::abs(want)) << what << " stats " << i;
}

// out, stats and dqkv of one head against the reference.
void ExpectHeadMatches(const HeadRun& run, const Ref& want, const std::string& what) {
  for (size_t i = 0; i < run.stats.size(); ++i) {
    ASSERT_NO_FATAL_FAILURE(ExpectStatNear(run.stats[i], want.stats[i], what, i));
  }
  for (size_t i = 0; i < run.out.size(); ++i) {
    ASSERT_NEAR(run.out[i], want.out[i], 2e-5 + 2e-5 * std::abs(want.out[i]))
        << what << " out " << i;
  }
  for (size_t i = 0; i < run.dqkv.size(); ++i) {
    const double got = run.dqkv[i];
    ASSERT_NEAR(got, want.dqkv[i], 1e-4 + 1e-4 * std::abs(want.dqkv[i])) << what << " dqkv " << i;
  }
}

TEST(DocAttentionKernelsTest, ForwardAndBackwardMatchTheMaskedReferenceInEveryTable) {
  for (const Shape& s : kHeadShapes) {
    const auto [qkv, dout, pre] = RandomHead(s, 11);
    const auto layouts = Layouts(s.T);
    for (size_t l = 0; l < layouts.size(); ++l) {
      const Ref want = RefPacked(ToDouble(qkv), dout, layouts[l], s);
      for (const VecKernels* k : RunnableVecKernels()) {
        const std::string what = std::string(k->isa) + " T " + std::to_string(s.T) + " hs " +
                                 std::to_string(s.C) + " layout " + std::to_string(l);
        const HeadRun run = RunHead(*k, qkv, dout, layouts[l].data(), s.T, s.C, pre);
        ExpectHeadMatches(run, want, what);
        const HeadRun again = RunHead(*k, qkv, dout, layouts[l].data(), s.T, s.C, pre);
        ASSERT_TRUE(SameBits(run, again)) << what << ": two runs differ";
      }
    }
  }
}

// The ops.h promise the model relies on: all-zero starts are plain causal attention, bit for bit.
TEST(DocAttentionKernelsTest, AllZeroStartsGiveTheBitsOfNullStartsInEveryTable) {
  for (const Shape& s : kHeadShapes) {
    const auto [qkv, dout, pre] = RandomHead(s, 17);
    const std::vector<int32_t> zeros(s.T, 0);
    for (const VecKernels* k : RunnableVecKernels()) {
      const HeadRun null_run = RunHead(*k, qkv, dout, nullptr, s.T, s.C, pre);
      const HeadRun zero_run = RunHead(*k, qkv, dout, zeros.data(), s.T, s.C, pre);
      EXPECT_TRUE(SameBits(null_run.out, zero_run.out)) << k->isa << " T " << s.T << " out";
      EXPECT_TRUE(SameBits(null_run.stats, zero_run.stats)) << k->isa << " T " << s.T << " stats";
      EXPECT_TRUE(SameBits(null_run.dqkv, zero_run.dqkv)) << k->isa << " T " << s.T << " dqkv";
    }
  }
}

// The largest |got - want| / (1 + |want|) over a run's out, stats and dqkv (NaN if any is).
double WorstError(const HeadRun& run, const Ref& want) {
  double worst = 0;
  auto scan = [&](const std::vector<float>& got, const std::vector<double>& ref) {
    for (size_t i = 0; i < got.size(); ++i) {
      const double e = std::abs(got[i] - ref[i]) / (1 + std::abs(ref[i]));
      if (!std::isnan(worst) && !(e <= worst)) worst = e;  // a NaN sticks
    }
  };
  scan(run.out, want.out);
  scan(run.stats, want.stats);
  scan(run.dqkv, want.dqkv);
  return worst;
}

// The bf16 tiles of table `bf16` where hs is whole vectors and T >= min_seq: within bf16's
// precision of the masked reference on every layout (odd document starts and ends included: the
// pairs straddling them are masked), the same bits twice, and all-zero starts give null starts'
// bits. Elsewhere the table runs the fp32 code: the AVX-512 table's bits.
void ExpectBf16TilesMatchTheReference(const VecKernels* bf16, const std::vector<Shape>& shapes,
                                      int min_seq) {
  for (const Shape& s : shapes) {
    const auto [qkv, dout, pre] = RandomHead(s, 23);
    const auto layouts = Layouts(s.T);
    for (size_t l = 0; l < layouts.size(); ++l) {
      const std::string what = std::string(bf16->isa) + " T " + std::to_string(s.T) + " hs " +
                               std::to_string(s.C) + " layout " + std::to_string(l);
      const HeadRun run = RunHead(*bf16, qkv, dout, layouts[l].data(), s.T, s.C, pre);
      const HeadRun again = RunHead(*bf16, qkv, dout, layouts[l].data(), s.T, s.C, pre);
      ASSERT_TRUE(SameBits(run, again)) << what << ": two runs differ";
      if (s.C % 16 != 0 || s.T < min_seq) {
        const HeadRun fp32 =
            RunHead(VecKernelsForThisCpu(), qkv, dout, layouts[l].data(), s.T, s.C, pre);
        EXPECT_TRUE(SameBits(run, fp32)) << what << ": not the fp32 code's bits";
        continue;
      }
      const double worst = WorstError(run, RefPacked(ToDouble(qkv), dout, layouts[l], s));
      std::printf("bf16 tiles, %s: worst error %.2e\n", what.c_str(), worst);
      EXPECT_LT(worst, 0.03) << what;
      if (l == 0) {
        const std::vector<int32_t> zeros(s.T, 0);
        const HeadRun null_run = RunHead(*bf16, qkv, dout, nullptr, s.T, s.C, pre);
        EXPECT_TRUE(SameBits(null_run.out, run.out) && SameBits(null_run.dqkv, run.dqkv)) << what;
      }
    }
  }
}

TEST(DocAttentionKernelsTest, Bf16TilesMatchTheReferenceToBf16AndKeepTheirBits) {
  const VecKernels* bf16 = Bf16AttentionKernels();
  if (bf16 == nullptr) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  ExpectBf16TilesMatchTheReference(
      bf16, {{1, 130, 64, 1}, {1, 33, 48, 1}, {1, 77, 32, 1}, {1, 37, 20, 1}, {1, 61, 96, 1}}, 0);
}

// The same on AMX tiles (AmxAttentionKernels, vec_attention_amx.inc; other bits, the same
// precision) from kAmxAttentionMinSeq; hs 48 takes vdpbf16ps there (not whole tiles), and below
// that length the table is fp32's.
TEST(DocAttentionKernelsTest, AmxTilesMatchTheReferenceToBf16AndKeepTheirBits) {
  const VecKernels* amx = AmxAttentionKernels();
  if (amx == nullptr) GTEST_SKIP() << "this CPU (or its kernel) gives this process no AMX tiles";
  static_assert(kAmxAttentionMinSeq == 256, "the shapes straddle it");
  ExpectBf16TilesMatchTheReference(
      amx, {{1, 300, 64, 1}, {1, 257, 32, 1}, {1, 263, 96, 1}, {1, 259, 48, 1}, {1, 130, 64, 1}},
      kAmxAttentionMinSeq);
}

// Forward and backward through the Ops (B rows of different layouts, several heads).
std::vector<float> RunOps(Ops& ops, const std::vector<float>& qkv, const std::vector<float>& dout,
                          const std::vector<int32_t>& starts, Shape s) {
  const size_t nqkv = qkv.size(), nout = dout.size(), natt = size_t(s.B) * s.NH * s.T * 2;
  float *q = ops.Alloc(nqkv), *d = ops.Alloc(nout), *out = ops.Alloc(nout);
  float *att = ops.Alloc(natt), *g = ops.Alloc(nqkv);  // att: the stats
  int32_t* st = ops.AllocInt(starts.size());
  ops.CopyToDevice(q, qkv.data(), nqkv);
  ops.CopyToDevice(d, dout.data(), nout);
  ops.CopyIntToDevice(st, starts.data(), starts.size());
  ops.AttentionForward(out, att, q, st, s.B, s.T, s.C, s.NH);
  ops.AttentionBackward(g, d, q, att, st, s.B, s.T, s.C, s.NH);
  std::vector<float> all(nout + natt + nqkv);
  ops.CopyToHost(all.data(), out, nout);
  ops.CopyToHost(all.data() + nout, att, natt);
  ops.CopyToHost(all.data() + nout + natt, g, nqkv);
  for (void* p : {static_cast<void*>(q), static_cast<void*>(d), static_cast<void*>(out),
                  static_cast<void*>(att), static_cast<void*>(g), static_cast<void*>(st)}) {
    ops.Free(p);
  }
  return all;
}

TEST(DocAttentionKernelsTest, OpsMatchTheReferenceTwiceAndOnAnyThreadCount) {
  const Shape s{4, 70, 96, 4};
  const auto starts = BatchStarts(s.B, s.T, 1);
  auto qkv = Random(size_t(s.B) * s.T * 3 * s.C, 400, 1.5f);
  auto dout = Random(size_t(s.B) * s.T * s.C, 401);
  auto one = MakeOps("cpu", 1), three = MakeOps("cpu", 3);
  ASSERT_TRUE(one.ok() && three.ok());
  const std::vector<float> first = RunOps(**one, qkv, dout, starts, s);
  EXPECT_TRUE(SameBits(first, RunOps(**one, qkv, dout, starts, s))) << "two runs differ";
  EXPECT_TRUE(SameBits(first, RunOps(**three, qkv, dout, starts, s))) << "3 threads differ";
  const Ref want = RefPacked(ToDouble(qkv), dout, starts, s);
  std::vector<double> all = want.out;
  all.insert(all.end(), want.stats.begin(), want.stats.end());
  all.insert(all.end(), want.dqkv.begin(), want.dqkv.end());
  ASSERT_EQ(all.size(), first.size());
  for (size_t i = 0; i < all.size(); ++i) {
    ASSERT_NEAR(first[i], all[i], 1e-4 + 1e-4 * std::abs(all[i])) << "element " << i;
  }
}

TEST(DocAttentionKernelsDeathTest, MalformedStartsAbortNamingTheOp) {
  auto ops = MakeOps("cpu", 1);
  ASSERT_TRUE(ops.ok());
  const Shape s{1, 5, 4, 1};
  auto qkv = Random(size_t(s.T) * 3 * s.C, 500), dout = Random(size_t(s.T) * s.C, 501);
  const std::vector<int32_t> bad = {0, 0, 1, 1, 1};  // 1 is neither the previous start nor t
  EXPECT_DEATH(RunOps(**ops, qkv, dout, bad, s), "AttentionForward: doc_start\\[0,2\\] = 1");
}

}  // namespace
}  // namespace pp::kernels
