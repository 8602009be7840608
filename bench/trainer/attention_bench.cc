// attention_bench: the CPU backend's causal attention kernels (kernels/cpu/vec_kernels.h) alone,
// forward and backward of every head of one sequence, for every ISA table this CPU can run and
// the bf16 tiles' table where the CPU has AVX512-BF16 (Bf16AttentionKernels).
//
// FLOPs of a head: the score and weighted-value products, 2 * 2 * T * T * hs forward, twice that
// backward, halved for the causal mask (the kernels skip the masked half; trainer_bench counts
// the same). Printed: the median of --repeats runs after one warm-up, in ms and GFLOP/s, one line
// per table, with the step's share at shape (c) of issue 28 (12 layers) to read it against.
// Defaults: T=1024, C=768, 12 heads (hs=64), shape (c) of bench/peer.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "kernels/cpu/vec_kernels.h"

ABSL_FLAG(int, seq_len, 1024, "sequence length T");
ABSL_FLAG(int, d_model, 768, "model width C");
ABSL_FLAG(int, heads, 12, "attention heads");
ABSL_FLAG(int, repeats, 5, "timed runs (the median is printed)");

namespace {

using pp::kernels::AttentionScratchFloats;
using pp::kernels::HeadView;
using pp::kernels::VecKernels;

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Inputs {
  int T, C, NH, hs;
  std::vector<float> qkv, dout;  // (T, 3C), (T, C)
};

// Median forward and backward seconds of all heads on table k.
std::pair<double, double> Time(const VecKernels& k, const Inputs& in, int repeats) {
  const int T = in.T, C = in.C;
  std::vector<float> out(size_t(T) * C), stats(size_t(in.NH) * T * 2), dqkv(in.qkv.size());
  std::vector<float> scratch(AttentionScratchFloats(T, in.hs));
  std::vector<double> fwd, bwd;
  for (int r = 0; r <= repeats; ++r) {  // run 0 warms the caches and pages
    const double t0 = Seconds();
    for (int h = 0; h < in.NH; ++h) {
      const HeadView head{in.qkv.data() + h * in.hs, T, C, in.hs};
      k.attention_forward(out.data() + h * in.hs, stats.data() + size_t(h) * T * 2, head,
                          scratch.data());
    }
    const double t1 = Seconds();
    for (int h = 0; h < in.NH; ++h) {
      const HeadView head{in.qkv.data() + h * in.hs, T, C, in.hs};
      k.attention_backward(dqkv.data() + h * in.hs, in.dout.data() + h * in.hs,
                           stats.data() + size_t(h) * T * 2, head, scratch.data());
    }
    const double t2 = Seconds();
    if (r > 0) fwd.push_back(t1 - t0), bwd.push_back(t2 - t1);
  }
  return {Median(fwd), Median(bwd)};
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("attention_bench: the CPU attention kernels alone, per ISA table");
  absl::ParseCommandLine(argc, argv);
  Inputs in{absl::GetFlag(FLAGS_seq_len),
            absl::GetFlag(FLAGS_d_model),
            absl::GetFlag(FLAGS_heads),
            0,
            {},
            {}};
  const int repeats = absl::GetFlag(FLAGS_repeats);
  if (in.T < 1 || in.NH < 1 || in.C < in.NH || in.C % in.NH != 0 || repeats < 1 ||
      int64_t(in.T) * in.T * in.NH > (int64_t(1) << 31)) {
    std::fprintf(stderr,
                 "attention_bench: need T >= 1, C a multiple of heads, repeats >= 1 and "
                 "T * T * heads <= 2^31\n");
    return 2;
  }
  in.hs = in.C / in.NH;
  std::mt19937 gen(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  in.qkv.resize(size_t(in.T) * 3 * in.C);
  in.dout.resize(size_t(in.T) * in.C);
  for (float& x : in.qkv) x = normal(gen);
  for (float& x : in.dout) x = normal(gen);
  const double flop = 2.0 * in.T * double(in.T) * in.C;  // forward, all heads, causal half
  std::printf("attention_bench: T=%d C=%d heads=%d (hs=%d), median of %d, one thread\n", in.T, in.C,
              in.NH, in.hs, repeats);
  std::vector<const VecKernels*> tables = pp::kernels::RunnableVecKernels();
  for (const VecKernels* bf16 :  // bf16 jobs' attention on some CPUs
       {pp::kernels::Bf16AttentionKernels(), pp::kernels::AmxAttentionKernels()}) {
    if (bf16 != nullptr) tables.push_back(bf16);
  }
  for (const VecKernels* k : tables) {
    const auto [f, b] = Time(*k, in, repeats);
    std::printf(
        "%-8s forward %8.2f ms %6.1f GFLOP/s   backward %8.2f ms %6.1f GFLOP/s   "
        "x12 layers %6.0f ms\n",
        k->isa, f * 1e3, flop / f / 1e9, b * 1e3, 2 * flop / b / 1e9, 12 * (f + b) * 1e3);
  }
  return 0;
}
