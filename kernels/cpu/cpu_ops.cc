#include "kernels/cpu/cpu_ops.h"

#include <malloc.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_ops_internal.h"
#include "kernels/cpu/cpu_products.h"
#include "kernels/cpu/dnnl_gemm.h"
#include "kernels/cpu/index_checks.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/vec_kernels.h"

namespace pp::kernels {
namespace {

constexpr size_t kAlign = 64;

// Elements a block of SumSquares: its partial sums fix the order of the whole sum.
constexpr size_t kSumBlock = size_t{1} << 16;

void* Aligned(size_t bytes) {
  size_t rounded = (std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, rounded);
  if (p == nullptr) std::abort();  // out of host memory: nothing sensible to return
  return p;
}

void* AlignedZeroed(size_t bytes) {
  void* p = Aligned(bytes);
  std::memset(p, 0, bytes);
  return p;
}


// Every loop of a step either calls sgemm on a block of rows or columns, or a VecKernels
// function on a range; with threads > 1 the ranges go to the pool (thread_pool.h) and OpenBLAS
// itself stays single-threaded, so the process never runs more threads than `threads`.
class CpuOps final : public Ops {
 public:
  CpuOps(int threads, CpuMatmul matmul, std::unique_ptr<DnnlGemm> dnnl, bool amx,
         const VecKernels* attention, std::string path)
      : pool_(threads),
        k_(VecKernelsForThisCpu()),
        attention_(attention != nullptr ? *attention : k_),
        scratch_(pool_.threads()),
        path_(std::move(path)),
        products_(pool_, k_, matmul, std::move(dnnl), amx) {}

  std::string Name() const override { return "cpu"; }
  std::string MatmulPath() const override { return path_; }

  float* Alloc(size_t n) override { return static_cast<float*>(AlignedZeroed(n * sizeof(float))); }
  float* AllocUninitialized(size_t n) override {
    return static_cast<float*>(Aligned(n * sizeof(float)));
  }
  int32_t* AllocInt(size_t n) override {
    return static_cast<int32_t*>(AlignedZeroed(n * sizeof(int32_t)));
  }
  void Free(void* p) override {
    if (p != nullptr) products_.Freed(p, malloc_usable_size(p));
    std::free(p);
  }
  void CopyToDevice(float* dst, const float* src, size_t n) override {
    products_.Written(dst, n * sizeof(float));
    std::memcpy(dst, src, n * sizeof(float));
  }
  void CopyToHost(float* dst, const float* src, size_t n) override {
    std::memcpy(dst, src, n * sizeof(float));
  }
  void CopyIntToDevice(int32_t* dst, const int32_t* src, size_t n) override {
    std::memcpy(dst, src, n * sizeof(int32_t));
  }
  void Copy(float* dst, const float* src, size_t n) override {
    products_.Written(dst, n * sizeof(float));
    std::memcpy(dst, src, n * sizeof(float));
  }
  void Zero(float* x, size_t n) override {
    products_.Written(x, n * sizeof(float));
    std::memset(x, 0, n * sizeof(float));
  }
  void Synchronize() override {}

  void Add(float* acc, const float* x, size_t n) override {
    products_.Written(acc, n * sizeof(float));
    Split(n, [&](int64_t b, int64_t e) { k_.add(acc + b, x + b, e - b); });
  }
  void Scale(float* x, float s, size_t n) override {
    products_.Written(x, n * sizeof(float));
    for (size_t i = 0; i < n; ++i) x[i] *= s;
  }
  // Blocks of kSumBlock elements, each summed by one thread (vec_kernels.h sum_squares), then
  // the blocks' sums in ascending order: the same bits for every thread count.
  double SumSquares(const float* x, size_t n) override {
    const int64_t blocks = static_cast<int64_t>((n + kSumBlock - 1) / kSumBlock);
    block_sums_.assign(blocks, 0.0);
    Split(
        blocks,
        [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) {
            const size_t lo = i * kSumBlock, len = std::min(kSumBlock, n - lo);
            block_sums_[i] = k_.sum_squares(x + lo, len);
          }
        },
        1, 1);
    double s = 0.0;
    for (double b : block_sums_) s += b;
    return s;
  }
  double Sum(const float* x, size_t n) override {
    double s = 0.0;
    for (size_t i = 0; i < n; ++i) s += x[i];
    return s;
  }
  void ResidualForward(float* out, const float* a, const float* b, size_t n) override {
    Split(n, [&](int64_t lo, int64_t hi) { k_.residual(out + lo, a + lo, b + lo, hi - lo); });
  }

  void EncoderForward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                      const int32_t* positions, int B, int T, int C) override {
    CheckPositions(positions, B, T, "EncoderForward");
    for (int64_t bt = 0; bt < int64_t{B} * T; ++bt) {
      float* o = out + bt * C;
      const float* e = wte + static_cast<size_t>(tokens[bt]) * C;
      const float* p = wpe + static_cast<size_t>(Position(positions, bt, T)) * C;
      for (int c = 0; c < C; ++c) o[c] = e[c] + p[c];
    }
  }
  // One pass in ascending b*T + t, each dout row added to its token's and its position's row:
  // the order ops.h promises.
  void EncoderBackward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                       const int32_t* positions, int B, int T, int C) override {
    CheckPositions(positions, B, T, "EncoderBackward");
    for (int64_t bt = 0; bt < int64_t{B} * T; ++bt) {
      const float* d = dout + bt * C;
      float* e = dwte + static_cast<size_t>(tokens[bt]) * C;
      float* p = dwpe + static_cast<size_t>(Position(positions, bt, T)) * C;
      for (int c = 0; c < C; ++c) e[c] += d[c];
      for (int c = 0; c < C; ++c) p[c] += d[c];
    }
  }

  void LayerNormForward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                        const float* bias, int N, int C) override {
    Split(N, [&](int64_t b, int64_t e) {
      k_.layernorm_forward(out, mean, rstd, inp, weight, bias, b, e, C);
    });
  }
  void ResidualLayerNormForward(float* res, float* out, float* mean, float* rstd, const float* a,
                                const float* b, const float* weight, const float* bias, int N,
                                int C) override {
    Split(N, [&](int64_t lo, int64_t hi) {
      k_.residual_layernorm_forward(res, out, mean, rstd, a, b, weight, bias, lo, hi, C);
    });
  }
  void LayerNormBackwardInput(float* dinp, const float* dres, const float* dout, const float* inp,
                              const float* weight, const float* mean, const float* rstd, int N,
                              int C) override {
    Split(N, [&](int64_t b, int64_t e) {
      k_.layernorm_backward_input(dinp, dres, dout, inp, weight, mean, rstd, b, e, C);
    });
  }
  void LayerNormBackwardWeight(float* dweight, float* dbias, const float* dout, const float* inp,
                               const float* mean, const float* rstd, int N, int C) override {
    Split(C, [&](int64_t b, int64_t e) {
      k_.layernorm_backward_weight(dweight, dbias, dout, inp, mean, rstd, N, C, int(b), int(e));
    });
  }

  void MatmulForward(float* out, const float* inp, const float* weight, const float* bias, int N,
                     int IC, int OC) override {
    products_.Forward(out, inp, weight, bias, N, IC, OC);
  }
  void MatmulBackwardInput(float* dinp, const float* dout, const float* weight, int N, int IC,
                           int OC) override {
    products_.BackwardInput(dinp, dout, weight, N, IC, OC);
  }
  void MatmulBackwardWeight(float* dweight, float* dbias, const float* dout, const float* inp,
                            int N, int IC, int OC) override {
    products_.BackwardWeight(dweight, dbias, dout, inp, N, IC, OC);
  }

  // One task per (batch, head); every head writes its own slices of out, stats and dqkv.
  void AttentionForward(float* out, float* stats, const float* qkv, const int32_t* doc_start, int B,
                        int T, int C, int NH) override {
    const int hs = C / NH;
    CheckDocStarts(doc_start, B, T, "AttentionForward");
    EnsureAttentionScratch(T, hs);
    pool_.Run(int64_t(B) * NH, [&](int64_t i, int worker) {
      const int64_t b = i / NH, h = i % NH;
      const HeadView head{qkv + b * T * 3 * C + h * hs, T, C, hs, RowStarts(doc_start, b, T)};
      attention_.attention_forward(out + b * T * C + h * hs, stats + i * T * 2, head,
                                   scratch_[worker].data());
    });
  }
  void AttentionBackward(float* dqkv, const float* dout, const float* qkv, const float* stats,
                         const int32_t* doc_start, int B, int T, int C, int NH) override {
    const int hs = C / NH;
    CheckDocStarts(doc_start, B, T, "AttentionBackward");
    EnsureAttentionScratch(T, hs);
    pool_.Run(int64_t(B) * NH, [&](int64_t i, int worker) {
      const int64_t b = i / NH, h = i % NH;
      const int64_t qoff = b * T * 3 * C + h * hs;
      const HeadView head{qkv + qoff, T, C, hs, RowStarts(doc_start, b, T)};
      attention_.attention_backward(dqkv + qoff, dout + b * T * C + h * hs, stats + i * T * 2, head,
                                    scratch_[worker].data());
    });
  }

  void GeluForward(float* out, const float* inp, size_t n) override {
    Split(n, [&](int64_t b, int64_t e) { k_.gelu_forward(out + b, inp + b, e - b); });
  }
  void GeluBackward(float* dinp, const float* inp, const float* dout, size_t n) override {
    Split(n, [&](int64_t b, int64_t e) { k_.gelu_backward(dinp + b, inp + b, dout + b, e - b); });
  }

  void CrossEntropyForward(float* losses, float* probs, const float* logits, const int32_t* targets,
                           int N, int V, int Vr) override {
    Split(N, [&](int64_t b, int64_t e) {
      k_.cross_entropy_forward(losses, probs, logits, targets, b, e, V, Vr);
    });
  }
  void CrossEntropyBackward(float* dlogits, const float* probs, const int32_t* targets, float dloss,
                            int N, int V, int Vr) override {
    for (int n = 0; n < N; ++n) {
      const float* p = probs + static_cast<size_t>(n) * V;
      float* d = dlogits + static_cast<size_t>(n) * V;
      for (int v = 0; v < Vr; ++v) d[v] += dloss * p[v];
      d[targets[n]] -= dloss;
    }
  }

  void AdamW(float* params, const float* grads, float* m, float* v, size_t n,
             const AdamWParams& a) override {
    const AdamWScalars s{
        a.lr, a.beta1, a.beta2, a.eps, a.weight_decay, a.grad_scale,
        static_cast<float>(1.0 - std::pow(static_cast<double>(a.beta1), a.step)),
        static_cast<float>(1.0 - std::pow(static_cast<double>(a.beta2), a.step))};
    products_.AdamW(params, grads, m, v, n, s);
  }

 private:
  // kernels/cpu/thread_pool.h Split on this backend's pool.
  template <typename Fn>
  void Split(size_t total, Fn&& fn, int64_t align = kVecAlign, int64_t per_task = kRowsPerTask) {
    kernels::Split(pool_, int64_t(total), std::forward<Fn>(fn), align, per_task);
  }

  void EnsureAttentionScratch(int T, int hs) {
    const size_t need = attention_.attention_scratch_floats(T, hs);
    for (std::vector<float>& s : scratch_) {
      if (s.size() < need) s.resize(need);
    }
  }

  ThreadPool pool_;
  const VecKernels& k_;
  const VecKernels& attention_;              // k_, or Bf16AttentionKernels() (cpu_ops_make.cc)
  std::vector<std::vector<float>> scratch_;  // per pool thread: attention tiles
  const std::string path_;
  CpuProducts products_;            // the three Matmul ops and AdamW
  std::vector<double> block_sums_;  // SumSquares
};

}  // namespace

std::unique_ptr<Ops> NewCpuOps(int threads, CpuMatmul matmul, std::unique_ptr<DnnlGemm> dnnl,
                               bool amx, const VecKernels* attention, std::string path) {
  return std::make_unique<CpuOps>(threads, matmul, std::move(dnnl), amx, attention,
                                  std::move(path));
}

}  // namespace pp::kernels
