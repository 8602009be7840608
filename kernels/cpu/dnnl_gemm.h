// Row-major matrix products on oneDNN's matmul primitive, for the CPU backend's bf16 fast path
// (kernels/cpu/cpu_products.cc). The operand type is a parameter so the same plumbing (strides for a
// transposed B, the sum post-op for +=, the primitive cache) also runs in f32, where any x86 CPU
// can create the primitive and the result can be checked against OpenBLAS.
//
// Contract:
// - Create fails (Unavailable, with oneDNN's words) when the build has no oneDNN or this CPU's
//   oneDNN cannot create a matmul of that operand type (bf16 needs avx512_core_bf16 or AMX).
// - Run is thread-safe: primitives are cached per shape under a mutex, and every call brings its
//   own stream and scratchpad, so pool threads may run disjoint row blocks at once. Each call
//   runs on the calling thread only (OpenMP limited to 1 thread) so the process never runs more
//   threads than the CPU backend's pool.
// - A shape the probe's primitive accepted but oneDNN refuses at Run aborts with a message
//   naming it: the backend's ops have no error path (as a failed CUDA launch).
#ifndef PP_KERNELS_CPU_DNNL_GEMM_H_
#define PP_KERNELS_CPU_DNNL_GEMM_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace pp::kernels {

class DnnlGemm {
 public:
  enum class Type { kF32, kBf16 };  // of A and B; C is always f32

  static absl::StatusOr<std::unique_ptr<DnnlGemm>> Create(Type type);
  virtual ~DnnlGemm() = default;

  // oneDNN's name of the implementation the probe got, e.g. "brg:avx512_core_amx_bf16".
  virtual std::string Impl() const = 0;
  // C (m,n) = A op(B) (+ C when accumulate) (+ bias broadcast over rows, when not null),
  // row-major with leading dimensions lda, ldb, ldc; A is (m,k); op(B) is (k,n), B is stored
  // (n,k) when tb. A and B hold elements of the Create type (float or uint16_t bf16 bits); bias
  // (n) is f32, added to each finished sum in the product's epilogue. No transposed A: oneDNN
  // 2.6 picks brgemm for some m and gemm:jit for others, which sum in different orders, so a
  // product split into row blocks would not give the bits of one call; A as rows takes the same
  // brgemm kernel at every m (the caller transposes: cpu_products.cc PrepareTransposed).
  virtual void Run(bool tb, int m, int n, int k, const void* a, int lda, const void* b, int ldb,
                   bool accumulate, const float* bias, float* c, int ldc) = 0;
};

}  // namespace pp::kernels

#endif  // PP_KERNELS_CPU_DNNL_GEMM_H_
