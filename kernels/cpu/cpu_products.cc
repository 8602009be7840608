#include "kernels/cpu/cpu_products.h"

#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "kernels/cpu/amx_gemm.h"

namespace pp::kernels {
namespace {

// Where a product's split over the pool may cut its rows. OpenBLAS's sums depend on where: its
// micro-kernel covers a fixed number of columns of its column-major N (our rows), and the
// remainder goes to edge kernels that round differently (Zen's sgemm: 12 columns; Skylake-X:
// 16). Cutting at multiples of 48 keeps every element in a full-width tile of the same shape, so
// a GEMM split over threads gives the bits of one call.
constexpr int64_t kGemmAlign = 48;
// oneDNN's products (A always as rows: PrepareTransposed, dnnl_gemm.h) sum every element in the
// same order at any row count, so their splits cut at whole vectors only: 48 gave the second of
// two threads 272 of shape (b)'s 512 rows and 528 of (c)'s 1024. The thread-count tests at real
// block shapes (cpu_parallel_test.cc) hold it to the bits of one call. So do the AMX tiles'
// (amx_gemm.h: each row's sums are its own).
constexpr int64_t kDnnlGemmAlign = 16;
// AdamW's blocks of rows where it packs a weight for the AMX tiles in its pass (PackedAdamW):
// two tiles of columns of the forward's B, 16 pairs of rows of the input gradient's.
constexpr int kPackedAdamWRows = 32;

// Row-major sgemm shorthand: C (m,n) = alpha op(A) op(B) + beta C.
void Gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
              k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// Operands start on a cache line (Reserve): a tile's or a vector's 64-byte row then never
// straddles two lines. std::vector's memory is 16-byte aligned, so every A and B tile row of the
// AMX products touched two lines (matmul_bench: bench/NOTES.md); kSlack floats more than the
// operand's size leave room to move its start up to the next boundary.
constexpr size_t kSlack = 64 / sizeof(float);
void* Aligned(std::vector<float>& buf) {
  return reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(buf.data()) + 63) & ~uintptr_t{63});
}

int PaddedLd(int cols, size_t element_bytes) {
  return size_t(cols) * element_bytes % 4096 == 0 ? cols + int(64 / element_bytes) : cols;
}

}  // namespace

CpuProducts::CpuProducts(ThreadPool& pool, const VecKernels& k, CpuMatmul matmul,
                         std::unique_ptr<DnnlGemm> dnnl, bool amx)
    : pool_(pool), k_(k), matmul_(matmul), dnnl_(std::move(dnnl)), amx_(amx) {}

template <typename Fn>
void CpuProducts::SplitGemm(size_t total, Fn&& fn) {
  Split(pool_, total, std::forward<Fn>(fn), dnnl_ != nullptr ? kDnnlGemmAlign : kGemmAlign);
}

void CpuProducts::Forward(float* out, const float* inp, const float* weight, const float* bias,
                          int N, int IC, int OC) {
  const Operand a = Prepare(0, inp, N, IC, false), w = Weight(weight, OC, IC, false);
  SplitGemm(N, [&](int64_t b, int64_t e) {
    Product(false, true, int(e - b), OC, IC, a.Row(b), a.ld, w, false, bias, out + b * OC, OC);
  });
}

void CpuProducts::BackwardInput(float* dinp, const float* dout, const float* weight, int N, int IC,
                                int OC) {
  const Operand d = Prepare(0, dout, N, OC, false), w = Weight(weight, OC, IC, true);
  SplitGemm(N, [&](int64_t b, int64_t e) {
    Product(false, false, int(e - b), IC, OC, d.Row(b), d.ld, w, false, nullptr, dinp + b * IC, IC);
  });
}

// dweight rows [o0, o1) = dout[:, o0:o1]^T inp: each block sums over all N rows. dbias sums the
// unrounded dout: it is no matrix product.
void CpuProducts::BackwardWeight(float* dweight, float* dbias, const float* dout, const float* inp,
                                 int N, int IC, int OC) {
  // oneDNN and the AMX tiles take dout^T as rows (PrepareTransposed); OpenBLAS packs a transposed
  // A itself.
  const bool rows = dnnl_ != nullptr;
  const Operand d = Amx(IC, N) && OC % 16 == 0 ? TransposedForTiles(dout, N, OC)
                    : rows                     ? PrepareTransposed(0, dout, N, OC)
                                               : Prepare(0, dout, N, OC, false);
  const Operand x = Prepare(1, inp, N, IC, true);
  SplitGemm(OC, [&](int64_t b, int64_t e) {
    Product(!rows, false, int(e - b), IC, N, rows ? d.Row(b) : d.At(b), d.ld, x, true, nullptr,
            dweight + b * IC, IC);
    if (dbias != nullptr) k_.column_sums(dbias, dout, N, OC, int(b), int(e));
  });
}

// In bf16 the products' copy of a whole weight is refilled in the same pass: the next product
// reads it without converting the parameters again; on AMX tiles both its packings
// (PackedAdamW), else its plain bf16 copy.
void CpuProducts::AdamW(float* params, const float* grads, float* m, float* v, size_t n,
                        const AdamWScalars& s) {
  weights_.Invalidate(params, n * sizeof(float));
  WeightCopies::Copy* copy =
      matmul_ == CpuMatmul::kDnnlBf16 ? weights_.Exactly(params, n) : nullptr;
  if (copy != nullptr && amx_) {
    if (PackedAdamW(*copy, params, grads, m, v, s)) return;
    copy = nullptr;  // a layout of it is not packed: its next product remakes it
  }
  uint16_t* bits = copy != nullptr && !copy->data[0].empty()
                       ? static_cast<uint16_t*>(Aligned(copy->data[0]))
                       : nullptr;
  Split(pool_, n, [&](int64_t b, int64_t e) {
    k_.adamw(params + b, grads + b, m + b, v + b, e - b, s, bits == nullptr ? nullptr : bits + b);
  });
  if (bits != nullptr) copy->fresh[0] = true;
}

// AdamW over blocks of kPackedAdamWRows rows of the weight, each block's new bf16 bits into
// thread scratch (vec_kernels.h adamw rounds them as to_bf16 does) and packed from there, while
// in cache, into the forward's and the input gradient's layouts (Weight): the packing passes
// over the weight in memory before its next products, two fp32 reads of it, are gone. False,
// with nothing done, unless both layouts are packed ones the products made before.
bool CpuProducts::PackedAdamW(WeightCopies::Copy& copy, float* params, const float* grads, float* m,
                              float* v, const AdamWScalars& s) {
  const int rows = copy.rows, cols = copy.cols;
  if (!Amx(rows, cols) || !Amx(cols, rows) || copy.data[0].empty() || copy.data[1].empty()) {
    return false;
  }
  uint32_t* forward = static_cast<uint32_t*>(Aligned(copy.data[0]));
  uint32_t* backward = static_cast<uint32_t*>(Aligned(copy.data[1]));
  Split(
      pool_, rows / kPackedAdamWRows,
      [&](int64_t b, int64_t e) {
        thread_local std::vector<uint16_t> bits;
        bits.resize(size_t(kPackedAdamWRows) * cols);
        for (int64_t block = b; block < e; ++block) {
          const int r0 = int(block) * kPackedAdamWRows, r1 = r0 + kPackedAdamWRows;
          const size_t at = size_t(r0) * cols;
          k_.adamw(params + at, grads + at, m + at, v + at, bits.size(), s, bits.data());
          amx::PackColumns(forward, bits.data(), cols, cols, 0, cols, r0, r1);
          amx::PackRows(backward, bits.data(), cols, rows, r0, r1, 0, cols);
        }
      },
      1, 1);
  copy.fresh[0] = copy.fresh[1] = true;
  return true;
}

// x (rows, cols) in the product's operand type. In bf16, x rounded into operand scratch
// `slot` (0 or 1, the two operands of a product), split over the pool: elementwise, so the
// same bits for every thread count. A product's untransposed B (`b_operand`) on oneDNN gets
// rows one cache line further apart where they would be a multiple of 4 KiB apart: such rows
// all fall into the same L1 sets, and brgemm walks a block of B's columns down its rows. The
// MLP projection's input and weight gradients (B of 3072 columns at C=768) ran at 58-61
// GFLOP/s against 100-134 for the step's other products, 119 padded (DNNL_VERBOSE; bench/
// NOTES.md). The copy is made once a product, before the pool splits it; the kernel and its
// sums are the same.
CpuProducts::Operand CpuProducts::Prepare(int slot, const float* x, int rows, int cols,
                                          bool b_operand) {
  if (b_operand && Amx(cols, rows)) return Pack(operands_[slot], x, rows, cols, false);
  const int ld = OperandLd(cols, b_operand);
  if (!bf16() && ld == cols) return {x, sizeof(float), cols};
  return Convert(operands_[slot], x, rows, cols, ld);
}
// A weight (rows, cols) as Prepare makes it, converted in bf16 only when its copy is stale
// (weight_copies.h): once per optimizer step, not once per product. The forward and the input
// gradient read the same rows (B transposed and untransposed), so one copy serves both, except
// where the latter's rows are padded: oneDNN takes gemm:jit for a transposed B with padded rows
// (DNNL_VERBOSE at shape (b)) and brgemm for unpadded ones, which sum in another order, and it
// picks between the two by shape: the forward keeps its unpadded copy. On AMX tiles the two
// are packed apart (the forward's B is w^T, the input gradient's w): layout 0 and 1.
CpuProducts::Operand CpuProducts::Weight(const float* w, int rows, int cols, bool b_operand) {
  if (!bf16()) return Prepare(1, w, rows, cols, b_operand);
  const int k = b_operand ? rows : cols, n = b_operand ? cols : rows;
  const int ld = OperandLd(cols, b_operand);
  WeightCopies::Copy& copy = weights_.Find(w, rows, cols);
  const int layout = amx_ ? int{b_operand} : ld == cols ? 0 : 1;
  if (Amx(n, k)) {
    if (!copy.fresh[layout]) Pack(copy.data[layout], w, k, n, !b_operand);
    copy.fresh[layout] = true;
    return {Aligned(copy.data[layout]), sizeof(uint16_t), n, true};
  }
  if (!copy.fresh[layout]) {
    Convert(copy.data[layout], w, rows, cols, ld);
    copy.fresh[layout] = true;
  }
  return {Aligned(copy.data[layout]), OperandBytes(), ld};
}
// Whether a product of B (k, n) runs on AMX tiles (amx_gemm.h).
bool CpuProducts::Amx(int n, int k) const { return amx_ && amx::Fits(n, k); }
// B (k, n) packed for AMX tiles into buf, split over the pool by 16 columns: from x (k, n),
// or from x (n, k) when `transposed` (a weight in the forward).
CpuProducts::Operand CpuProducts::Pack(std::vector<float>& buf, const float* x, int k, int n,
                                       bool transposed) {
  uint32_t* out = static_cast<uint32_t*>(Reserve(buf, size_t(k) * n));
  Split(
      pool_, n / 16,
      [&](int64_t b, int64_t e) {
        const int c0 = int(b * 16), c1 = int(e * 16);
        if (transposed) {
          amx::PackColumns(out, x + size_t(c0) * k, k, k, 0, k, c0, c1);
        } else {
          amx::PackRows(out, x + c0, n, k, 0, k, c0, c1);
        }
      },
      1, 4);
  return {out, sizeof(uint16_t), n, true};
}
// x (rows, cols) into buf as operand rows ld apart: bf16 bits, bf16-rounded floats, or (fp32)
// a copy.
CpuProducts::Operand CpuProducts::Convert(std::vector<float>& buf, const float* x, int rows,
                                          int cols, int ld) {
  void* out = Reserve(buf, size_t(rows) * ld);
  if (ld == cols) {
    Split(pool_, size_t(rows) * cols,
          [&](int64_t b, int64_t e) { ConvertRun(out, b, x + b, e - b); });
  } else {
    Split(pool_, rows, [&](int64_t b, int64_t e) {
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
CpuProducts::Operand CpuProducts::PrepareTransposed(int slot, const float* x, int rows, int cols) {
  void* out = Reserve(operands_[slot], size_t(cols) * rows);
  const int ldt = PaddedLd(rows, sizeof(float));  // scratch rows 4 KiB apart share L1 sets
  Split(pool_, cols, [&](int64_t b, int64_t e) {
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
// PrepareTransposed's operand in one pass where the product runs on AMX tiles (amx_gemm.h
// TransposeToBf16: two rows' words at a time transposed, against 16 floats' then a conversion):
// the same bf16 values, so the same bits.
CpuProducts::Operand CpuProducts::TransposedForTiles(const float* x, int rows, int cols) {
  uint16_t* out = static_cast<uint16_t*>(Reserve(operands_[0], size_t(cols) * rows));
  Split(pool_, cols, [&](int64_t b, int64_t e) {
    amx::TransposeToBf16(out, rows, x, cols, rows, int(b), int(e));
  });
  return {out, sizeof(uint16_t), rows};
}

// buf grown to hold `elements` operand elements from its first 64-byte boundary on; that
// boundary (Aligned).
void* CpuProducts::Reserve(std::vector<float>& buf, size_t elements) const {
  const size_t need = (elements * OperandBytes() + sizeof(float) - 1) / sizeof(float) + kSlack;
  if (buf.size() < need) buf.resize(need);
  return Aligned(buf);
}
// x[0, len) as operand elements [to, to + len) of out.
void CpuProducts::ConvertRun(void* out, int64_t to, const float* x, int64_t len) const {
  if (matmul_ == CpuMatmul::kDnnlBf16) {
    k_.to_bf16(static_cast<uint16_t*>(out) + to, x, len);
  } else if (bf16()) {
    k_.round_bf16(static_cast<float*>(out) + to, x, len);
  } else {
    std::memcpy(static_cast<float*>(out) + to, x, len * sizeof(float));
  }
}
// Where rows of an operand of `cols` columns start: padded for a B on oneDNN (Prepare).
int CpuProducts::OperandLd(int cols, bool b_operand) const {
  return b_operand && dnnl_ != nullptr ? PaddedLd(cols, OperandBytes()) : cols;
}
// C (m,n) = op(A) op(B) (+ C when accumulate) (+ bias (n) on every row, when not null),
// row-major, on the backend's product. oneDNN adds the bias in its epilogue (no pass over C
// before it); cblas_sgemm adds onto C filled with the bias. Either way each element is its
// finished sum plus its bias, one rounding; so on AMX tiles, where B comes packed.
// REQUIRES: !accumulate when bias is given; !ta on oneDNN and AMX tiles.
void CpuProducts::Product(bool ta, bool tb, int m, int n, int k, const void* a, int lda,
                          const Operand& bo, bool accumulate, const float* bias, float* c,
                          int ldc) {
  const void* b = bo.data;
  const int ldb = bo.ld;
  if (bo.packed) {
    if (ta) std::abort();  // A comes as rows (PrepareTransposed)
    amx::Gemm(c, ldc, static_cast<const uint16_t*>(a), lda, static_cast<const uint32_t*>(b), m, n,
              k, accumulate, bias);
    return;
  }
  if (dnnl_ != nullptr) {
    if (ta) std::abort();  // oneDNN's A comes as rows (PrepareTransposed)
    dnnl_->Run(tb, m, n, k, a, lda, b, ldb, accumulate, bias, c, ldc);
    return;
  }
  if (bias != nullptr) {
    for (int i = 0; i < m; ++i) std::memcpy(c + int64_t{i} * ldc, bias, n * sizeof(float));
  }
  Gemm(ta, tb, m, n, k, 1.0f, static_cast<const float*>(a), lda, static_cast<const float*>(b), ldb,
       accumulate || bias != nullptr ? 1.0f : 0.0f, c, ldc);
}

}  // namespace pp::kernels
