// The CPU backend's own threads and vector kernels: the pool runs every index once in static
// blocks; every kernel table this CPU can run (generic, AVX2, AVX-512) matches a double reference
// on shapes that are not multiples of the tiles; and the thread count never changes a bit.
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/vec_kernels.h"
#include "kernels/ops.h"
#include "tests/kernels/kernel_test_util.h"

namespace pp::kernels {
namespace {

TEST(ThreadPoolTest, RunsEveryIndexOnceInStaticBlocks) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.threads(), threads);
    for (int64_t n : {0, 1, 2, 5, 64, 1000}) {
      std::vector<int> count(n, 0), worker(n, -1);
      pool.Run(n, [&](int64_t i, int w) { ++count[i], worker[i] = w; });
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(count[i], 1) << "threads " << threads << " n " << n << " i " << i;
        if (n > 1) {
          // Worker w owns [w*n/W, (w+1)*n/W): the split is a pure function of n and W.
          const int64_t w = worker[i];
          ASSERT_GE(w, 0);
          ASSERT_GE(i, n * w / threads);
          ASSERT_LT(i, n * (w + 1) / threads);
        }
      }
    }
  }
}

TEST(ThreadPoolTest, ManyRunsInARowAndAfterTheHelpersSlept) {
  ThreadPool pool(2);
  int64_t total = 0;
  std::vector<int64_t> part(2, 0);
  for (int rep = 0; rep < 2000; ++rep) {
    pool.Run(2, [&](int64_t i, int w) { part[w] += i + 1; });
  }
  total = part[0] + part[1];
  EXPECT_EQ(total, 2000 * 3);
  // Long enough for the helper to stop spinning and wait on the condition variable.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::vector<int> seen(8, 0);
  pool.Run(8, [&](int64_t i, int) { seen[i] = 1; });
  EXPECT_EQ(std::accumulate(seen.begin(), seen.end(), 0), 8);
}

// ---- every table this CPU runs, against double references ------------------------------------
// out (T, hs) and P (T, T) of one head in double; qkv rows 3C apart as the kernels see them.
void RefHead(const std::vector<float>& qkv, int T, int C, int hs, std::vector<double>* out,
             std::vector<double>* stats) {
  out->assign(static_cast<size_t>(T) * hs, 0.0);
  stats->assign(static_cast<size_t>(T) * 2, 0.0);
  for (int t = 0; t < T; ++t) {
    double mx = -1e300, sum = 0;
    std::vector<double> s(t + 1);
    for (int j = 0; j <= t; ++j) {
      double d = 0;
      for (int i = 0; i < hs; ++i) d += double(qkv[t * 3 * C + i]) * qkv[j * 3 * C + C + i];
      s[j] = d / std::sqrt(double(hs));
      mx = std::max(mx, s[j]);
    }
    for (int j = 0; j <= t; ++j) sum += (s[j] = std::exp(s[j] - mx));
    (*stats)[2 * t] = mx, (*stats)[2 * t + 1] = 1.0 / sum;
    for (int j = 0; j <= t; ++j) {
      for (int i = 0; i < hs; ++i) (*out)[t * hs + i] += s[j] / sum * qkv[j * 3 * C + 2 * C + i];
    }
  }
}

// L = sum R * out for one head, in double: the objective the backward's dout = R differentiates.
double RefObjective(const std::vector<double>& qkv, const std::vector<float>& r, int T, int C,
                    int hs) {
  std::vector<float> f(qkv.begin(), qkv.end());
  std::vector<double> out, stats;
  RefHead(f, T, C, hs, &out, &stats);
  double s = 0;
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < hs; ++i) s += r[t * C + i] * out[t * hs + i];
  }
  return s;
}

TEST(VecKernelsTest, AttentionForwardOnOddShapesInEveryTable) {
  struct Shape {
    int T, hs;
  };
  // T not a multiple of the 4-query tile or of a vector; hs below, between and above vectors.
  for (Shape sh : {Shape{1, 8}, Shape{7, 20}, Shape{37, 20}, Shape{130, 64}, Shape{33, 48}}) {
    const int C = sh.hs;  // one head: C = hs
    auto qkv = Random(static_cast<size_t>(sh.T) * 3 * C, sh.T * 7 + sh.hs, 2.0f);
    std::vector<double> want_out, want_stats;
    RefHead(qkv, sh.T, C, sh.hs, &want_out, &want_stats);
    for (const VecKernels* k : RunnableVecKernels()) {
      std::vector<float> out(static_cast<size_t>(sh.T) * C, -1.0f);
      std::vector<float> stats(static_cast<size_t>(sh.T) * 2, -1.0f);
      std::vector<float> scratch(AttentionScratchFloats(sh.T, sh.hs));
      k->attention_forward(out.data(), stats.data(), HeadView{qkv.data(), sh.T, C, sh.hs},
                           scratch.data());
      for (size_t i = 0; i < stats.size(); ++i) {
        ASSERT_NEAR(stats[i], want_stats[i], 2e-6 + 2e-6 * std::abs(want_stats[i]))
            << k->isa << " T " << sh.T << " stats " << i;
      }
      for (size_t i = 0; i < out.size(); ++i) {
        ASSERT_NEAR(out[i], want_out[i], 2e-5 + 2e-5 * std::abs(want_out[i]))
            << k->isa << " T " << sh.T << " hs " << sh.hs << " out " << i;
      }
    }
  }
}

TEST(VecKernelsTest, AttentionBackwardMatchesFiniteDifferencesInEveryTable) {
  const int T = 9, hs = 20, C = hs;
  auto qkv = Random(static_cast<size_t>(T) * 3 * C, 90, 1.5f), r = Random(T * C, 91);
  std::vector<double> out, ref_stats;
  RefHead(qkv, T, C, hs, &out, &ref_stats);
  std::vector<float> stats(ref_stats.begin(), ref_stats.end());
  std::vector<double> x(qkv.begin(), qkv.end());
  for (const VecKernels* k : RunnableVecKernels()) {
    auto pre = Random(qkv.size(), 92);
    std::vector<float> g = pre;
    std::vector<float> scratch(AttentionScratchFloats(T, hs));
    k->attention_backward(g.data(), r.data(), stats.data(), HeadView{qkv.data(), T, C, hs},
                          scratch.data());
    for (size_t i = 0; i < x.size(); ++i) {
      std::vector<double> xp = x, xm = x;
      xp[i] += 1e-4, xm[i] -= 1e-4;  // float storage of the reference: a wider step
      const double numeric = (RefObjective(xp, r, T, C, hs) - RefObjective(xm, r, T, C, hs)) / 2e-4;
      ASSERT_NEAR(g[i], numeric, 2e-3 + 2e-3 * std::abs(numeric))  // pre overwritten
          << k->isa << " dqkv[" << i << "]";
    }
  }
}

// The vector AdamW is the element-wise formula, operation for operation: every table gives its
// bits (each step correctly rounded) on 37 parameters (two whole AVX-512 vectors and a partial
// one), with gradients and moments over many magnitudes, zeros included.
TEST(VecKernelsTest, AdamWGivesTheBitsOfTheScalarFormulaInEveryTable) {
  const size_t n = 37;
  std::vector<float> params = Random(n, 60, 2.0f), grads = Random(n, 61, 3.0f);
  std::vector<float> m = Random(n, 62, 0.5f), v = Random(n, 63, 0.5f);
  for (size_t i = 0; i < n; ++i) {
    v[i] = v[i] * v[i] * std::pow(10.0f, float(i % 9) - 6);  // v >= 0, from 1e-6 to 1e2
    grads[i] *= std::pow(10.0f, float(i % 7) - 4);
  }
  grads[5] = 0.0f, m[5] = 0.0f, v[5] = 0.0f;
  const AdamWScalars a{
      1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, 1.0f - 0.9f * 0.9f, 1.0f - 0.95f * 0.95f};
  std::vector<float> want_p = params, want_m = m, want_v = v;
  for (size_t i = 0; i < n; ++i) {
    const float g = grads[i] * a.grad_scale;
    const float mi = a.beta1 * want_m[i] + (1.0f - a.beta1) * g;
    const float vi = a.beta2 * want_v[i] + (1.0f - a.beta2) * g * g;
    want_m[i] = mi, want_v[i] = vi;
    const float mhat = mi / a.c1, vhat = vi / a.c2;
    want_p[i] -= a.lr * (mhat / (std::sqrt(vhat) + a.eps) + a.weight_decay * want_p[i]);
  }
  for (const VecKernels* k : RunnableVecKernels()) {
    std::vector<float> p = params, mm = m, vv = v;
    std::vector<uint16_t> bits(n), want_bits(n);
    k->adamw(p.data(), grads.data(), mm.data(), vv.data(), n, a, nullptr);
    std::vector<float> p2 = params, m2 = m, v2 = v;
    k->adamw(p2.data(), grads.data(), m2.data(), v2.data(), n, a, bits.data());
    k->to_bf16(want_bits.data(), want_p.data(), n);
    ASSERT_EQ(std::memcmp(p2.data(), p.data(), n * sizeof(float)), 0) << k->isa << ": bits moved";
    ASSERT_EQ(bits, want_bits) << k->isa << ": the bf16 copy is not to_bf16 of the new params";
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(p[i]), std::bit_cast<uint32_t>(want_p[i]))
          << k->isa << " param " << i << ": " << p[i] << " vs " << want_p[i];
      ASSERT_EQ(std::bit_cast<uint32_t>(mm[i]), std::bit_cast<uint32_t>(want_m[i])) << k->isa;
      ASSERT_EQ(std::bit_cast<uint32_t>(vv[i]), std::bit_cast<uint32_t>(want_v[i])) << k->isa;
    }
  }
}

// Whole 16 x 16 blocks (the AVX-512 tables' registers) and both edges' partial ones, into rows
// wider than the columns: every element lands where its index says, and nothing else is written.
TEST(VecKernelsTest, TransposeIsExactInEveryTable) {
  const int rows = 37, cols = 50, ldx = 53, ldo = 41;
  const std::vector<float> x = Random(size_t(rows) * ldx, 70, 5.0f);
  for (const VecKernels* k : RunnableVecKernels()) {
    std::vector<float> out(size_t(cols) * ldo, -7.0f);
    k->transpose(out.data(), ldo, x.data(), ldx, rows, cols);
    for (int c = 0; c < cols; ++c) {
      for (int r = 0; r < ldo; ++r) {
        const float want = r < rows ? x[size_t(r) * ldx + c] : -7.0f;
        ASSERT_EQ(std::bit_cast<uint32_t>(out[size_t(c) * ldo + r]), std::bit_cast<uint32_t>(want))
            << k->isa << " at column " << c << " row " << r;
      }
    }
  }
}

// GELU far into both tails, where its vector form could lose accuracy: s = 1 - r near 0 was a
// cancellation on AVX2 (GELU(-100) = -6e-6), and a reciprocal estimate of exp(176) + 1 broke its
// gradient at 1000. 15 inputs: the last vector is a partial one.
TEST(VecKernelsTest, GeluMatchesDoubleAtBothEndsInEveryTable) {
  const std::vector<float> x = {-1000, -100, -20, -5, -3, -1,  -1e-3f, 0,
                                1e-3f, 1,    3,   5,  20, 100, 1000};
  const double k = std::sqrt(2 / M_PI);
  for (const VecKernels* t : RunnableVecKernels()) {
    std::vector<float> y(x.size()), g(x.size(), 0.5f);  // g is overwritten
    const std::vector<float> ones(x.size(), 1.0f);
    t->gelu_forward(y.data(), x.data(), x.size());
    t->gelu_backward(g.data(), x.data(), ones.data(), x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const double v = x[i], th = std::tanh(k * (v + 0.044715 * v * v * v));
      const double want = 0.5 * v * (1 + th);
      const double grad = 0.5 * (1 + th) + 0.5 * v * (1 - th * th) * k * (1 + 3 * 0.044715 * v * v);
      EXPECT_NEAR(y[i], want, 1e-6 * (1 + std::abs(want))) << t->isa << " GELU(" << v << ")";
      EXPECT_NEAR(g[i], grad, 1e-5 * (1 + std::abs(grad))) << t->isa << " GELU'(" << v << ")";
    }
  }
}

TEST(VecKernelsTest, RowKernelsAgreeAcrossTables) {
  // no multiple of 16: every tail path runs; the cross-entropy masks 5 padding columns
  const int N = 3, C = 77, V = 45, Vr = 40;
  auto x = Random(N * C, 100, 3.0f), w = Random(C, 101), b = Random(C, 102);
  auto logits = Random(N * V, 103, 4.0f);
  const int32_t targets[N] = {0, 39, 17};
  std::vector<std::vector<float>> results;
  for (const VecKernels* k : RunnableVecKernels()) {
    std::vector<float> out(N * C), mean(N), rstd(N), dx(N * C, 0.0f), gel(N * C);
    std::vector<float> losses(N), probs(N * V);
    k->layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), 0,
                         N, C);
    k->layernorm_backward_input(dx.data(), x.data(), out.data(), x.data(), w.data(), mean.data(),
                                rstd.data(), 0, N, C);
    std::vector<float> res(N * C), rln(N * C), rmean(N), rrstd(N);
    k->residual_layernorm_forward(res.data(), rln.data(), rmean.data(), rrstd.data(), x.data(),
                                  dx.data(), w.data(), b.data(), 0, N, C);
    k->gelu_forward(gel.data(), x.data(), gel.size());
    k->cross_entropy_forward(losses.data(), probs.data(), logits.data(), targets, 0, N, V, Vr);
    std::vector<float> all;
    for (auto* v : {&out, &mean, &rstd, &dx, &res, &rln, &rmean, &rrstd, &gel, &losses, &probs}) {
      all.insert(all.end(), v->begin(), v->end());
    }
    results.push_back(all);
  }
  for (size_t t = 1; t < results.size(); ++t) {
    for (size_t i = 0; i < results[0].size(); ++i) {
      ASSERT_NEAR(results[t][i], results[0][i], 1e-5 + 1e-5 * std::abs(results[0][i]))
          << RunnableVecKernels()[t]->isa << " vs generic at " << i;
    }
  }
}

// ---- the thread count leaves every bit alone ---------------------------------------------------
// One block's worth of every op on shapes large enough to be split (N rows >= 2 tasks of 64).
// One straight sequence (63 lines): each op feeds the next, as in a block.
std::vector<float> RunEveryOp(int threads) {
  auto made = MakeOps("cpu", threads);
  EXPECT_TRUE(made.ok());
  Ops& ops = **made;
  const int B = 3, T = 70, C = 96, NH = 4, N = B * T, V = 61;
  std::vector<float> all;
  auto dev = [&](const std::vector<float>& h) {
    float* p = ops.Alloc(h.size());
    ops.CopyToDevice(p, h.data(), h.size());
    return p;
  };
  auto keep = [&](const float* p, size_t n) {
    std::vector<float> h(n);
    ops.CopyToHost(h.data(), p, n);
    all.insert(all.end(), h.begin(), h.end());
  };
  float* x = dev(Random(N * C, 1));
  float* lw = dev(Random(C, 2));
  float* lb = dev(Random(C, 3));
  float* w = dev(Random(3 * C * C, 4, 0.2f));
  float* bias = dev(Random(3 * C, 5));
  float *ln = ops.Alloc(N * C), *mean = ops.Alloc(N), *rstd = ops.Alloc(N);
  float *qkv = ops.Alloc(N * 3 * C), *out = ops.Alloc(N * C), *att = ops.Alloc(B * NH * T * 2);
  ops.LayerNormForward(ln, mean, rstd, x, lw, lb, N, C);
  ops.MatmulForward(qkv, ln, w, bias, N, C, 3 * C);
  ops.AttentionForward(out, att, qkv, nullptr, B, T, C, NH);
  float *dqkv = ops.Alloc(N * 3 * C), *dln = ops.Alloc(N * C), *dx = ops.Alloc(N * C);
  float *dw = ops.Alloc(3 * C * C), *db = ops.Alloc(3 * C), *dlw = ops.Alloc(C), *dlb = ops.Alloc(C);
  ops.AttentionBackward(dqkv, x, qkv, att, nullptr, B, T, C, NH);
  ops.MatmulBackwardInput(dln, dqkv, w, N, C, 3 * C);
  ops.MatmulBackwardWeight(dw, db, dqkv, ln, N, C, 3 * C);
  ops.LayerNormBackwardInput(dx, x, dln, x, lw, mean, rstd, N, C);  // x as the residual grad
  ops.LayerNormBackwardWeight(dlw, dlb, dln, x, mean, rstd, N, C);
  float* gel = ops.Alloc(N * 3 * C);
  ops.GeluForward(gel, qkv, N * 3 * C);
  ops.GeluBackward(dqkv, qkv, gel, N * 3 * C);
  std::vector<int32_t> targets(N);
  for (int i = 0; i < N; ++i) targets[i] = (i * 13) % V;
  int32_t* tg = ops.AllocInt(N);
  ops.CopyIntToDevice(tg, targets.data(), N);
  float *losses = ops.Alloc(N), *probs = ops.Alloc(N * V);
  ops.CrossEntropyForward(losses, probs, qkv, tg, N, V, V);  // qkv read as (N, V) logits
  float *m = ops.Alloc(3 * C * C), *v = ops.Alloc(3 * C * C);
  AdamWParams a;
  a.weight_decay = 0.1f;
  ops.AdamW(w, dw, m, v, 3 * C * C, a);
  ops.Add(dx, ln, N * C);
  ops.ResidualForward(ln, dx, x, N * C);
  ops.ResidualLayerNormForward(dln, out, mean, rstd, ln, dx, lw, lb, N, C);
  for (auto [p, n] : std::vector<std::pair<float*, size_t>>{{ln, N * C},
                                                            {mean, N},
                                                            {rstd, N},
                                                            {qkv, N * 3 * C},
                                                            {out, N * C},
                                                            {att, B * NH * T * 2},
                                                            {dqkv, N * 3 * C},
                                                            {dln, N * C},
                                                            {dx, N * C},
                                                            {dw, 3 * C * C},
                                                            {db, 3 * C},
                                                            {dlw, C},
                                                            {dlb, C},
                                                            {gel, N * 3 * C},
                                                            {losses, N},
                                                            {probs, N * V},
                                                            {w, 3 * C * C},
                                                            {m, 3 * C * C},
                                                            {v, 3 * C * C}}) {
    keep(p, n);
  }
  for (float* p : {x, lw, lb, w, bias, ln, mean, rstd, qkv, out, att, dqkv, dln, dx, dw, db, dlw,
                   dlb, gel, losses, probs, m, v}) {
    ops.Free(p);
  }
  ops.Free(tg);
  return all;
}

TEST(CpuThreadsTest, EveryOpGivesTheSameBitsOnOneTwoAndThreeThreads) {
  const std::vector<float> one = RunEveryOp(1);
  for (int threads : {2, 3}) {
    const std::vector<float> more = RunEveryOp(threads);
    ASSERT_EQ(one.size(), more.size());
    for (size_t i = 0; i < one.size(); ++i) {
      ASSERT_EQ(0, std::memcmp(&one[i], &more[i], sizeof(float)))
          << threads << " threads, value " << i << ": " << more[i] << " vs " << one[i];
    }
  }
}

// SumSquares sums fixed blocks of 65,536 elements on the pool, then the blocks in order: 5 blocks
// and a tail here, so 2 and 3 threads split the blocks unevenly. The bits must be those of one
// thread, and the value that of an exact sum to double rounding over the blocks.
TEST(CpuThreadsTest, SumSquaresGivesTheSameBitsOnOneTwoAndThreeThreads) {
  const std::vector<float> x = Random(5 * 65536 + 1234, 7, 3.0f);
  long double exact = 0;
  for (float v : x) exact += static_cast<long double>(v) * v;
  double one = 0;
  for (int threads : {1, 2, 3}) {
    auto made = MakeOps("cpu", threads);
    ASSERT_TRUE(made.ok());
    float* p = (*made)->Alloc(x.size());
    (*made)->CopyToDevice(p, x.data(), x.size());
    const double got = (*made)->SumSquares(p, x.size());
    (*made)->Free(p);
    EXPECT_NEAR(got, static_cast<double>(exact), 1e-12 * static_cast<double>(exact)) << threads;
    if (threads == 1) one = got;
    EXPECT_EQ(0, std::memcmp(&one, &got, sizeof(double))) << threads << " threads: " << got;
  }
}

// The three products at a real block's shapes (B=8, T=128, C=256), in fp32 and bf16, on the path
// MakeOps takes on this CPU. oneDNN chooses its kernel by shape (a transposed A once took brgemm
// at m=768 and gemm:jit at m=384, summing in another order): the row blocks of two and three
// threads must still give the bits of one call.
std::vector<float> RunBlockProducts(int threads, common::Precision precision) {
  auto made = MakeOps("cpu", threads, precision);
  EXPECT_TRUE(made.ok());
  Ops& ops = **made;
  constexpr int N = 8 * 128, C = 256;
  std::vector<float> all;
  for (auto [ic, oc] : {std::pair{C, 3 * C}, {C, 4 * C}, {4 * C, C}}) {
    const std::vector<float> inp = Random(size_t(N) * ic, 1), w = Random(size_t(oc) * ic, 2, 0.1f),
                             bias = Random(oc, 3), dout = Random(size_t(N) * oc, 4);
    std::vector<float> out(size_t(N) * oc), dinp = Random(size_t(N) * ic, 5),
                                            dw = Random(size_t(oc) * ic, 6), db(oc);
    ops.MatmulForward(out.data(), inp.data(), w.data(), bias.data(), N, ic, oc);
    ops.MatmulBackwardInput(dinp.data(), dout.data(), w.data(), N, ic, oc);
    ops.MatmulBackwardWeight(dw.data(), db.data(), dout.data(), inp.data(), N, ic, oc);
    for (const std::vector<float>* v : {&out, &dinp, &dw, &db}) {
      all.insert(all.end(), v->begin(), v->end());
    }
  }
  return all;
}

TEST(CpuThreadsTest, BlockProductsGiveTheSameBitsOnOneTwoAndThreeThreads) {
  for (common::Precision precision : {common::Precision::kFp32, common::Precision::kBf16}) {
    const std::vector<float> one = RunBlockProducts(1, precision);
    for (int threads : {2, 3}) {
      const std::vector<float> more = RunBlockProducts(threads, precision);
      ASSERT_EQ(one.size(), more.size());
      size_t differ = 0;
      for (size_t i = 0; i < one.size(); ++i) differ += std::memcmp(&one[i], &more[i], 4) != 0;
      EXPECT_EQ(differ, 0u) << threads << " threads, " << common::PrecisionName(precision);
    }
  }
}

}  // namespace
}  // namespace pp::kernels
