// Which matmul path the CPU backend takes on this CPU (cpu_ops.h), and the process settings
// every path needs.
#include <cblas.h>
#include <malloc.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/cpu_ops_internal.h"
#include "kernels/cpu/dnnl_gemm.h"
#include "kernels/cpu/vec_kernels.h"

namespace pp::kernels {
namespace {

void ConfigureProcess() {
  // The pool runs the parallel loops, sgemm included (one row block per thread): OpenBLAS's own
  // threads would spin beside the pool's and oversubscribe the cores.
  openblas_set_num_threads(1);
  // Activations are allocated and freed every microbatch with the same sizes: keep freed memory
  // in the heap instead of returning it to the kernel, which made every step page-fault anew.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

bool EnvIsOne(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && std::string(value) == "1";
}

// The fallback's words, after "bf16: fallback, ": its fp32 product named as in fp32's path.
std::string FallbackWhat(absl::string_view fp32_product) {
  return absl::StrCat("operands rounded to bf16 in fp32 buffers, fp32 ", fp32_product,
                      " (exact bf16 products, fp32 sums)");
}

bool IntelCpu() {
#if defined(__x86_64__) && defined(__GNUC__)
  return __builtin_cpu_is("intel");
#else
  return false;
#endif
}

// The table whose attention runs its tile products in bf16 (vec_attention_bf16.inc), or null for
// this CPU's fp32 attention. Taken with oneDNN's bf16 products: on AMX tiles wherever the CPU
// has them (scores, weighted rows, dK and dV on TDPBF16PS: attention_bench at T = 1024, 1.2-1.7x
// the fp32 code on an Emerald Rapids; fp32's code below kAmxAttentionMinSeq), else on AVX512-BF16
// where the CPU is not made by Intel: Zen 4 runs vdpbf16ps, two products a lane, at the rate of an
// fp32 FMA, while Intel cores run it at half the FMA's (bench/NOTES.md). PP_BF16_ATTENTION=1 takes
// AVX512-BF16 also on Intel where AMX is absent, =0 never takes either. It reads only the CPU and
// the environment, so every process of a machine computes the same bits.
const VecKernels* Bf16Attention() {
  const char* env = std::getenv(kBf16AttentionEnv);
  const std::string want = env != nullptr ? env : "";
  if (want == "0") return nullptr;
  if (const VecKernels* amx = AmxAttentionKernels()) return amx;
  if (want != "1" && IntelCpu()) return nullptr;
  return Bf16AttentionKernels();
}

// Whether bf16's products run on amx_gemm.h where their shapes fit: wherever the process may use
// AMX tiles, unless PP_BF16_AMX_PRODUCTS is 0. It reads only the CPU and the environment, so
// every process of a machine computes the same bits.
bool AmxProducts() {
  const char* env = std::getenv(kAmxProductsEnv);
  return AmxAttentionKernels() != nullptr && !(env != nullptr && std::string(env) == "0");
}

// The backend on `matmul` with `dnnl` (set exactly for the kDnnl* paths), its path named, and
// for a fallback `why`.
std::unique_ptr<Ops> Build(int threads, CpuMatmul matmul, std::unique_ptr<DnnlGemm> dnnl,
                           absl::string_view why = "") {
  ConfigureProcess();
  std::string path = "fp32: OpenBLAS sgemm";
  if (dnnl != nullptr) {
    const std::string product = absl::StrCat("oneDNN matmul (", dnnl->Impl(), ")");
    path = matmul == CpuMatmul::kDnnlF32Bf16
               ? absl::StrCat("bf16: fallback, ", FallbackWhat(product))
               : absl::StrCat(matmul == CpuMatmul::kDnnlBf16 ? "bf16" : "fp32", ": ", product);
  } else if (matmul == CpuMatmul::kSgemmBf16) {
    path = absl::StrCat("bf16: fallback, ", FallbackWhat("OpenBLAS sgemm"));
  }
  if (!why.empty()) absl::StrAppend(&path, ", because ", why);
  const VecKernels* attention = matmul == CpuMatmul::kDnnlBf16 ? Bf16Attention() : nullptr;
  const bool amx = matmul == CpuMatmul::kDnnlBf16 && AmxProducts();
  if (amx) absl::StrAppend(&path, kAmxProductsPath);
  if (attention != nullptr) {
    absl::StrAppend(&path, "; attention: bf16 tiles (",
                    attention == AmxAttentionKernels()
                        ? absl::StrCat("AMX, from T = ", kAmxAttentionMinSeq)
                        : std::string("AVX512-BF16"),
                    ")");
  }
  return NewCpuOps(std::max(1, threads), matmul, std::move(dnnl), amx, attention, std::move(path));
}

// oneDNN's f32 matmul where fp32 products run on it, else null. They do where it is an AVX-512
// brgemm: on such CPUs it is 1.5-1.9x OpenBLAS 0.3.21 on a step's shapes (bench/NOTES.md
// "Speed"), and the choice depends only on the CPU, so every process of a machine computes the
// same bits.
std::unique_ptr<DnnlGemm> Fp32OnOneDnn() {
  if (EnvIsOne(kForceFp32OpenBlasEnv)) return nullptr;
  absl::StatusOr<std::unique_ptr<DnnlGemm>> f32 = DnnlGemm::Create(DnnlGemm::Type::kF32);
  if (!f32.ok() || !absl::StrContains((*f32)->Impl(), "avx512")) return nullptr;
  return std::move(*f32);
}

// Why bf16 does not take oneDNN's bf16 matmul on this CPU, or "" where it does (and then
// *bf16 holds it). Intel cores without AMX tiles run its AVX512-BF16 kernel at half their fp32
// rate (an Emerald Rapids VM: 83 against 166 GFLOP/s at 2048^3 in torch's oneDNN 3.13, a
// shape-(b) step at 138 against 218 tok/s in ours; bench/NOTES.md), so there the fp32 product of
// rounded operands is faster, while AMD's Zen 4 runs it at 1.9x its fp32 rate. The choice depends
// only on the CPU and the environment, so every process of a machine computes the same bits.
std::string WhyNotOneDnnBf16(std::unique_ptr<DnnlGemm>* bf16) {
  if (EnvIsOne(kForceBf16FallbackEnv)) return absl::StrCat(kForceBf16FallbackEnv, "=1 forces it");
  absl::StatusOr<std::unique_ptr<DnnlGemm>> made = DnnlGemm::Create(DnnlGemm::Type::kBf16);
  if (!made.ok()) return std::string(made.status().message());
  const std::string impl = (*made)->Impl();
  if (EnvIsOne(kForceBf16OneDnnEnv) || absl::StrContains(impl, "amx") || !IntelCpu()) {
    *bf16 = std::move(*made);
    return "";
  }
  return absl::StrCat("oneDNN's bf16 matmul here (", impl,
                      ") has no AMX tiles, and Intel cores run it at half their fp32 rate (",
                      kForceBf16OneDnnEnv, "=1 takes it)");
}

}  // namespace

absl::StatusOr<std::unique_ptr<Ops>> MakeCpuOpsWith(int threads, CpuMatmul matmul) {
  std::unique_ptr<DnnlGemm> dnnl;
  if (matmul == CpuMatmul::kDnnlF32 || matmul == CpuMatmul::kDnnlBf16 ||
      matmul == CpuMatmul::kDnnlF32Bf16) {
    absl::StatusOr<std::unique_ptr<DnnlGemm>> made = DnnlGemm::Create(
        matmul == CpuMatmul::kDnnlBf16 ? DnnlGemm::Type::kBf16 : DnnlGemm::Type::kF32);
    if (!made.ok()) return made.status();
    dnnl = std::move(*made);
  }
  return Build(threads, matmul, std::move(dnnl));
}

std::unique_ptr<Ops> MakeCpuOps(int threads, common::Precision precision) {
  if (precision == common::Precision::kFp32) {
    std::unique_ptr<DnnlGemm> f32 = Fp32OnOneDnn();
    const CpuMatmul matmul = f32 != nullptr ? CpuMatmul::kDnnlF32 : CpuMatmul::kSgemm;
    return Build(threads, matmul, std::move(f32));
  }
  std::unique_ptr<DnnlGemm> bf16;
  const std::string why = WhyNotOneDnnBf16(&bf16);
  if (why.empty()) return Build(threads, CpuMatmul::kDnnlBf16, std::move(bf16));
  std::unique_ptr<DnnlGemm> f32 = Fp32OnOneDnn();
  const CpuMatmul matmul = f32 != nullptr ? CpuMatmul::kDnnlF32Bf16 : CpuMatmul::kSgemmBf16;
  return Build(threads, matmul, std::move(f32), why);
}

}  // namespace pp::kernels
