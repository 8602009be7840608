// The CPU backend's three matrix products (ops.h's Matmul ops) and the optimizer step that
// rewrites their weights, on the path cpu_ops.h picks: each product's operands in its type (fp32,
// bf16 bits, bf16-rounded floats, or B packed for AMX tiles: amx_gemm.h), rows padded where they
// would alias in cache, the weights' converted copies kept until a write (weight_copies.h), and
// the rows or columns of each product split over the pool. Part of CpuOps (cpu_ops.cc); nothing
// else includes it.
//
// Contract:
// - Forward, BackwardInput, BackwardWeight are ops.h's MatmulForward, MatmulBackwardInput and
//   MatmulBackwardWeight; AdamW is ops.h's AdamW with its scalars worked out.
// - Written(p, bytes) must be told of every other op's write to memory a caller may name as a
//   weight, and Freed of every free: the copies of weights there go stale or are dropped.
// - Bits: the same for every thread count (cuts at multiples of each product's alignment).
// - Threading: the backend's one calling thread (the pool runs the parts).
#ifndef PP_KERNELS_CPU_CPU_PRODUCTS_H_
#define PP_KERNELS_CPU_CPU_PRODUCTS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/dnnl_gemm.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/vec_kernels.h"
#include "kernels/cpu/weight_copies.h"

namespace pp::kernels {

class CpuProducts {
 public:
  // REQUIRES: dnnl set exactly for the kDnnl* paths; amx only for kDnnlBf16 where the process
  // may use AMX tiles (AmxAttentionKernels() not null). pool and k outlive this.
  CpuProducts(ThreadPool& pool, const VecKernels& k, CpuMatmul matmul,
              std::unique_ptr<DnnlGemm> dnnl, bool amx);

  void Forward(float* out, const float* inp, const float* weight, const float* bias, int N, int IC,
               int OC);
  void BackwardInput(float* dinp, const float* dout, const float* weight, int N, int IC, int OC);
  void BackwardWeight(float* dweight, float* dbias, const float* dout, const float* inp, int N,
                      int IC, int OC);
  void AdamW(float* params, const float* grads, float* m, float* v, size_t n,
             const AdamWScalars& s);

  void Written(const void* p, size_t bytes) { weights_.Invalidate(p, bytes); }
  void Freed(const void* p, size_t bytes) { weights_.Forget(p, bytes); }

 private:
  // A matrix-product operand as the product takes it: fp32 values or bf16 bits (kDnnlBf16), rows
  // ld elements apart, or a B packed for AMX tiles (amx_gemm.h).
  struct Operand {
    const void* data;
    size_t element_bytes;
    int ld;
    bool packed = false;
    const void* At(int64_t i) const {  // element i of row 0
      return static_cast<const char*>(data) + static_cast<size_t>(i) * element_bytes;
    }
    const void* Row(int64_t r) const { return At(r * ld); }
  };

  template <typename Fn>
  void SplitGemm(size_t total, Fn&& fn);
  Operand Prepare(int slot, const float* x, int rows, int cols, bool b_operand);
  Operand Weight(const float* w, int rows, int cols, bool b_operand);
  bool Amx(int n, int k) const;
  Operand Pack(std::vector<float>& buf, const float* x, int k, int n, bool transposed);
  bool PackedAdamW(WeightCopies::Copy& copy, float* params, const float* grads, float* m, float* v,
                   const AdamWScalars& s);
  bool bf16() const { return matmul_ != CpuMatmul::kSgemm && matmul_ != CpuMatmul::kDnnlF32; }
  size_t OperandBytes() const {
    return matmul_ == CpuMatmul::kDnnlBf16 ? sizeof(uint16_t) : sizeof(float);
  }
  Operand Convert(std::vector<float>& buf, const float* x, int rows, int cols, int ld);
  Operand PrepareTransposed(int slot, const float* x, int rows, int cols);
  Operand TransposedForTiles(const float* x, int rows, int cols);
  void* Reserve(std::vector<float>& buf, size_t elements) const;
  void ConvertRun(void* out, int64_t to, const float* x, int64_t len) const;
  int OperandLd(int cols, bool b_operand) const;
  void Product(bool ta, bool tb, int m, int n, int k, const void* a, int lda, const Operand& bo,
               bool accumulate, const float* bias, float* c, int ldc);

  ThreadPool& pool_;
  const VecKernels& k_;
  const CpuMatmul matmul_;
  const std::unique_ptr<DnnlGemm> dnnl_;  // the kDnnl* paths
  const bool amx_;  // kDnnlBf16 on AMX: products whose shapes fit run on amx_gemm.h
  // A product's operands as Prepare made them (bf16 or rounded, padded rows), kept for the
  // backend's life at the largest product's size (the planner's memory model counts them:
  // coordinator/plan/memory.h).
  std::vector<float> operands_[2];
  // bf16: every weight's operand since its last write (Weight), kept for the backend's life (the
  // memory model counts them too).
  WeightCopies weights_;
};

}  // namespace pp::kernels

#endif  // PP_KERNELS_CPU_CPU_PRODUCTS_H_
