#include "kernels/cpu/cpu_ops.h"

#include <cblas.h>
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
#include "kernels/cpu/dnnl_gemm.h"
#include "kernels/cpu/index_checks.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/vec_kernels.h"
#include "kernels/cpu/weight_copies.h"

namespace pp::kernels {
namespace {

constexpr size_t kAlign = 64;

// Row-major sgemm shorthand: C (m,n) = alpha op(A) op(B) + beta C.
void Gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
              k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// Rows (or columns) per task when a loop is split over the pool: large enough that a task
// outweighs the hand-off (a few microseconds).
constexpr int64_t kRowsPerTask = 64;
// Where a split may cut. The own kernels give every row the same bits anywhere (16: whole
// vectors). OpenBLAS does not: its micro-kernel covers a fixed number of columns of its
// column-major N (our rows), and the remainder goes to edge kernels that round differently
// (Zen's sgemm: 12 columns; Skylake-X: 16). Cutting at multiples of 48 keeps every element in
// a full-width tile of the same shape, so a GEMM split over threads gives the bits of one call.
constexpr int64_t kVecAlign = 16;
constexpr int64_t kGemmAlign = 48;
// oneDNN's products (A always as rows: PrepareTransposed, dnnl_gemm.h) sum every element
// in the same order at any row count, so their splits cut at whole vectors only: 48 gave the
// second of two threads 272 of shape (b)'s 512 rows and 528 of (c)'s 1024. The thread-count
// tests at real block shapes (cpu_parallel_test.cc) hold it to the bits of one call.
constexpr int64_t kDnnlGemmAlign = 16;
// Elements a block of SumSquares: its partial sums fix the order of the whole sum.
constexpr size_t kSumBlock = size_t{1} << 16;

// [begin, end) of part i of `parts` parts of [0, total), cut at multiples of align.
inline void Part(int64_t total, int64_t parts, int64_t i, int64_t align, int64_t* begin,
                 int64_t* end) {
  const int64_t blocks = (total + align - 1) / align;
  *begin = std::min(total, blocks * i / parts * align);
  *end = std::min(total, blocks * (i + 1) / parts * align);
}

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
  CpuOps(int threads, CpuMatmul matmul, std::unique_ptr<DnnlGemm> dnnl, const VecKernels* attention,
         std::string path)
      : pool_(threads),
        k_(VecKernelsForThisCpu()),
        attention_(attention != nullptr ? *attention : k_),
        scratch_(pool_.threads()),
        matmul_(matmul),
        dnnl_(std::move(dnnl)),
        path_(std::move(path)) {}

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
    if (p != nullptr) weights_.Forget(p, malloc_usable_size(p));
    std::free(p);
  }
  void CopyToDevice(float* dst, const float* src, size_t n) override {
    weights_.Invalidate(dst, n * sizeof(float));
    std::memcpy(dst, src, n * sizeof(float));
  }
  void CopyToHost(float* dst, const float* src, size_t n) override {
    std::memcpy(dst, src, n * sizeof(float));
  }
  void CopyIntToDevice(int32_t* dst, const int32_t* src, size_t n) override {
    std::memcpy(dst, src, n * sizeof(int32_t));
  }
  void Copy(float* dst, const float* src, size_t n) override {
    weights_.Invalidate(dst, n * sizeof(float));
    std::memcpy(dst, src, n * sizeof(float));
  }
  void Zero(float* x, size_t n) override {
    weights_.Invalidate(x, n * sizeof(float));
    std::memset(x, 0, n * sizeof(float));
  }
  void Synchronize() override {}

  void Add(float* acc, const float* x, size_t n) override {
    weights_.Invalidate(acc, n * sizeof(float));
    Split(n, [&](int64_t b, int64_t e) { k_.add(acc + b, x + b, e - b); });
  }
  void Scale(float* x, float s, size_t n) override {
    weights_.Invalidate(x, n * sizeof(float));
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
    const Operand a = Prepare(0, inp, N, IC, false), w = Weight(weight, OC, IC, false);
    SplitGemm(N, [&](int64_t b, int64_t e) {
      Product(false, true, int(e - b), OC, IC, a.Row(b), a.ld, w.Row(0), w.ld, false, bias,
              out + b * OC, OC);
    });
  }
  void MatmulBackwardInput(float* dinp, const float* dout, const float* weight, int N, int IC,
                           int OC) override {
    const Operand d = Prepare(0, dout, N, OC, false), w = Weight(weight, OC, IC, true);
    SplitGemm(N, [&](int64_t b, int64_t e) {
      Product(false, false, int(e - b), IC, OC, d.Row(b), d.ld, w.Row(0), w.ld, false, nullptr,
              dinp + b * IC, IC);
    });
  }
  // dweight rows [o0, o1) = dout[:, o0:o1]^T inp: each block sums over all N rows. dbias sums
  // the unrounded dout: it is no matrix product.
  void MatmulBackwardWeight(float* dweight, float* dbias, const float* dout, const float* inp,
                            int N, int IC, int OC) override {
    // oneDNN takes dout^T as rows (PrepareTransposed); OpenBLAS packs a transposed A itself.
    const bool rows = dnnl_ != nullptr;
    const Operand d = rows ? PrepareTransposed(0, dout, N, OC) : Prepare(0, dout, N, OC, false);
    const Operand x = Prepare(1, inp, N, IC, true);
    SplitGemm(OC, [&](int64_t b, int64_t e) {
      Product(!rows, false, int(e - b), IC, N, rows ? d.Row(b) : d.At(b), d.ld, x.Row(0), x.ld,
              true, nullptr, dweight + b * IC, IC);
      if (dbias != nullptr) k_.column_sums(dbias, dout, N, OC, int(b), int(e));
    });
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
    weights_.Invalidate(params, n * sizeof(float));
    const AdamWScalars s{
        a.lr, a.beta1, a.beta2, a.eps, a.weight_decay, a.grad_scale,
        static_cast<float>(1.0 - std::pow(static_cast<double>(a.beta1), a.step)),
        static_cast<float>(1.0 - std::pow(static_cast<double>(a.beta2), a.step))};
    // In bf16 the products' copy of a whole weight is refilled in the same pass: the next
    // product reads it without converting the parameters again.
    WeightCopies::Copy* copy =
        matmul_ == CpuMatmul::kDnnlBf16 ? weights_.Exactly(params, n) : nullptr;
    uint16_t* bits = copy != nullptr && !copy->data[0].empty()
                         ? reinterpret_cast<uint16_t*>(copy->data[0].data())
                         : nullptr;
    Split(n, [&](int64_t b, int64_t e) {
      k_.adamw(params + b, grads + b, m + b, v + b, e - b, s, bits == nullptr ? nullptr : bits + b);
    });
    if (bits != nullptr) copy->fresh[0] = true;
  }

 private:
  // fn(begin, end) over `threads` contiguous parts of [0, total), cut at multiples of align;
  // inline when the pool has one thread or the range is too small to share.
  template <typename Fn>
  void Split(size_t total, Fn&& fn, int64_t align = kVecAlign, int64_t per_task = kRowsPerTask) {
    const int64_t n = static_cast<int64_t>(total);
    const int64_t parts = std::min<int64_t>(pool_.threads(), n / per_task);
    if (parts <= 1) {
      fn(int64_t{0}, n);
      return;
    }
    pool_.Run(parts, [&](int64_t i, int) {
      int64_t b, e;
      Part(n, parts, i, align, &b, &e);
      if (b < e) fn(b, e);
    });
  }
  template <typename Fn>
  void SplitGemm(size_t total, Fn&& fn) {
    Split(total, std::forward<Fn>(fn), dnnl_ != nullptr ? kDnnlGemmAlign : kGemmAlign);
  }

  // A matrix-product operand as the product takes it: fp32 values or bf16 bits (kDnnlBf16), rows
  // ld elements apart.
  struct Operand {
    const void* data;
    size_t element_bytes;
    int ld;
    const void* At(int64_t i) const {  // element i of row 0
      return static_cast<const char*>(data) + static_cast<size_t>(i) * element_bytes;
    }
    const void* Row(int64_t r) const { return At(r * ld); }
  };
  // x (rows, cols) in the product's operand type. In bf16, x rounded into operand scratch
  // `slot` (0 or 1, the two operands of a product), split over the pool: elementwise, so the
  // same bits for every thread count. A product's untransposed B (`b_operand`) on oneDNN gets
  // rows one cache line further apart where they would be a multiple of 4 KiB apart: such rows
  // all fall into the same L1 sets, and brgemm walks a block of B's columns down its rows. The
  // MLP projection's input and weight gradients (B of 3072 columns at C=768) ran at 58-61
  // GFLOP/s against 100-134 for the step's other products, 119 padded (DNNL_VERBOSE; bench/
  // NOTES.md). The copy is made once a product, before the pool splits it; the kernel and its
  // sums are the same.
  Operand Prepare(int slot, const float* x, int rows, int cols, bool b_operand) {
    const int ld = OperandLd(cols, b_operand);
    if (!bf16() && ld == cols) return {x, sizeof(float), cols};
    return Convert(operands_[slot], x, rows, cols, ld);
  }
  // A weight (rows, cols) as Prepare makes it, converted in bf16 only when its copy is stale
  // (weight_copies.h): once per optimizer step, not once per product. The forward and the input
  // gradient read the same rows (B transposed and untransposed), so one copy serves both, except
  // where the latter's rows are padded: oneDNN takes gemm:jit for a transposed B with padded rows
  // (DNNL_VERBOSE at shape (b)) and brgemm for unpadded ones, which sum in another order, and it
  // picks between the two by shape: the forward keeps its unpadded copy.
  Operand Weight(const float* w, int rows, int cols, bool b_operand) {
    if (!bf16()) return Prepare(1, w, rows, cols, b_operand);
    const int ld = OperandLd(cols, b_operand);
    WeightCopies::Copy& copy = weights_.Find(w, rows, cols);
    const int layout = ld == cols ? 0 : 1;
    if (!copy.fresh[layout]) {
      Convert(copy.data[layout], w, rows, cols, ld);
      copy.fresh[layout] = true;
    }
    return {copy.data[layout].data(), OperandBytes(), ld};
  }
  bool bf16() const { return matmul_ != CpuMatmul::kSgemm && matmul_ != CpuMatmul::kDnnlF32; }
  size_t OperandBytes() const {
    return matmul_ == CpuMatmul::kDnnlBf16 ? sizeof(uint16_t) : sizeof(float);
  }
  // x (rows, cols) into buf as operand rows ld apart: bf16 bits, bf16-rounded floats, or (fp32)
  // a copy.
  Operand Convert(std::vector<float>& buf, const float* x, int rows, int cols, int ld) {
    void* out = Reserve(buf, size_t(rows) * ld);
    if (ld == cols) {
      Split(size_t(rows) * cols, [&](int64_t b, int64_t e) { ConvertRun(out, b, x + b, e - b); });
    } else {
      Split(rows, [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) ConvertRun(out, r * ld, x + r * cols, cols);
      });
    }
    return {out, OperandBytes(), ld};
  }
  // x (rows, cols) transposed, (cols, rows) as operand rows `rows` apart in operand scratch
  // `slot`: the weight gradient's A on oneDNN. oneDNN's own copy of a transposed A is a reorder
  // per product and row block, after Prepare's conversion in bf16; this is one pass, 16 columns
  // of x at a time transposed into scratch and converted from there as Convert does: a layer's
  // four at T = 1024, C = 768 took 5.3 against 6.7 ms in bf16, 10.0 against 14.3 in fp32
  // (bench/NOTES.md). The operand holds what that reorder made: the products keep their bits.
  Operand PrepareTransposed(int slot, const float* x, int rows, int cols) {
    void* out = Reserve(operands_[slot], size_t(cols) * rows);
    const int ldt = PaddedLd(rows, sizeof(float));  // scratch rows 4 KiB apart share L1 sets
    Split(cols, [&](int64_t b, int64_t e) {
      thread_local std::vector<float> t;
      if (t.size() < size_t(kVecAlign) * ldt) t.resize(size_t(kVecAlign) * ldt);
      for (int64_t c0 = b; c0 < e; c0 += kVecAlign) {
        const int n = int(std::min<int64_t>(kVecAlign, e - c0));
        k_.transpose(t.data(), ldt, x + c0, cols, rows, n);
        for (int i = 0; i < n; ++i) ConvertRun(out, (c0 + i) * rows, t.data() + i * ldt, rows);
      }
    });
    return {out, OperandBytes(), rows};
  }
  // buf grown to hold `elements` operand elements; its data.
  void* Reserve(std::vector<float>& buf, size_t elements) const {
    const size_t need = (elements * OperandBytes() + sizeof(float) - 1) / sizeof(float);
    if (buf.size() < need) buf.resize(need);
    return buf.data();
  }
  // x[0, len) as operand elements [to, to + len) of out.
  void ConvertRun(void* out, int64_t to, const float* x, int64_t len) const {
    if (matmul_ == CpuMatmul::kDnnlBf16) {
      k_.to_bf16(static_cast<uint16_t*>(out) + to, x, len);
    } else if (bf16()) {
      k_.round_bf16(static_cast<float*>(out) + to, x, len);
    } else {
      std::memcpy(static_cast<float*>(out) + to, x, len * sizeof(float));
    }
  }
  // Where rows of an operand of `cols` columns start: padded for a B on oneDNN (Prepare).
  int OperandLd(int cols, bool b_operand) const {
    return b_operand && dnnl_ != nullptr ? PaddedLd(cols, OperandBytes()) : cols;
  }
  static int PaddedLd(int cols, size_t element_bytes) {
    return size_t(cols) * element_bytes % 4096 == 0 ? cols + int(64 / element_bytes) : cols;
  }
  // C (m,n) = op(A) op(B) (+ C when accumulate) (+ bias (n) on every row, when not null),
  // row-major, on the backend's product. oneDNN adds the bias in its epilogue (no pass over C
  // before it); cblas_sgemm adds onto C filled with the bias. Either way each element is its
  // finished sum plus its bias, one rounding. REQUIRES: !accumulate when bias is given; !ta on
  // oneDNN.
  void Product(bool ta, bool tb, int m, int n, int k, const void* a, int lda, const void* b,
               int ldb, bool accumulate, const float* bias, float* c, int ldc) {
    if (dnnl_ != nullptr) {
      if (ta) std::abort();  // oneDNN's A comes as rows (PrepareTransposed)
      dnnl_->Run(tb, m, n, k, a, lda, b, ldb, accumulate, bias, c, ldc);
      return;
    }
    if (bias != nullptr) {
      for (int i = 0; i < m; ++i) std::memcpy(c + int64_t{i} * ldc, bias, n * sizeof(float));
    }
    Gemm(ta, tb, m, n, k, 1.0f, static_cast<const float*>(a), lda, static_cast<const float*>(b),
         ldb, accumulate || bias != nullptr ? 1.0f : 0.0f, c, ldc);
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
  const CpuMatmul matmul_;
  const std::unique_ptr<DnnlGemm> dnnl_;  // the kDnnl* paths
  const std::string path_;
  // A product's operands as Prepare made them (bf16 or rounded, padded rows), kept for the
  // backend's life at the largest product's size (the planner's memory model counts them:
  // coordinator/plan/memory.h).
  std::vector<float> operands_[2];
  // bf16: every weight's operand since its last write (Weight), kept for the backend's life (the
  // memory model counts them too).
  WeightCopies weights_;
  std::vector<double> block_sums_;  // SumSquares
};

}  // namespace

std::unique_ptr<Ops> NewCpuOps(int threads, CpuMatmul matmul, std::unique_ptr<DnnlGemm> dnnl,
                               const VecKernels* attention, std::string path) {
  return std::make_unique<CpuOps>(threads, matmul, std::move(dnnl), attention, std::move(path));
}

}  // namespace pp::kernels
