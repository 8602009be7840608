// The CPU Ops against double-precision references: forward values, and every backward against
// central finite differences of the reference in double. Objectives are L = sum(R * out) for a
// random R, so the analytic gradient is the backward of dout = R.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "tests/kernels/kernel_test_util.h"
#include "kernels/ops.h"

namespace pp::kernels {
namespace {

using Vec = std::vector<double>;

Vec ToDouble(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }
double Dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Central differences of f at x (h = 1e-6, double) against the analytic gradient.
void ExpectGradient(const std::function<double(const Vec&)>& f, const Vec& x,
                    const std::vector<float>& analytic, const char* what) {
  ASSERT_EQ(x.size(), analytic.size()) << what;
  const double h = 1e-6;
  for (size_t i = 0; i < x.size(); ++i) {
    Vec xp = x, xm = x;
    xp[i] += h;
    xm[i] -= h;
    double numeric = (f(xp) - f(xm)) / (2 * h);
    ASSERT_NEAR(analytic[i], numeric, 1e-4 + 1e-3 * std::abs(numeric)) << what << "[" << i << "]";
  }
}

class CpuOpsTest : public CpuOpsFixture {
 protected:
  // Gradient buffers start from `prefill` so the += contract is checked; returns grad - prefill.
  std::vector<float> Added(const float* p, const std::vector<float>& prefill) {
    std::vector<float> v = Host(p, prefill.size());
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(double(v[i]) - prefill[i]);
    return v;
  }
  void ExpectForward(const std::vector<float>& got, const Vec& want, const char* what) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-5 + 1e-5 * std::abs(want[i])) << what << "[" << i << "]";
    }
  }
};

// ---- double references ----------------------------------------------------------------------
Vec RefLayerNorm(const Vec& x, const Vec& w, const Vec& b, int N, int C) {
  Vec out(x.size());
  for (int n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += x[n * C + c];
    m /= C;
    for (int c = 0; c < C; ++c) v += (x[n * C + c] - m) * (x[n * C + c] - m);
    double r = 1.0 / std::sqrt(v / C + 1e-5);
    for (int c = 0; c < C; ++c) out[n * C + c] = (x[n * C + c] - m) * r * w[c] + b[c];
  }
  return out;
}
Vec RefMatmul(const Vec& x, const Vec& w, const Vec* b, int N, int IC, int OC) {
  Vec out(static_cast<size_t>(N) * OC);
  for (int n = 0; n < N; ++n) {
    for (int o = 0; o < OC; ++o) {
      double s = b ? (*b)[o] : 0.0;
      for (int i = 0; i < IC; ++i) s += x[n * IC + i] * w[o * IC + i];
      out[n * OC + o] = s;
    }
  }
  return out;
}
Vec RefAttention(const Vec& qkv, int B, int T, int C, int NH) {
  const int hs = C / NH;
  Vec out(static_cast<size_t>(B) * T * C, 0.0);
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      for (int t = 0; t < T; ++t) {
        const double* q = &qkv[(b * T + t) * 3 * C + h * hs];
        std::vector<double> p(t + 1);
        double mx = -1e300, sum = 0;
        for (int j = 0; j <= t; ++j) {
          const double* k = &qkv[(b * T + j) * 3 * C + C + h * hs];
          double s = 0;
          for (int i = 0; i < hs; ++i) s += q[i] * k[i];
          p[j] = s / std::sqrt(static_cast<double>(hs));
          mx = std::max(mx, p[j]);
        }
        for (int j = 0; j <= t; ++j) sum += (p[j] = std::exp(p[j] - mx));
        for (int j = 0; j <= t; ++j) {
          const double* v = &qkv[(b * T + j) * 3 * C + 2 * C + h * hs];
          for (int i = 0; i < hs; ++i) out[(b * T + t) * C + h * hs + i] += p[j] / sum * v[i];
        }
      }
    }
  }
  return out;
}
double RefGelu(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
Vec RefCrossEntropy(const Vec& logits, const std::vector<int32_t>& targets, int N, int V) {
  Vec losses(N);
  for (int n = 0; n < N; ++n) {
    double mx = -1e300, sum = 0;
    for (int v = 0; v < V; ++v) mx = std::max(mx, logits[n * V + v]);
    for (int v = 0; v < V; ++v) sum += std::exp(logits[n * V + v] - mx);
    losses[n] = std::log(sum) + mx - logits[n * V + targets[n]];
  }
  return losses;
}

// ---- tests ------------------------------------------------------------------------------------
TEST_F(CpuOpsTest, EncoderForwardAndBackward) {
  const int B = 2, T = 3, C = 4, V = 5;
  std::vector<int32_t> tokens = {0, 4, 2, 4, 4, 1};
  auto wte = Random(V * C, 1), wpe = Random(T * C, 2), r = Random(B * T * C, 3);
  float* out = ops_->Alloc(B * T * C);
  owned_.push_back(out);
  int32_t* tok = DevInt(tokens);
  ops_->EncoderForward(out, tok, Dev(wte), Dev(wpe), nullptr, B, T, C);
  auto ref = [&](const Vec& e, const Vec& p) {
    Vec o(B * T * C);
    for (int bt = 0; bt < B * T; ++bt) {
      for (int c = 0; c < C; ++c) o[bt * C + c] = e[tokens[bt] * C + c] + p[(bt % T) * C + c];
    }
    return o;
  };
  ExpectForward(Host(out, B * T * C), ref(ToDouble(wte), ToDouble(wpe)), "encoder");
  auto pre_e = Random(V * C, 4), pre_p = Random(T * C, 5);
  float* dwte = Dev(pre_e);
  float* dwpe = Dev(pre_p);
  ops_->EncoderBackward(dwte, dwpe, Dev(r), tok, nullptr, B, T, C);
  Vec R = ToDouble(r);
  ExpectGradient([&](const Vec& e) { return Dot(R, ref(e, ToDouble(wpe))); }, ToDouble(wte),
                 Added(dwte, pre_e), "dwte");
  ExpectGradient([&](const Vec& p) { return Dot(R, ref(ToDouble(wte), p)); }, ToDouble(wpe),
                 Added(dwpe, pre_p), "dwpe");
}

TEST_F(CpuOpsTest, LayerNormForwardAndBackward) {
  const int N = 5, C = 16;
  auto x = Random(N * C, 10, 2.0f), w = Random(C, 11), b = Random(C, 12), r = Random(N * C, 13);
  for (auto& v : x) v += 0.5f;  // a non-zero mean
  float *out = ops_->Alloc(N * C), *mean = ops_->Alloc(N), *rstd = ops_->Alloc(N);
  owned_.insert(owned_.end(), {out, mean, rstd});
  float *dx = Dev(x), *dw = Dev(w), *db = Dev(b);
  ops_->LayerNormForward(out, mean, rstd, dx, dw, db, N, C);
  Vec X = ToDouble(x), W = ToDouble(w), Bv = ToDouble(b), R = ToDouble(r);
  ExpectForward(Host(out, N * C), RefLayerNorm(X, W, Bv, N, C), "layernorm");
  auto pre_x = Random(N * C, 14), pre_w = Random(C, 15), pre_b = Random(C, 16);
  float *gx = Dev(pre_x), *gw = Dev(pre_w), *gb = Dev(pre_b);
  float* dr = Dev(r);
  ops_->LayerNormBackwardInput(gx, gx, dr, dx, dw, mean, rstd, N, C);  // dres == dinp: +=
  ops_->LayerNormBackwardWeight(gw, gb, dr, dx, mean, rstd, N, C);
  ExpectGradient([&](const Vec& v) { return Dot(R, RefLayerNorm(v, W, Bv, N, C)); }, X,
                 Added(gx, pre_x), "ln dinp");
  ExpectGradient([&](const Vec& v) { return Dot(R, RefLayerNorm(X, v, Bv, N, C)); }, W,
                 Added(gw, pre_w), "ln dweight");
  ExpectGradient([&](const Vec& v) { return Dot(R, RefLayerNorm(X, W, v, N, C)); }, Bv,
                 Added(gb, pre_b), "ln dbias");
}

// The fused residual ops keep the bits of the two-op sequences they replace (worker/model/layers.cc
// relies on it: the same losses as before the fusion): the forward those of ResidualForward then
// LayerNormForward; the input gradient dres + g with dres apart, g alone without one, whatever
// dinp held (it is overwritten), and the += of before when dres is dinp.
TEST_F(CpuOpsTest, ResidualJoinsTheLayerNormBitForBit) {
  const int N = 7, C = 37;  // rows of a partial vector
  auto a = Random(N * C, 30, 2.0f), b = Random(N * C, 31), w = Random(C, 32), bias = Random(C, 33);
  float *da = Dev(a), *db = Dev(b), *dw = Dev(w), *dbias = Dev(bias);
  auto buf = [&](size_t n) { return Dev(Random(n, 34)); };  // outputs must not depend on it
  float *res = buf(N * C), *out = buf(N * C), *mean = buf(N), *rstd = buf(N);
  ops_->ResidualLayerNormForward(res, out, mean, rstd, da, db, dw, dbias, N, C);
  float *res2 = buf(N * C), *out2 = buf(N * C), *mean2 = buf(N), *rstd2 = buf(N);
  ops_->ResidualForward(res2, da, db, N * C);
  ops_->LayerNormForward(out2, mean2, rstd2, res2, dw, dbias, N, C);
  for (auto [p, q, n] :
       {std::tuple{res, res2, N * C}, {out, out2, N * C}, {mean, mean2, N}, {rstd, rstd2, N}}) {
    EXPECT_EQ(0, std::memcmp(Host(p, n).data(), Host(q, n).data(), n * sizeof(float)));
  }

  auto dout = Random(N * C, 35), dres = Random(N * C, 36);
  float *ddout = Dev(dout), *ddres = Dev(dres);
  float* g = Dev(std::vector<float>(N * C, 0.0f));  // the += of before onto zeros: g alone
  ops_->LayerNormBackwardInput(g, g, ddout, res, dw, mean, rstd, N, C);
  float* alone = buf(N * C);
  ops_->LayerNormBackwardInput(alone, nullptr, ddout, res, dw, mean, rstd, N, C);
  float* joined = buf(N * C);
  ops_->LayerNormBackwardInput(joined, ddres, ddout, res, dw, mean, rstd, N, C);
  float* in_place = Dev(dres);  // before: Copy(dinp, dres), then +=
  ops_->LayerNormBackwardInput(in_place, in_place, ddout, res, dw, mean, rstd, N, C);
  const std::vector<float> hg = Host(g, N * C), ha = Host(alone, N * C);
  const std::vector<float> hj = Host(joined, N * C), hi = Host(in_place, N * C);
  EXPECT_EQ(0, std::memcmp(hg.data(), ha.data(), N * C * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(hj.data(), hi.data(), N * C * sizeof(float)));
  for (int i = 0; i < N * C; ++i) {
    const float want = dres[i] + hg[i];
    ASSERT_EQ(0, std::memcmp(&want, &hj[i], sizeof(float))) << i;
    ASSERT_NE(hg[i], 0.0f) << i;  // a gradient that is there to be added
  }
}

TEST_F(CpuOpsTest, MatmulForwardAndBackward) {
  const int N = 6, IC = 7, OC = 5;
  auto x = Random(N * IC, 20), w = Random(OC * IC, 21), b = Random(OC, 22), r = Random(N * OC, 23);
  Vec X = ToDouble(x), W = ToDouble(w), Bv = ToDouble(b), R = ToDouble(r);
  float* out = ops_->Alloc(N * OC);
  owned_.push_back(out);
  float *dx = Dev(x), *dw = Dev(w), *db = Dev(b), *dr = Dev(r);
  ops_->MatmulForward(out, dx, dw, db, N, IC, OC);
  ExpectForward(Host(out, N * OC), RefMatmul(X, W, &Bv, N, IC, OC), "matmul");
  ops_->MatmulForward(out, dx, dw, nullptr, N, IC, OC);
  ExpectForward(Host(out, N * OC), RefMatmul(X, W, nullptr, N, IC, OC), "matmul no bias");
  auto pre_x = Random(N * IC, 24), pre_w = Random(OC * IC, 25), pre_b = Random(OC, 26);
  float *gx = Dev(pre_x), *gw = Dev(pre_w), *gb = Dev(pre_b);
  ops_->MatmulBackwardInput(gx, dr, dw, N, IC, OC);
  ops_->MatmulBackwardWeight(gw, gb, dr, dx, N, IC, OC);
  // dinp is overwritten (ops.h): the prefill must not show.
  ExpectGradient([&](const Vec& v) { return Dot(R, RefMatmul(v, W, &Bv, N, IC, OC)); }, X,
                 Host(gx, N * IC), "matmul dinp");
  ExpectGradient([&](const Vec& v) { return Dot(R, RefMatmul(X, v, &Bv, N, IC, OC)); }, W,
                 Added(gw, pre_w), "matmul dweight");
  ExpectGradient([&](const Vec& v) { return Dot(R, RefMatmul(X, W, &v, N, IC, OC)); }, Bv,
                 Added(gb, pre_b), "matmul dbias");
}

TEST_F(CpuOpsTest, AttentionForwardAndBackward) {
  const int B = 2, T = 5, C = 8, NH = 2;
  auto qkv = Random(B * T * 3 * C, 30), r = Random(B * T * C, 31);
  Vec Q = ToDouble(qkv), R = ToDouble(r);
  float *out = ops_->Alloc(B * T * C), *stats = ops_->Alloc(B * NH * T * 2);
  owned_.insert(owned_.end(), {out, stats});
  float* dq = Dev(qkv);
  ops_->AttentionForward(out, stats, dq, nullptr, B, T, C, NH);
  ExpectForward(Host(out, B * T * C), RefAttention(Q, B, T, C, NH), "attention");
  // stats (B,NH,T,2): each row's maximum score over keys 0..t and 1 / sum of exponentials
  const std::vector<float> got = Host(stats, B * NH * T * 2);
  const int hs = C / NH;
  for (int row = 0; row < B * NH * T; ++row) {
    const int b = row / (NH * T), h = row / T % NH, t = row % T;
    std::vector<double> scores(t + 1);
    for (int j = 0; j <= t; ++j) {
      for (int d = 0; d < hs; ++d) {
        scores[j] += Q[(b * T + t) * 3 * C + h * hs + d] * Q[(b * T + j) * 3 * C + C + h * hs + d];
      }
      scores[j] /= std::sqrt(double(hs));
    }
    const double mx = *std::max_element(scores.begin(), scores.end());
    double sum = 0;
    for (double s : scores) sum += std::exp(s - mx);
    EXPECT_NEAR(got[2 * row], mx, 1e-6 + 1e-6 * std::abs(mx)) << "row " << row << " max";
    EXPECT_NEAR(got[2 * row + 1], 1.0 / sum, 1e-6 / sum) << "row " << row << " 1 / sum";
  }
  float* g = Dev(Random(B * T * 3 * C, 32));  // overwritten (ops.h): the prefill must not show
  ops_->AttentionBackward(g, Dev(r), dq, stats, nullptr, B, T, C, NH);
  ExpectGradient([&](const Vec& v) { return Dot(R, RefAttention(v, B, T, C, NH)); }, Q,
                 Host(g, B * T * 3 * C), "attention dqkv");
}

TEST_F(CpuOpsTest, GeluForwardAndBackward) {
  const size_t n = 64;
  auto x = Random(n, 40, 4.0f), r = Random(n, 41);
  Vec X = ToDouble(x), R = ToDouble(r);
  float* out = ops_->Alloc(n);
  owned_.push_back(out);
  float* dx = Dev(x);
  ops_->GeluForward(out, dx, n);
  auto ref = [&](const Vec& v) {
    Vec o(v.size());
    for (size_t i = 0; i < v.size(); ++i) o[i] = RefGelu(v[i]);
    return o;
  };
  ExpectForward(Host(out, n), ref(X), "gelu");
  float* g = Dev(Random(n, 42));  // overwritten (ops.h): the prefill must not show
  ops_->GeluBackward(g, dx, Dev(r), n);
  ExpectGradient([&](const Vec& v) { return Dot(R, ref(v)); }, X, Host(g, n), "gelu dinp");
}

TEST_F(CpuOpsTest, CrossEntropyForwardAndBackward) {
  const int N = 6, V = 9;
  const float dloss = 0.37f;
  auto logits = Random(N * V, 50, 3.0f);
  std::vector<int32_t> targets = {0, 8, 3, 3, 5, 1};
  Vec Lg = ToDouble(logits);
  float *losses = ops_->Alloc(N), *probs = ops_->Alloc(N * V);
  owned_.insert(owned_.end(), {losses, probs});
  int32_t* tg = DevInt(targets);
  ops_->CrossEntropyForward(losses, probs, Dev(logits), tg, N, V, V);
  ExpectForward(Host(losses, N), RefCrossEntropy(Lg, targets, N, V), "cross-entropy");
  auto pre = Random(N * V, 51);
  float* g = Dev(pre);
  ops_->CrossEntropyBackward(g, probs, tg, dloss, N, V, V);
  auto f = [&](const Vec& v) {
    double s = 0;
    for (double l : RefCrossEntropy(v, targets, N, V)) s += dloss * l;
    return s;
  };
  ExpectGradient(f, Lg, Added(g, pre), "cross-entropy dlogits");
}

// Vocabulary padding (Vr < V): the rows of a padded table give exactly the bits of the same rows
// without the padding columns, whatever those hold (+30 here would take all the probability if
// it entered the softmax); padding probs are 0 and the backward leaves padding dlogits alone.
TEST_F(CpuOpsTest, CrossEntropyMasksPaddingColumns) {
  const int N = 6, V = 12, Vr = 9;
  const float dloss = 0.37f;
  auto real = Random(N * Vr, 50, 3.0f);
  std::vector<float> padded(N * V, 30.0f);
  for (int n = 0; n < N; ++n) std::copy_n(&real[n * Vr], Vr, &padded[n * V]);
  std::vector<int32_t> targets = {0, 8, 3, 3, 5, 1};
  int32_t* tg = DevInt(targets);
  float *losses = ops_->Alloc(N), *probs = ops_->Alloc(N * V);
  float *want_losses = ops_->Alloc(N), *want_probs = ops_->Alloc(N * Vr);
  owned_.insert(owned_.end(), {losses, probs, want_losses, want_probs});
  ops_->CrossEntropyForward(losses, probs, Dev(padded), tg, N, V, Vr);
  ops_->CrossEntropyForward(want_losses, want_probs, Dev(real), tg, N, Vr, Vr);
  ExpectForward(Host(losses, N), RefCrossEntropy(ToDouble(real), targets, N, Vr), "loss");
  const std::vector<float> got_p = Host(probs, N * V), want_p = Host(want_probs, N * Vr);
  const std::vector<float> got_l = Host(losses, N), want_l = Host(want_losses, N);
  EXPECT_EQ(0, std::memcmp(got_l.data(), want_l.data(), N * sizeof(float)));
  auto pre = Random(N * V, 51);
  std::vector<float> pre_real(N * Vr);
  for (int n = 0; n < N; ++n) std::copy_n(&pre[n * V], Vr, &pre_real[n * Vr]);
  float *g = Dev(pre), *want_g = Dev(pre_real), *zero_g = Dev(std::vector<float>(N * V, 0.0f));
  ops_->CrossEntropyBackward(g, probs, tg, dloss, N, V, Vr);
  ops_->CrossEntropyBackward(want_g, want_probs, tg, dloss, N, Vr, Vr);
  ops_->CrossEntropyBackward(zero_g, probs, tg, dloss, N, V, Vr);
  const std::vector<float> got_g = Host(g, N * V), want = Host(want_g, N * Vr);
  const std::vector<float> from_zero = Host(zero_g, N * V);
  for (int n = 0; n < N; ++n) {
    for (int v = 0; v < V; ++v) {
      const int i = n * V + v;
      if (v < Vr) {
        ASSERT_EQ(got_p[i], want_p[n * Vr + v]) << "probs[" << n << "," << v << "]";
        ASSERT_EQ(got_g[i], want[n * Vr + v]) << "dlogits[" << n << "," << v << "]";
      } else {
        ASSERT_EQ(got_p[i], 0.0f) << "padding probs[" << n << "," << v << "]";
        ASSERT_EQ(got_g[i], pre[i]) << "padding dlogits[" << n << "," << v << "]";
        ASSERT_EQ(from_zero[i], 0.0f) << "padding dlogits[" << n << "," << v << "]";
      }
    }
  }
}

TEST_F(CpuOpsTest, AdamWMatchesDoubleReference) {
  const size_t n = 32;
  auto p = Random(n, 60), g1 = Random(n, 61), g2 = Random(n, 62);
  float *dp = Dev(p), *m = ops_->Alloc(n), *v = ops_->Alloc(n);
  owned_.insert(owned_.end(), {m, v});
  AdamWParams a;
  a.lr = 1e-2f, a.weight_decay = 0.1f, a.grad_scale = 0.5f;
  Vec P = ToDouble(p), M(n, 0.0), Vv(n, 0.0);
  const std::vector<float>* grads[] = {&g1, &g2};
  for (int step = 1; step <= 2; ++step) {
    a.step = step;
    ops_->AdamW(dp, Dev(*grads[step - 1]), m, v, n, a);
    for (size_t i = 0; i < n; ++i) {
      double g = (*grads[step - 1])[i] * 0.5;
      M[i] = 0.9 * M[i] + 0.1 * g;
      Vv[i] = 0.95 * Vv[i] + 0.05 * g * g;
      double mh = M[i] / (1 - std::pow(0.9, step)), vh = Vv[i] / (1 - std::pow(0.95, step));
      P[i] -= 1e-2 * (mh / (std::sqrt(vh) + 1e-8) + 0.1 * P[i]);
    }
  }
  ExpectForward(Host(dp, n), P, "adamw params");
}

TEST_F(CpuOpsTest, ReductionsAndElementwise) {
  auto x = Random(100, 70), y = Random(100, 71);
  float *dx = Dev(x), *dy = Dev(y);
  double sum = 0, sq = 0;
  for (float v : x) sum += v, sq += double(v) * v;
  EXPECT_DOUBLE_EQ(ops_->Sum(dx, 100), sum);
  EXPECT_DOUBLE_EQ(ops_->SumSquares(dx, 100), sq);
  float* out = ops_->Alloc(100);
  owned_.push_back(out);
  ops_->ResidualForward(out, dx, dy, 100);
  ops_->Add(dx, dy, 100);
  EXPECT_EQ(0, std::memcmp(Host(out, 100).data(), Host(dx, 100).data(), 100 * sizeof(float)));
  ops_->Scale(dy, 2.0f, 100);
  EXPECT_EQ(Host(dy, 100)[7], 2.0f * y[7]);
}

// Same call, same bits: what the bitwise layout guarantees rest on.
TEST_F(CpuOpsTest, AttentionAndMatmulAreDeterministic) {
  const int B = 3, T = 64, C = 96, NH = 4;
  auto qkv = Random(B * T * 3 * C, 80), r = Random(B * T * C, 81);
  float *dq = Dev(qkv), *dr = Dev(r);
  std::vector<float> first;
  for (int rep = 0; rep < 2; ++rep) {
    float *out = ops_->Alloc(B * T * C), *att = ops_->Alloc(B * NH * T * 2);  // att: the stats
    float* g = ops_->Alloc(B * T * 3 * C);
    float* w = ops_->Alloc(3 * C * C);
    owned_.insert(owned_.end(), {out, att, g, w});
    ops_->AttentionForward(out, att, dq, nullptr, B, T, C, NH);
    ops_->AttentionBackward(g, dr, dq, att, nullptr, B, T, C, NH);
    ops_->MatmulBackwardWeight(w, nullptr, g, dr, B * T, C, 3 * C);
    std::vector<float> all = Host(out, B * T * C);
    auto gh = Host(g, B * T * 3 * C), wh = Host(w, 3 * C * C);
    all.insert(all.end(), gh.begin(), gh.end());
    all.insert(all.end(), wh.begin(), wh.end());
    if (rep == 0) {
      first = all;
    } else {
      ASSERT_EQ(0, std::memcmp(first.data(), all.data(), all.size() * sizeof(float)));
    }
  }
}

TEST(MakeOpsTest, RejectsUnknownDevices) {
  for (const char* bad : {"gpu", "cuda:x", "cuda:-1", ""}) {
    auto ops = MakeOps(bad);
    ASSERT_FALSE(ops.ok()) << bad;
    EXPECT_NE(ops.status().message().find("device"), std::string::npos) << ops.status();
  }
}

}  // namespace
}  // namespace pp::kernels
