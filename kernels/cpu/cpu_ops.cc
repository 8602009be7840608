#include "kernels/cpu/cpu_ops.h"

#include <cblas.h>
#include <malloc.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace pp::kernels {
namespace {

constexpr float kLayerNormEps = 1e-5f;
constexpr size_t kAlign = 64;

// Row-major sgemm shorthand: C (m,n) = alpha op(A) op(B) + beta C.
void Gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
              k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// exp(x) with Cody-Waite reduction x = n ln2 + r and the Cephes expf polynomial on r (about
// 1 ulp), written branch-free so the compiler vectorizes the loops that call it (libm's tanhf
// does not vectorize and was a quarter of a training step).
inline float ExpApprox(float x) {
  x = std::min(std::max(x, -87.0f), 88.0f);
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float n = (x * 1.44269504088896341f + kRound) - kRound;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  return y * std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
}

// tanh(u) = 1 - 2 / (exp(2u) + 1): saturates to +-1 without inf/inf.
inline float TanhApprox(float u) { return 1.0f - 2.0f / (ExpApprox(2.0f * u) + 1.0f); }

void* AlignedZeroed(size_t bytes) {
  size_t rounded = (std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, rounded);
  if (p == nullptr) std::abort();  // out of host memory: nothing sensible to return
  std::memset(p, 0, rounded);
  return p;
}

class CpuOps final : public Ops {
 public:
  std::string Name() const override { return "cpu"; }

  float* Alloc(size_t n) override { return static_cast<float*>(AlignedZeroed(n * sizeof(float))); }
  int32_t* AllocInt(size_t n) override {
    return static_cast<int32_t*>(AlignedZeroed(n * sizeof(int32_t)));
  }
  void Free(void* p) override { std::free(p); }
  void CopyToDevice(float* dst, const float* src, size_t n) override {
    std::memcpy(dst, src, n * sizeof(float));
  }
  void CopyToHost(float* dst, const float* src, size_t n) override {
    std::memcpy(dst, src, n * sizeof(float));
  }
  void CopyIntToDevice(int32_t* dst, const int32_t* src, size_t n) override {
    std::memcpy(dst, src, n * sizeof(int32_t));
  }
  void Copy(float* dst, const float* src, size_t n) override {
    std::memcpy(dst, src, n * sizeof(float));
  }
  void Zero(float* x, size_t n) override { std::memset(x, 0, n * sizeof(float)); }
  void Synchronize() override {}

  void Add(float* acc, const float* x, size_t n) override {
    for (size_t i = 0; i < n; ++i) acc[i] += x[i];
  }
  void Scale(float* x, float s, size_t n) override {
    for (size_t i = 0; i < n; ++i) x[i] *= s;
  }
  double SumSquares(const float* x, size_t n) override {
    double s = 0.0;
    for (size_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
    return s;
  }
  double Sum(const float* x, size_t n) override {
    double s = 0.0;
    for (size_t i = 0; i < n; ++i) s += x[i];
    return s;
  }
  void ResidualForward(float* out, const float* a, const float* b, size_t n) override {
    for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
  }

  void EncoderForward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                      int T, int C) override {
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t < T; ++t) {
        float* o = out + (static_cast<size_t>(b) * T + t) * C;
        const float* e = wte + static_cast<size_t>(tokens[b * T + t]) * C;
        const float* p = wpe + static_cast<size_t>(t) * C;
        for (int c = 0; c < C; ++c) o[c] = e[c] + p[c];
      }
    }
  }
  void EncoderBackward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                       int T, int C) override {
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t < T; ++t) {
        const float* d = dout + (static_cast<size_t>(b) * T + t) * C;
        float* e = dwte + static_cast<size_t>(tokens[b * T + t]) * C;
        float* p = dwpe + static_cast<size_t>(t) * C;
        for (int c = 0; c < C; ++c) e[c] += d[c];
        for (int c = 0; c < C; ++c) p[c] += d[c];
      }
    }
  }

  void LayerNormForward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                        const float* bias, int N, int C) override {
    for (int n = 0; n < N; ++n) {
      const float* x = inp + static_cast<size_t>(n) * C;
      double s = 0.0;
      for (int c = 0; c < C; ++c) s += x[c];
      float m = static_cast<float>(s / C);
      double v = 0.0;
      for (int c = 0; c < C; ++c) {
        double d = x[c] - m;
        v += d * d;
      }
      float r = 1.0f / std::sqrt(static_cast<float>(v / C) + kLayerNormEps);
      float* o = out + static_cast<size_t>(n) * C;
      for (int c = 0; c < C; ++c) o[c] = (x[c] - m) * r * weight[c] + bias[c];
      mean[n] = m;
      rstd[n] = r;
    }
  }
  // With xhat = (x - mean) rstd and g = dout * weight (per row):
  // dx = rstd (g - mean(g) - xhat mean(g xhat)).
  void LayerNormBackwardInput(float* dinp, const float* dout, const float* inp, const float* weight,
                              const float* mean, const float* rstd, int N, int C) override {
    for (int n = 0; n < N; ++n) {
      const float* x = inp + static_cast<size_t>(n) * C;
      const float* d = dout + static_cast<size_t>(n) * C;
      float* dx = dinp + static_cast<size_t>(n) * C;
      float m = mean[n], r = rstd[n];
      double g_sum = 0.0, gx_sum = 0.0;
      for (int c = 0; c < C; ++c) {
        float g = d[c] * weight[c];
        g_sum += g;
        gx_sum += static_cast<double>(g) * ((x[c] - m) * r);
      }
      float g_mean = static_cast<float>(g_sum / C), gx_mean = static_cast<float>(gx_sum / C);
      for (int c = 0; c < C; ++c) {
        float xhat = (x[c] - m) * r;
        dx[c] += r * (d[c] * weight[c] - g_mean - xhat * gx_mean);
      }
    }
  }
  void LayerNormBackwardWeight(float* dweight, float* dbias, const float* dout, const float* inp,
                               const float* mean, const float* rstd, int N, int C) override {
    for (int n = 0; n < N; ++n) {
      const float* x = inp + static_cast<size_t>(n) * C;
      const float* d = dout + static_cast<size_t>(n) * C;
      float m = mean[n], r = rstd[n];
      for (int c = 0; c < C; ++c) {
        dweight[c] += d[c] * ((x[c] - m) * r);
        dbias[c] += d[c];
      }
    }
  }

  void MatmulForward(float* out, const float* inp, const float* weight, const float* bias, int N,
                     int IC, int OC) override {
    if (bias != nullptr) {
      for (int n = 0; n < N; ++n) {
        std::memcpy(out + static_cast<size_t>(n) * OC, bias, OC * sizeof(float));
      }
    }
    Gemm(false, true, N, OC, IC, 1.0f, inp, IC, weight, IC, bias != nullptr ? 1.0f : 0.0f, out, OC);
  }
  void MatmulBackwardInput(float* dinp, const float* dout, const float* weight, int N, int IC,
                           int OC) override {
    Gemm(false, false, N, IC, OC, 1.0f, dout, OC, weight, IC, 1.0f, dinp, IC);
  }
  void MatmulBackwardWeight(float* dweight, float* dbias, const float* dout, const float* inp,
                            int N, int IC, int OC) override {
    Gemm(true, false, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dweight, IC);
    if (dbias == nullptr) return;
    for (int n = 0; n < N; ++n) {
      const float* d = dout + static_cast<size_t>(n) * OC;
      for (int o = 0; o < OC; ++o) dbias[o] += d[o];
    }
  }

  // Per (batch, head): S = Q K^T / sqrt(hs), P = causal softmax(S), out = P V, each through
  // sgemm on strided slices of qkv (row stride 3C).
  void AttentionForward(float* out, float* att, const float* qkv, int B, int T, int C,
                        int NH) override {
    const int hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < NH; ++h) {
        const float* q = qkv + static_cast<size_t>(b) * T * C3 + h * hs;
        float* p = att + (static_cast<size_t>(b) * NH + h) * T * T;
        Gemm(false, true, T, T, hs, scale, q, C3, q + C, C3, 0.0f, p, T);
        for (int t = 0; t < T; ++t) CausalSoftmaxRow(p + static_cast<size_t>(t) * T, t, T);
        Gemm(false, false, T, hs, T, 1.0f, p, T, q + 2 * C, C3, 0.0f,
             out + static_cast<size_t>(b) * T * C + h * hs, C);
      }
    }
  }
  // dP = dO V^T, dV += P^T dO, dS = P (dP - rowsum(P dP)), dQ += dS K / sqrt(hs),
  // dK += dS^T Q / sqrt(hs).
  void AttentionBackward(float* dqkv, const float* dout, const float* qkv, const float* att, int B,
                         int T, int C, int NH) override {
    const int hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
    scratch_.resize(static_cast<size_t>(T) * T);
    float* ds = scratch_.data();
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < NH; ++h) {
        const size_t qoff = static_cast<size_t>(b) * T * C3 + h * hs;
        const float* q = qkv + qoff;
        float* dq = dqkv + qoff;
        const float* p = att + (static_cast<size_t>(b) * NH + h) * T * T;
        const float* dO = dout + static_cast<size_t>(b) * T * C + h * hs;
        Gemm(false, true, T, T, hs, 1.0f, dO, C, q + 2 * C, C3, 0.0f, ds, T);
        Gemm(true, false, T, hs, T, 1.0f, p, T, dO, C, 1.0f, dq + 2 * C, C3);
        for (int t = 0; t < T; ++t) {
          const float* pr = p + static_cast<size_t>(t) * T;
          float* dr = ds + static_cast<size_t>(t) * T;
          float dot = 0.0f;
          for (int j = 0; j <= t; ++j) dot += pr[j] * dr[j];
          for (int j = 0; j <= t; ++j) dr[j] = pr[j] * (dr[j] - dot);
          for (int j = t + 1; j < T; ++j) dr[j] = 0.0f;
        }
        Gemm(false, false, T, hs, T, scale, ds, T, q + C, C3, 1.0f, dq, C3);
        Gemm(true, false, T, hs, T, scale, ds, T, q, C3, 1.0f, dq + C, C3);
      }
    }
  }

  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (Hendrycks & Gimpel, 2016).
  void GeluForward(float* out, const float* inp, size_t n) override {
    for (size_t i = 0; i < n; ++i) {
      float x = inp[i];
      out[i] = 0.5f * x * (1.0f + TanhApprox(kGeluK * (x + 0.044715f * x * x * x)));
    }
  }
  void GeluBackward(float* dinp, const float* inp, const float* dout, size_t n) override {
    for (size_t i = 0; i < n; ++i) {
      float x = inp[i];
      float th = TanhApprox(kGeluK * (x + 0.044715f * x * x * x));
      float dth = (1.0f - th * th) * kGeluK * (1.0f + 3.0f * 0.044715f * x * x);
      dinp[i] += dout[i] * (0.5f * (1.0f + th) + 0.5f * x * dth);
    }
  }

  void CrossEntropyForward(float* losses, float* probs, const float* logits, const int32_t* targets,
                           int N, int V) override {
    for (int n = 0; n < N; ++n) {
      const float* l = logits + static_cast<size_t>(n) * V;
      float* p = probs + static_cast<size_t>(n) * V;
      float mx = l[0];
      for (int v = 1; v < V; ++v) mx = std::max(mx, l[v]);
      float sum = 0.0f;
      for (int v = 0; v < V; ++v) {
        p[v] = std::exp(l[v] - mx);
        sum += p[v];
      }
      const float inv = 1.0f / sum;
      for (int v = 0; v < V; ++v) p[v] *= inv;
      losses[n] = std::log(sum) - (l[targets[n]] - mx);
    }
  }
  void CrossEntropyBackward(float* dlogits, const float* probs, const int32_t* targets, float dloss,
                            int N, int V) override {
    for (int n = 0; n < N; ++n) {
      const float* p = probs + static_cast<size_t>(n) * V;
      float* d = dlogits + static_cast<size_t>(n) * V;
      for (int v = 0; v < V; ++v) d[v] += dloss * p[v];
      d[targets[n]] -= dloss;
    }
  }

  // Loshchilov & Hutter, "Decoupled Weight Decay Regularization" (2019), with Adam's bias
  // correction: p -= lr (m_hat / (sqrt(v_hat) + eps) + wd p).
  void AdamW(float* params, const float* grads, float* m, float* v, size_t n,
             const AdamWParams& a) override {
    const float c1 = static_cast<float>(1.0 - std::pow(static_cast<double>(a.beta1), a.step));
    const float c2 = static_cast<float>(1.0 - std::pow(static_cast<double>(a.beta2), a.step));
    for (size_t i = 0; i < n; ++i) {
      float g = grads[i] * a.grad_scale;
      m[i] = a.beta1 * m[i] + (1.0f - a.beta1) * g;
      v[i] = a.beta2 * v[i] + (1.0f - a.beta2) * g * g;
      float mhat = m[i] / c1, vhat = v[i] / c2;
      params[i] -= a.lr * (mhat / (std::sqrt(vhat) + a.eps) + a.weight_decay * params[i]);
    }
  }

 private:
  static constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2/pi)

  // Softmax over row[0..t]; entries after t (the future) become 0.
  static void CausalSoftmaxRow(float* row, int t, int T) {
    float mx = row[0];
    for (int j = 1; j <= t; ++j) mx = std::max(mx, row[j]);
    float sum = 0.0f;
    for (int j = 0; j <= t; ++j) {
      row[j] = std::exp(row[j] - mx);
      sum += row[j];
    }
    const float inv = 1.0f / sum;
    for (int j = 0; j <= t; ++j) row[j] *= inv;
    for (int j = t + 1; j < T; ++j) row[j] = 0.0f;
  }

  std::vector<float> scratch_;  // (T,T) attention backward; Ops instances are not shared by threads
};

}  // namespace

std::unique_ptr<Ops> MakeCpuOps(int threads) {
  openblas_set_num_threads(threads);
  // Activations are allocated and freed every microbatch with the same sizes: keep freed memory
  // in the heap instead of returning it to the kernel, which made every step page-fault anew.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  return std::make_unique<CpuOps>();
}

}  // namespace pp::kernels
