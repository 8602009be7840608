// DnnlGemm on oneDNN 2.x (the Debian 12 package libdnnl-dev 2.6, OpenMP runtime).
#include "kernels/cpu/dnnl_gemm.h"

#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "absl/strings/str_cat.h"

namespace pp::kernels {
namespace {

using dims = dnnl::memory::dims;
using dt = dnnl::memory::data_type;

// tb, m, n, k, lda, ldb, ldc, accumulate, bias: everything a primitive depends on.
using ShapeKey = std::tuple<bool, int, int, int, int, int, int, bool, bool>;

class DnnlGemmImpl final : public DnnlGemm {
 public:
  explicit DnnlGemmImpl(Type type)
      : type_(type == Type::kBf16 ? dt::bf16 : dt::f32), engine_(dnnl::engine::kind::cpu, 0) {}

  std::string Impl() const override { return impl_; }

  // Creates one small primitive, so an unsupported type fails at start-up, not in a step.
  void Probe() {
    const Entry& e = Get(ShapeKey{true, 64, 64, 64, 64, 64, 64, false, false});
    impl_ = e.pd.impl_info_str();
  }

  void Run(bool tb, int m, int n, int k, const void* a, int lda, const void* b, int ldb,
           bool accumulate, const float* bias, float* c, int ldc) override {
    if (m == 0 || n == 0) return;
    try {
      omp_set_num_threads(1);  // this thread's OpenMP teams; the pool does the parallelism
      dnnl::stream stream(engine_);
      const Entry& e = Get(ShapeKey{tb, m, n, k, lda, ldb, ldc, accumulate, bias != nullptr});
      thread_local std::vector<char> scratch;
      const size_t scratch_bytes = e.pd.scratchpad_desc().get_size();
      if (scratch.size() < scratch_bytes) scratch.resize(scratch_bytes);
      dnnl::memory am(e.pd.src_desc(), engine_, const_cast<void*>(a));
      dnnl::memory bm(e.pd.weights_desc(), engine_, const_cast<void*>(b));
      dnnl::memory cm(e.pd.dst_desc(), engine_, c);
      dnnl::memory sm(e.pd.scratchpad_desc(), engine_, scratch.data());
      std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, am},
                                                 {DNNL_ARG_WEIGHTS, bm},
                                                 {DNNL_ARG_DST, cm},
                                                 {DNNL_ARG_SCRATCHPAD, sm}};
      if (bias != nullptr) {
        args.emplace(DNNL_ARG_BIAS,
                     dnnl::memory(e.pd.bias_desc(), engine_, const_cast<float*>(bias)));
      }
      e.prim.execute(stream, args);
      stream.wait();
    } catch (const dnnl::error& err) {
      std::fprintf(stderr, "pp::kernels onednn: matmul m=%d n=%d k=%d failed: %s\n", m, n, k,
                   err.what());
      std::abort();
    }
  }

 private:
  struct Entry {
    dnnl::matmul::primitive_desc pd;
    dnnl::matmul prim;
  };

  // The cached primitive of a shape, created on first use (throws dnnl::error when refused).
  const Entry& Get(const ShapeKey& key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    const auto [tb, m, n, k, lda, ldb, ldc, accumulate, has_bias] = key;
    // A transpose is only a stride swap: element (i, j) of op(B) is at B[j*ldb + i] when tb.
    const dnnl::memory::desc a(dims{m, k}, type_, dims{lda, 1});
    const dnnl::memory::desc b(dims{k, n}, type_, tb ? dims{1, ldb} : dims{ldb, 1});
    const dnnl::memory::desc c(dims{m, n}, dt::f32, dims{ldc, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // per-call scratch: thread-safe
    if (accumulate) {
      dnnl::post_ops ops;
      ops.append_sum(1.0f);  // dst = product + dst, the += of the Ops contract
      attr.set_post_ops(ops);
    }
    const dnnl::matmul::desc desc =
        has_bias ? dnnl::matmul::desc(a, b, dnnl::memory::desc(dims{1, n}, dt::f32, dims{n, 1}), c)
                 : dnnl::matmul::desc(a, b, c);
    dnnl::matmul::primitive_desc pd(desc, attr, engine_);
    dnnl::matmul prim(pd);
    return cache_.emplace(key, Entry{pd, prim}).first->second;
  }

  const dt type_;
  dnnl::engine engine_;
  std::string impl_;
  std::mutex mu_;
  std::map<ShapeKey, Entry> cache_;  // node-based: references stay valid as it grows
};

}  // namespace

absl::StatusOr<std::unique_ptr<DnnlGemm>> DnnlGemm::Create(Type type) {
  const char* name = type == Type::kBf16 ? "bf16" : "f32";
  try {
    auto gemm = std::make_unique<DnnlGemmImpl>(type);
    gemm->Probe();
    return std::unique_ptr<DnnlGemm>(std::move(gemm));
  } catch (const dnnl::error& err) {
    return absl::UnavailableError(
        absl::StrCat("oneDNN ", dnnl_version()->major, ".", dnnl_version()->minor, ".",
                     dnnl_version()->patch, " cannot create a ", name,
                     " matmul on this CPU: ", err.what()));
  }
}

}  // namespace pp::kernels
