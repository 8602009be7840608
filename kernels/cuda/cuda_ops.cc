// CudaOps: the Ops interface on one CUDA device (contract: kernels/cuda/cuda_ops.h). All work
// is queued on one non-blocking stream in call order; memory is stream-ordered, and the host
// waits for the stream only to hand data over, by polling an event with a deadline.
#include "kernels/cuda/cuda_ops.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kernels/cuda/device_kernels.h"
#include "kernels/cuda/sync.h"
#include "kernels/ops.h"

namespace pp::kernels {
namespace {

void Check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  std::fprintf(stderr, "pp::kernels cuda: %s failed: %s\n", what, cudaGetErrorString(err));
  std::abort();
}

void Check(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  std::fprintf(stderr, "pp::kernels cuda: %s failed: %s\n", what, cublasGetStatusString(status));
  std::abort();
}

class CudaOps final : public Ops {
 public:
  explicit CudaOps(const cuda::CudaOpsParts& parts)
      : device_(parts.device),
        stream_(parts.stream),
        blas_(parts.blas),
        done_(parts.done),
        staging_(static_cast<char*>(parts.staging)),
        bf16_(parts.bf16) {}
  // Releases without synchronising the device: the stream's queued work, the staging buffer and
  // the cuBLAS handle are waited for (with the deadline) and handed back to their pools first.
  ~CudaOps() override {
    Use();
    cuda::UnregisterCompute(stream_);
    for (Bf16Buffer& b : bf16_operands_) {
      if (b.data != nullptr) cudaFreeAsync(b.data, stream_);
    }
    const absl::Status drained =
        cuda::AwaitStream(stream_, done_, absl::Now() + cuda::kComputeWaitTimeout, nullptr);
    if (drained.ok()) {
      cuda::ReturnPinned(staging_);
      cuda::ReturnBlas(device_, blas_);
    }  // else the stream may still use them: leave both out of the pools
    cudaEventDestroy(done_);
    cudaStreamDestroy(stream_);
  }

  std::string Name() const override { return absl::StrCat("cuda:", device_); }
  std::string MatmulPath() const override {
    return bf16_ ? "bf16: cublasGemmEx, CUDA_R_16BF operands, CUBLAS_COMPUTE_32F, fp32 results"
                 : "fp32: cublasSgemm";
  }

  float* Alloc(size_t n) override { return static_cast<float*>(AllocZeroed(n * sizeof(float))); }
  float* AllocUninitialized(size_t n) override {
    return static_cast<float*>(AllocRaw(n * sizeof(float)));
  }
  int32_t* AllocInt(size_t n) override {
    return static_cast<int32_t*>(AllocZeroed(n * sizeof(int32_t)));
  }
  // Stream-ordered: the memory returns to the pool once the work queued so far is done.
  void Free(void* p) override {
    Use();
    Check(cudaFreeAsync(p, stream_), "cudaFreeAsync");
  }
  void CopyToDevice(float* dst, const float* host_src, size_t n) override {
    CopyFromHost(dst, host_src, n * sizeof(float));
  }
  void CopyIntToDevice(int32_t* dst, const int32_t* host_src, size_t n) override {
    CopyFromHost(dst, host_src, n * sizeof(int32_t));
  }
  void CopyToHost(float* host_dst, const float* src, size_t n) override {
    Use();
    const size_t bytes = n * sizeof(float);
    for (size_t done = 0; done < bytes; done += cuda::kStagingBytes) {
      const size_t chunk = std::min(cuda::kStagingBytes, bytes - done);
      Check(cudaMemcpyAsync(staging_, reinterpret_cast<const char*>(src) + done, chunk,
                            cudaMemcpyDeviceToHost, stream_),
            "cudaMemcpyAsync to host");
      WaitStream("copy to host");
      std::memcpy(reinterpret_cast<char*>(host_dst) + done, staging_, chunk);
    }
  }
  void Copy(float* dst, const float* src, size_t n) override {
    Use();
    Check(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, stream_),
          "cudaMemcpyAsync on device");
  }
  void Zero(float* x, size_t n) override {
    Use();
    Check(cudaMemsetAsync(x, 0, n * sizeof(float), stream_), "cudaMemsetAsync");
  }
  void Synchronize() override {
    Use();
    WaitStream("Synchronize");
  }

  void Add(float* acc, const float* x, size_t n) override {
    Use();
    cuda::Add(stream_, acc, x, n);
    Launched("Add");
  }
  void Scale(float* x, float s, size_t n) override {
    Use();
    cuda::Scale(stream_, x, s, n);
    Launched("Scale");
  }
  double SumSquares(const float* x, size_t n) override { return SumDouble(x, n, true); }
  double Sum(const float* x, size_t n) override { return SumDouble(x, n, false); }
  void ResidualForward(float* out, const float* a, const float* b, size_t n) override {
    Use();
    cuda::Residual(stream_, out, a, b, n);
    Launched("ResidualForward");
  }

  void EncoderForward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                      const int32_t* positions, int B, int T, int C) override {
    Use();
    cuda::EncoderForward(stream_, out, tokens, wte, wpe, positions, B, T, C);
    Launched("EncoderForward");
  }
  void EncoderBackward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                       const int32_t* positions, int B, int T, int C) override {
    Use();
    Check(cuda::EncoderBackward(stream_, dwte, dwpe, dout, tokens, positions, B, T, C),
          "EncoderBackward");
    Launched("EncoderBackward");
  }

  void LayerNormForward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                        const float* bias, int N, int C) override {
    Use();
    cuda::LayerNormForward(stream_, out, mean, rstd, inp, weight, bias, N, C);
    Launched("LayerNormForward");
  }
  // Two launches: the rows are one warp's each, and a fused kernel would save one read of res.
  void ResidualLayerNormForward(float* res, float* out, float* mean, float* rstd, const float* a,
                                const float* b, const float* weight, const float* bias, int N,
                                int C) override {
    ResidualForward(res, a, b, static_cast<size_t>(N) * C);
    LayerNormForward(out, mean, rstd, res, weight, bias, N, C);
  }
  void LayerNormBackwardInput(float* dinp, const float* dres, const float* dout, const float* inp,
                              const float* weight, const float* mean, const float* rstd, int N,
                              int C) override {
    Use();
    cuda::LayerNormBackwardInput(stream_, dinp, dres, dout, inp, weight, mean, rstd, N, C);
    Launched("LayerNormBackwardInput");
  }
  void LayerNormBackwardWeight(float* dweight, float* dbias, const float* dout, const float* inp,
                               const float* mean, const float* rstd, int N, int C) override {
    Use();
    cuda::LayerNormBackwardWeight(stream_, dweight, dbias, dout, inp, mean, rstd, N, C);
    Launched("LayerNormBackwardWeight");
  }

  // cuBLAS is column-major: a row-major (R,K) buffer is the column-major (K,R) matrix, its
  // transpose. So each row-major product below is issued as its transpose.
  // out (N,OC) = inp (N,IC) weight^T  <=>  out^T (OC,N) = weight (OC,IC) inp^T (IC,N)
  void MatmulForward(float* out, const float* inp, const float* weight, const float* bias, int N,
                     int IC, int OC) override {
    Use();
    Gemm(CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, weight, IC, inp, IC, 0.0f, out, OC, "MatmulForward");
    if (bias != nullptr) {
      cuda::AddBias(stream_, out, bias, N, OC);
      Launched("MatmulForward bias");
    }
  }
  // dinp (N,IC) = dout (N,OC) weight (OC,IC)  <=>  dinp^T (IC,N) = weight^T (IC,OC) dout^T
  void MatmulBackwardInput(float* dinp, const float* dout, const float* weight, int N, int IC,
                           int OC) override {
    Use();
    Gemm(CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, weight, IC, dout, OC, 0.0f, dinp, IC,
         "MatmulBackwardInput");
  }
  // dweight (OC,IC) += dout^T (OC,N) inp (N,IC)  <=>  dweight^T (IC,OC) += inp^T (IC,N) dout
  void MatmulBackwardWeight(float* dweight, float* dbias, const float* dout, const float* inp,
                            int N, int IC, int OC) override {
    Use();
    Gemm(CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, inp, IC, dout, OC, 1.0f, dweight, IC,
         "MatmulBackwardWeight");
    if (dbias != nullptr) {
      cuda::BiasBackward(stream_, dbias, dout, N, OC);
      Launched("MatmulBackwardWeight bias");
    }
  }

  // Attention products per batch row b, each one strided-batched call over the NH heads. Head h
  // of q, k, v is the row-major (T,hs) slice at qkv + b*T*3C + {0,C,2C} + h*hs (row stride 3C);
  // its (T,T) probabilities sit at p + (b*NH + h)*T*T in a scratch of the call from the stream's
  // pool; its out slice at out + b*T*C + h*hs (row stride C). Unlike the CPU backend, the full
  // T x T scores are multiplied, and the softmax zeroes the future and, with doc_start (ops.h),
  // the keys before each query's document.
  void AttentionForward(float* out, float* stats, const float* qkv, const int32_t* doc_start, int B,
                        int T, int C, int NH) override {
    Use();
    const Heads hd(T, C, NH);
    const size_t rows = static_cast<size_t>(B) * NH * T;
    float* p = Scratch(rows * T);
    Scores(p, qkv, B, hd, "AttentionForward scores");
    cuda::CausalSoftmax(stream_, p, stats, doc_start, rows, T, NH);
    Launched("AttentionForward softmax");
    for (int b = 0; b < B; ++b) {
      // out = P V  <=>  out^T (hs,T) = V^T P^T
      GemmBatched(CUBLAS_OP_N, CUBLAS_OP_N, hd.hs, T, T, 1.0f, hd.Qkv(qkv, b, 2), hd.c3, hd.hs,
                  hd.Att(p, b), T, hd.tt, 0.0f, hd.Out(out, b), C, hd.hs, NH,
                  "AttentionForward values");
    }
    Check(cudaFreeAsync(p, stream_), "AttentionForward scratch free");
  }
  // P again from the scores and stats, dP = dout V^T, dV += P^T dout,
  // dS = P (dP - rowsum(P dP)), dQ += scale dS K, dK += scale dS^T Q; P and dS live in
  // (B,NH,T,T) scratches of the call from the stream's pool.
  void AttentionBackward(float* dqkv, const float* dout, const float* qkv, const float* stats,
                         const int32_t* doc_start, int B, int T, int C, int NH) override {
    Use();
    const Heads hd(T, C, NH);
    const size_t rows = static_cast<size_t>(B) * NH * T;
    float* p = Scratch(rows * T);
    float* ds = Scratch(rows * T);
    Scores(p, qkv, B, hd, "AttentionBackward scores");
    cuda::CausalSoftmaxAgain(stream_, p, stats, doc_start, rows, T, NH);
    Launched("AttentionBackward probabilities");
    for (int b = 0; b < B; ++b) {
      const float* dy = hd.Out(dout, b);
      // dP^T (T,T) = V dout^T
      GemmBatched(CUBLAS_OP_T, CUBLAS_OP_N, T, T, hd.hs, 1.0f, hd.Qkv(qkv, b, 2), hd.c3, hd.hs,
                  dy, C, hd.hs, 0.0f, hd.Att(ds, b), T, hd.tt, NH, "AttentionBackward dP");
      // dV^T (hs,T) = dout^T P
      GemmBatched(CUBLAS_OP_N, CUBLAS_OP_T, hd.hs, T, T, 1.0f, dy, C, hd.hs, hd.Att(p, b), T, hd.tt,
                  0.0f, hd.Qkv(dqkv, b, 2), hd.c3, hd.hs, NH, "AttentionBackward dV");
    }
    cuda::CausalSoftmaxBackward(stream_, ds, p, doc_start, rows, T, NH);
    Launched("AttentionBackward softmax");
    for (int b = 0; b < B; ++b) {
      // dQ^T (hs,T) = scale K^T dS^T
      GemmBatched(CUBLAS_OP_N, CUBLAS_OP_N, hd.hs, T, T, hd.scale, hd.Qkv(qkv, b, 1), hd.c3, hd.hs,
                  hd.Att(ds, b), T, hd.tt, 0.0f, hd.Qkv(dqkv, b, 0), hd.c3, hd.hs, NH,
                  "AttentionBackward dQ");
      // dK^T (hs,T) = scale Q^T dS
      GemmBatched(CUBLAS_OP_N, CUBLAS_OP_T, hd.hs, T, T, hd.scale, hd.Qkv(qkv, b, 0), hd.c3, hd.hs,
                  hd.Att(ds, b), T, hd.tt, 0.0f, hd.Qkv(dqkv, b, 1), hd.c3, hd.hs, NH,
                  "AttentionBackward dK");
    }
    Check(cudaFreeAsync(ds, stream_), "AttentionBackward dS free");
    Check(cudaFreeAsync(p, stream_), "AttentionBackward probabilities free");
  }

  void GeluForward(float* out, const float* inp, size_t n) override {
    Use();
    cuda::GeluForward(stream_, out, inp, n);
    Launched("GeluForward");
  }
  void GeluBackward(float* dinp, const float* inp, const float* dout, size_t n) override {
    Use();
    cuda::GeluBackward(stream_, dinp, inp, dout, n);
    Launched("GeluBackward");
  }

  void CrossEntropyForward(float* losses, float* probs, const float* logits, const int32_t* targets,
                           int N, int V, int Vr) override {
    Use();
    cuda::CrossEntropyForward(stream_, losses, probs, logits, targets, N, V, Vr);
    Launched("CrossEntropyForward");
  }
  void CrossEntropyBackward(float* dlogits, const float* probs, const int32_t* targets, float dloss,
                            int N, int V, int Vr) override {
    Use();
    cuda::CrossEntropyBackward(stream_, dlogits, probs, targets, dloss, N, V, Vr);
    Launched("CrossEntropyBackward");
  }

  void AdamW(float* params, const float* grads, float* m, float* v, size_t n,
             const AdamWParams& p) override {
    Use();
    // bias corrections as the CPU backend forms them: in double, then rounded
    const auto correction = [&](float beta) {
      return static_cast<float>(1.0 - std::pow(static_cast<double>(beta), p.step));
    };
    const cuda::AdamWStep s{p.lr,
                            p.beta1,
                            p.beta2,
                            p.eps,
                            p.weight_decay,
                            p.grad_scale,
                            correction(p.beta1),
                            correction(p.beta2)};
    cuda::AdamW(stream_, params, grads, m, v, n, s);
    Launched("AdamW");
  }

 private:
  // The current device is per host thread; callers may use one Ops from any thread.
  void Use() const { Check(cudaSetDevice(device_), "cudaSetDevice"); }

  // Launch errors (bad configuration, missing kernel image) surface here, without a sync.
  void Launched(const char* op) const { Check(cudaGetLastError(), op); }

  // Waits, with the deadline, for the work queued so far on the stream.
  void WaitStream(const char* what) const {
    const absl::Status s =
        cuda::AwaitStream(stream_, done_, absl::Now() + cuda::kComputeWaitTimeout, nullptr);
    if (s.ok()) return;
    std::fprintf(stderr, "pp::kernels cuda:%d: waiting for the stream (%s) failed: %s\n", device_,
                 what, std::string(s.message()).c_str());
    std::abort();
  }

  // Stream-ordered from the device's pool: no device-wide synchronisation (cudaMalloc has one,
  // which would wait for a NCCL kernel spinning on a peer). Usable by the work queued after it
  // on this stream, and by NCCL, whose streams are ordered after this one (sync.h).
  void* AllocRaw(size_t bytes) {
    Use();
    void* p = nullptr;
    const cudaError_t err = cudaMallocAsync(&p, bytes, stream_);
    if (err != cudaSuccess) {
      std::fprintf(stderr,
                   "pp::kernels cuda: cudaMallocAsync of %zu bytes on cuda:%d failed: %s\n",
                   bytes, device_, cudaGetErrorString(err));
      std::abort();
    }
    return p;
  }
  void* AllocZeroed(size_t bytes) {
    void* p = AllocRaw(bytes);
    Check(cudaMemsetAsync(p, 0, bytes, stream_), "cudaMemsetAsync after cudaMallocAsync");
    return p;
  }

  // Through the staging buffer: a copy from pageable memory may block the host without a
  // deadline. Waits for each chunk, so the host buffer may be reused on return.
  void CopyFromHost(void* dst, const void* host_src, size_t bytes) {
    Use();
    for (size_t done = 0; done < bytes; done += cuda::kStagingBytes) {
      const size_t chunk = std::min(cuda::kStagingBytes, bytes - done);
      std::memcpy(staging_, static_cast<const char*>(host_src) + done, chunk);
      Check(cudaMemcpyAsync(static_cast<char*>(dst) + done, staging_, chunk,
                            cudaMemcpyHostToDevice, stream_),
            "cudaMemcpyAsync to device");
      WaitStream("copy to device");
    }
  }

  double SumDouble(const float* x, size_t n, bool square) {
    Use();
    double* result = reinterpret_cast<double*>(staging_);  // page-locked, 8-byte aligned
    Check(cuda::SumDouble(stream_, x, n, square, result), square ? "SumSquares" : "Sum");
    WaitStream(square ? "SumSquares" : "Sum");
    return *result;
  }

  // Column-major C (m,n) = op(A) op(B) + beta C. In bf16 the operands are converted first
  // (A holds lda columns of length k, or of m when transposed; likewise B) and the product sums
  // in fp32 into the fp32 C.
  void Gemm(cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k, const float* a,
            int lda, const float* b, int ldb, float beta, float* c, int ldc, const char* what) {
    if (m == 0 || n == 0) return;
    const float alpha = 1.0f;
    if (!bf16_) {
      Check(cublasSgemm(blas_, op_a, op_b, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc), what);
      return;
    }
    const size_t na = size_t(lda) * size_t(op_a == CUBLAS_OP_N ? k : m);
    const size_t nb = size_t(ldb) * size_t(op_b == CUBLAS_OP_N ? n : k);
    uint16_t* a16 = Bf16Operand(0, a, na);
    uint16_t* b16 = Bf16Operand(1, b, nb);
    Check(cublasGemmEx(blas_, op_a, op_b, m, n, k, &alpha, a16, CUDA_R_16BF, lda, b16,
                       CUDA_R_16BF, ldb, &beta, c, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT),
          what);
  }
  // x (n) as bf16 in operand buffer `slot`, grown from the stream-ordered pool when too small;
  // the buffer is reused by the next product on the same stream, after this one.
  uint16_t* Bf16Operand(int slot, const float* x, size_t n) {
    Bf16Buffer& buf = bf16_operands_[slot];
    if (buf.capacity < n) {
      if (buf.data != nullptr) Check(cudaFreeAsync(buf.data, stream_), "cudaFreeAsync bf16");
      void* p = nullptr;
      Check(cudaMallocAsync(&p, n * sizeof(uint16_t), stream_), "cudaMallocAsync bf16");
      buf.data = static_cast<uint16_t*>(p);
      buf.capacity = n;
    }
    cuda::ToBf16(stream_, buf.data, x, n);
    Launched("ToBf16");
    return buf.data;
  }
  // The same for `batch` products whose operands lie stride_* floats apart
  void GemmBatched(cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k,
                   float alpha, const float* a, int lda, long long stride_a, const float* b,
                   int ldb, long long stride_b, float beta, float* c, int ldc, long long stride_c,
                   int batch, const char* what) {
    if (m == 0 || n == 0 || batch == 0) return;
    Check(cublasSgemmStridedBatched(blas_, op_a, op_b, m, n, k, &alpha, a, lda, stride_a, b, ldb,
                                    stride_b, &beta, c, ldc, stride_c, batch),
          what);
  }

  float* Scratch(size_t floats) { return static_cast<float*>(AllocRaw(floats * sizeof(float))); }

  // Where the heads of batch row b live (see AttentionForward).
  struct Heads {
    Heads(int T, int C, int NH)
        : T(T), C(C), hs(C / NH), c3(3 * C), tt(static_cast<long long>(T) * T), nh(NH),
          scale(1.0f / std::sqrt(static_cast<float>(C / NH))) {}
    // part 0, 1, 2: q, k, v (or their gradients) of head 0
    template <typename F>
    F* Qkv(F* qkv, int b, int part) const {
      return qkv + static_cast<size_t>(b) * T * c3 + static_cast<size_t>(part) * C;
    }
    template <typename F>
    F* Out(F* out, int b) const {
      return out + static_cast<size_t>(b) * T * C;
    }
    template <typename F>
    F* Att(F* att, int b) const {
      return att + static_cast<size_t>(b) * nh * tt;
    }
    int T, C, hs, c3;
    long long tt;
    int nh;
    float scale;
  };

  // p (B,NH,T,T) = scale Q K^T for every head  <=>  S^T (T,T) = K Q^T
  void Scores(float* p, const float* qkv, int B, const Heads& hd, const char* what) {
    for (int b = 0; b < B; ++b) {
      GemmBatched(CUBLAS_OP_T, CUBLAS_OP_N, hd.T, hd.T, hd.hs, hd.scale, hd.Qkv(qkv, b, 1), hd.c3,
                  hd.hs, hd.Qkv(qkv, b, 0), hd.c3, hd.hs, 0.0f, hd.Att(p, b), hd.T, hd.tt, hd.nh,
                  what);
    }
  }

  const int device_;
  const cudaStream_t stream_;
  const cublasHandle_t blas_;
  const cudaEvent_t done_;  // re-recorded by each host wait
  char* const staging_;     // cuda::kStagingBytes page-locked bytes
  const bool bf16_;  // train.precision bf16: the three Matmul ops on bf16 operands
  struct Bf16Buffer {
    uint16_t* data = nullptr;
    size_t capacity = 0;  // elements
  };
  Bf16Buffer bf16_operands_[2];  // A and B of Gemm
};

}  // namespace
}  // namespace pp::kernels

namespace pp::kernels::cuda {

std::unique_ptr<Ops> NewCudaOps(const CudaOpsParts& parts) {
  return std::make_unique<CudaOps>(parts);
}

}  // namespace pp::kernels::cuda
