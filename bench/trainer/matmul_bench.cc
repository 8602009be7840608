// matmul_bench: the bf16 matrix products of a GPT block's four linears (qkv, proj, fc, mlp.proj)
// through the CPU backend's Ops, as a training step runs them: per step AdamW rewrites the
// weights (and with them their bf16 copies or packings), then per microbatch each linear's
// forward, input gradient and weight gradient. The backends compared are built in one
// process and their steps alternate, so both see the same phases of a noisy host: bf16 on
// oneDNN's matmul (PP_BF16_AMX_PRODUCTS=0) and bf16 with the own AMX tile products
// (kernels/cpu/amx_gemm.h) where the CPU has AMX. Printed: each step's median ms over --steps,
// with the spread, and the ratio. Defaults: shape (b) of bench/peer (N = 2 x 256 rows, C = 768,
// two microbatches).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/precision.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/ops.h"

ABSL_FLAG(int, rows, 512, "rows N of a microbatch (batch x sequence length)");
ABSL_FLAG(int, d_model, 768, "model width C");
ABSL_FLAG(int, microbatches, 2, "microbatches a step");
ABSL_FLAG(int, steps, 7, "timed steps per backend (the median is printed), after one warm-up");
ABSL_FLAG(int, threads, 1, "threads of each backend");

namespace {

using pp::kernels::Ops;

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Linear {
  int ic, oc;
  float *w, *dw, *m, *v, *x, *y, *dy, *dx;
};

// The four linears of a block at width C with N rows, on `ops`'s memory.
std::vector<Linear> Block(Ops& ops, int N, int C, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<Linear> block;
  for (auto [ic, oc] : {std::pair{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}}) {
    Linear l{ic, oc};
    std::vector<float> host(size_t(oc) * ic);
    for (float& v : host) v = normal(rng);
    l.w = ops.Alloc(host.size());
    ops.CopyToDevice(l.w, host.data(), host.size());
    for (float** p : {&l.dw, &l.m, &l.v}) *p = ops.Alloc(host.size());
    host.resize(size_t(N) * std::max(ic, oc));
    for (float& v : host) v = normal(rng);
    for (float** p : {&l.x, &l.dx}) *p = ops.Alloc(size_t(N) * ic);
    for (float** p : {&l.y, &l.dy}) *p = ops.Alloc(size_t(N) * oc);
    ops.CopyToDevice(l.x, host.data(), size_t(N) * ic);
    ops.CopyToDevice(l.dy, host.data(), size_t(N) * oc);
    block.push_back(l);
  }
  return block;
}

// One step's optimizer and products on `ops`, in seconds.
double Step(Ops& ops, std::vector<Linear>& block, int N, int microbatches, int step) {
  const double t0 = Seconds();
  for (Linear& l : block) {
    const size_t n = size_t(l.oc) * l.ic;
    ops.AdamW(l.w, l.dw, l.m, l.v, n, pp::kernels::AdamWParams{.lr = 1e-6f, .step = step});
    ops.Zero(l.dw, n);
  }
  for (int m = 0; m < microbatches; ++m) {
    for (Linear& l : block) ops.MatmulForward(l.y, l.x, l.w, nullptr, N, l.ic, l.oc);
    for (Linear& l : block) {
      ops.MatmulBackwardInput(l.dx, l.dy, l.w, N, l.ic, l.oc);
      ops.MatmulBackwardWeight(l.dw, nullptr, l.dy, l.x, N, l.ic, l.oc);
    }
  }
  ops.Synchronize();
  return Seconds() - t0;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("bf16 products of a GPT block: oneDNN against the AMX tiles");
  absl::ParseCommandLine(argc, argv);
  const int N = absl::GetFlag(FLAGS_rows), C = absl::GetFlag(FLAGS_d_model);
  const int M = absl::GetFlag(FLAGS_microbatches), steps = absl::GetFlag(FLAGS_steps);
  const int threads = absl::GetFlag(FLAGS_threads);
  struct Backend {
    std::string name;
    std::unique_ptr<Ops> ops;
    std::vector<Linear> block;
    std::vector<double> times;
  };
  std::vector<Backend> backends;
  for (const char* amx : {"0", "1"}) {
    setenv(pp::kernels::kAmxProductsEnv, amx, 1);
    std::unique_ptr<Ops> ops = pp::kernels::MakeCpuOps(threads, pp::common::Precision::kBf16);
    std::printf("%s\n", ops->MatmulPath().c_str());
    std::mt19937 rng(1);
    std::vector<Linear> block = Block(*ops, N, C, rng);
    backends.push_back({amx[0] == '0' ? "oneDNN" : "AMX tiles", std::move(ops), block, {}});
  }
  const double flops = 3.0 * 2 * N * M * 12.0 * C * C;  // 12 C^2 weights, 3 products each
  for (int s = 0; s <= steps; ++s) {
    for (Backend& b : backends) {
      const double t = Step(*b.ops, b.block, N, M, s + 1);
      if (s > 0) b.times.push_back(t);
    }
  }
  std::printf("block of C=%d, %d x %d rows, %d threads: per step (median of %d, min-max)\n", C, M,
              N, threads, steps);
  for (const Backend& b : backends) {
    const auto [lo, hi] = std::minmax_element(b.times.begin(), b.times.end());
    std::printf("  %-10s %8.2f ms (%.2f-%.2f) %6.0f GFLOP/s\n", b.name.c_str(),
                Median(b.times) * 1e3, *lo * 1e3, *hi * 1e3, flops / Median(b.times) / 1e9);
  }
  std::printf("  ratio oneDNN / AMX tiles: %.2fx\n",
              Median(backends[0].times) / Median(backends[1].times));
  return 0;
}
