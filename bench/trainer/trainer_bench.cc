// trainer_bench: tokens/s and achieved GFLOP/s of the reference trainer on a documented model,
// next to this machine's sgemm peak on the same thread count (the step's share of it).
//
// Model (defaults): 6 layers, C=256, T=128, 4 heads, byte vocabulary (256), untied head;
// B=8 sequences per microbatch, M=2 microbatches per step (2048 tokens per step).
// FLOPs per step = 6 * P * tokens + 6 * n_layers * C * T * tokens, with P the matmul parameters
// (every tensor but wte and wpe, which are lookups) and the second term the attention score and
// value products of PaLM (Chowdhery et al. 2022, appendix B: 12 * n_layers * C * T) halved for
// the causal mask: the attention kernel skips the masked half, so counting it would credit work
// that is not done. Timed: the last N of a 2N-step run, as CPU(2N-step run) - CPU(N-step run).
// Rates are per CPU second of this process (the 2-core machines these run on are shared, so wall
// time also measures the neighbours); wall-clock rates are printed next to them.
// --curve trains --steps steps once (with --data=FILE: on that file's bytes) and prints the loss
// of every step: the learning curve of bench/trainer/shakespeare.sh.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/job_spec.h"
#include "kernels/ops.h"
#include "worker/model/model.h"
#include "worker/trainer/trainer.h"

ABSL_FLAG(int, steps, 3, "timed steps N (runs N, then 2N steps; the difference is timed)");
ABSL_FLAG(int, layers, 6, "transformer blocks");
ABSL_FLAG(int, d_model, 256, "model width C");
ABSL_FLAG(int, heads, 4, "attention heads");
ABSL_FLAG(int, seq_len, 128, "sequence length T");
ABSL_FLAG(int, batch, 8, "sequences per microbatch B");
ABSL_FLAG(int, microbatches, 2, "microbatches per step M");
ABSL_FLAG(int, threads, 1, "compute threads of the CPU backend");
ABSL_FLAG(double, lr, 1e-3, "AdamW learning rate");
ABSL_FLAG(std::string, data, "", "train on this file's bytes (default: a generated corpus)");
ABSL_FLAG(bool, log_steps, true, "print one line per step");
ABSL_FLAG(bool, curve, false, "train --steps steps once and print the loss curve, no timing");

namespace {

double CpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The three products a step makes, as the Ops interface makes them: forward out = in W^T (NT),
// input gradient din += dout W (NN), weight gradient dW += dout^T in (TN).
enum class Layout { kNT, kNN, kTN };
const char* LayoutName(Layout l) { return l == Layout::kNT ? "NT" : l == Layout::kNN ? "NN" : "TN"; }

struct Rate {
  double cpu = 0, wall = 0;  // GFLOP/s per CPU second of this process, and per wall second
};

// Sustained sgemm rate of (n x k) times (k x m) in `layout`: a warm-up of at least 0.1 s (first
// touch of the pages, OpenBLAS's buffers and threads started, the core at its AVX-512 clock), then
// as many calls as fill 0.3 s. The best of six single calls on 1024^3, as this bench used to
// time, read 96 GFLOP/s where OpenBLAS sustains about 180 on larger products (issue 15): each
// call paid part of the ramp and was too short to time on a shared machine.
Rate SgemmRate(pp::kernels::Ops& ops, Layout layout, int n, int k, int m) {
  float* a = ops.Alloc(size_t(n) * k);
  float* w = ops.Alloc(size_t(m) * k);
  float* c = ops.Alloc(size_t(n) * m);
  std::vector<float> init(size_t(std::max(n, m)) * k);
  for (size_t i = 0; i < init.size(); ++i) init[i] = float(i % 17) * 0.01f - 0.08f;
  ops.CopyToDevice(a, init.data(), size_t(n) * k);
  ops.CopyToDevice(w, init.data(), size_t(m) * k);
  ops.CopyToDevice(c, std::vector<float>(size_t(n) * m).data(), size_t(n) * m);
  const auto call = [&] {
    switch (layout) {
      case Layout::kNT: ops.MatmulForward(c, a, w, nullptr, n, k, m); break;     // c(n,m) = a w^T
      case Layout::kNN: ops.MatmulBackwardInput(a, c, w, n, k, m); break;        // a(n,k) := c w
      case Layout::kTN: ops.MatmulBackwardWeight(w, nullptr, c, a, n, k, m); break;  // w += c^T a
    }
  };
  for (const double warm0 = WallSeconds(); WallSeconds() - warm0 < 0.1;) call();
  ops.Synchronize();
  int calls = 0;
  const double c0 = CpuSeconds(), w0 = WallSeconds();
  while (WallSeconds() - w0 < 0.3) call(), ++calls;
  ops.Synchronize();
  const double flops = 2.0 * n * k * m * calls;
  Rate rate{flops / (CpuSeconds() - c0) / 1e9, flops / (WallSeconds() - w0) / 1e9};
  ops.Free(a), ops.Free(w), ops.Free(c);
  return rate;
}

// The peak the step is measured against: the best sustained rate over the three layouts on a
// large product (M=4096 x K=N=1024, the shape OpenBLAS was measured on for issue 15), per
// CPU second; each layout's rates are printed.
double PeakGflops(pp::kernels::Ops& ops, int threads) {
  double peak = 0;
  for (Layout l : {Layout::kNN, Layout::kNT, Layout::kTN}) {
    const Rate r = SgemmRate(ops, l, 4096, 1024, 1024);
    std::printf("sgemm %s 4096x1024x1024 (%d thread%s): %.1f GFLOP/s per CPU second, %.1f wall\n",
                LayoutName(l), threads, threads == 1 ? "" : "s", r.cpu, r.wall);
    peak = std::max(peak, r.cpu);
  }
  return peak;
}

// The documented model and batch, as the flags change them.
pp::v1::JobSpec SpecFromFlags() {
  pp::v1::JobSpec spec;
  spec.set_name("trainer-bench");
  auto* m = spec.mutable_model();
  m->set_vocab_size(256), m->set_seq_len(absl::GetFlag(FLAGS_seq_len));
  m->set_d_model(absl::GetFlag(FLAGS_d_model)), m->set_n_heads(absl::GetFlag(FLAGS_heads));
  m->set_n_layers(absl::GetFlag(FLAGS_layers));
  spec.mutable_parallel()->set_pipeline(1);
  spec.mutable_parallel()->set_schedule("gpipe");
  auto* t = spec.mutable_train();
  t->set_steps(absl::GetFlag(FLAGS_steps)), t->set_microbatches(absl::GetFlag(FLAGS_microbatches));
  t->set_microbatch_size(absl::GetFlag(FLAGS_batch)), t->set_lr(absl::GetFlag(FLAGS_lr));
  t->set_weight_decay(0.1), t->set_grad_clip(1.0), t->set_seed(1);
  t->set_threads(absl::GetFlag(FLAGS_threads));
  if (absl::GetFlag(FLAGS_data).empty()) {
    spec.mutable_data()->set_format("generated");
    spec.mutable_data()->set_generated_tokens(4 << 20);
  } else {
    spec.mutable_data()->set_path(absl::GetFlag(FLAGS_data));
  }
  return spec;
}

// --curve: one run of --steps steps, every step's loss printed.
int Curve(const pp::v1::JobSpec& spec) {
  pp::trainer::TrainOptions opts;
  opts.log = &std::cout;
  auto run = pp::trainer::Train(spec, opts);
  if (!run.ok()) {
    std::cerr << "trainer_bench: " << run.status().message() << "\n";
    return 1;
  }
  std::printf("curve: %d steps, loss %.4f -> %.4f (min %.4f), %.0f tokens/s wall\n",
              spec.train().steps(), run->losses.front(), run->losses.back(),
              *std::min_element(run->losses.begin(), run->losses.end()),
              run->tokens / run->seconds);
  return 0;
}

// Tokens per CPU second of the step, and its share of the sgemm peak. CPU time of N steps =
// CPU(run of 2N steps) - CPU(run of N steps): setup, first-touch of the heap and the warm-up step
// cancel out.
int Timed(const pp::v1::JobSpec& spec, double timed_tokens, double flops_per_token, double peak) {
  pp::trainer::TrainOptions opts;
  const int steps = spec.train().steps();
  opts.steps = steps;
  double c0 = CpuSeconds();
  if (auto first = pp::trainer::Train(spec, opts); !first.ok()) {
    std::cerr << "trainer_bench: " << first.status().message() << "\n";
    return 1;
  }
  const double cpu_short = CpuSeconds() - c0;
  opts.steps = 2 * steps;
  if (absl::GetFlag(FLAGS_log_steps)) opts.log = &std::cout;
  c0 = CpuSeconds();
  auto result = pp::trainer::Train(spec, opts);
  if (!result.ok()) {
    std::cerr << "trainer_bench: " << result.status().message() << "\n";
    return 1;
  }
  const double cpu_timed = CpuSeconds() - c0 - cpu_short;
  double wall_timed = 0;
  for (int i = steps; i < 2 * steps; ++i) wall_timed += result->step_seconds[i];
  const double tok_s = timed_tokens / cpu_timed, wall_tok_s = timed_tokens / wall_timed;
  const double gflops = tok_s * flops_per_token / 1e9;
  std::printf(
      "trainer: %.0f tokens per CPU second, %.1f GFLOP/s = %.1f%% of the sgemm peak (%.1f "
      "GFLOP/s); wall clock %.0f tokens/s\n",
      tok_s, gflops, 100.0 * gflops / peak, peak, wall_tok_s);
  std::printf("loss: first %.4f, last %.4f\n", result->losses.front(), result->losses.back());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("trainer_bench [--data=FILE] [--steps=N]: trainer throughput");
  absl::ParseCommandLine(argc, argv);
  pp::v1::JobSpec spec = SpecFromFlags();
  const pp::v1::TrainSpec* t = &spec.train();
  pp::common::ApplyDefaults(&spec);
  if (auto s = pp::common::ValidateJobSpec(spec); !s.ok()) {
    std::cerr << "trainer_bench: " << s.message() << "\n";
    return 1;
  }
  auto config = pp::model::ModelConfigFromSpec(spec.model());
  if (!config.ok()) {
    std::cerr << "trainer_bench: " << config.status().message() << "\n";
    return 1;
  }
  const int L = config->n_layers, C = config->d_model, T = config->seq_len;
  const int64_t params = pp::model::NumParameters(*config);
  const int64_t matmul_params = params - int64_t(config->vocab_size + T) * C;
  const int64_t tokens_per_step = int64_t(t->microbatches()) * t->microbatch_size() * T;
  const double flops_per_token = 6.0 * matmul_params + 6.0 * L * C * T;

  auto ops = pp::kernels::MakeOps("cpu", t->threads());
  if (!ops.ok()) {
    std::cerr << "trainer_bench: " << ops.status().message() << "\n";
    return 1;
  }
  const double peak = PeakGflops(**ops, t->threads());
  // The step's largest product, the MLP's fc: (B*T, C) x (C, 4C).
  const Rate model_rate = SgemmRate(**ops, Layout::kNT, t->microbatch_size() * T, C, 4 * C);
  std::printf("sgemm NT %dx%dx%d (the MLP's fc): %.1f GFLOP/s per CPU second\n",
              t->microbatch_size() * T, C, 4 * C, model_rate.cpu);

  std::printf("model: %d layers, C=%d, T=%d, heads %d, vocab %d: %lld params (%lld in matmuls)\n",
              L, C, T, config->n_heads, config->vocab_size, (long long)params,
              (long long)matmul_params);
  std::printf("step: M=%d x B=%d x T=%d = %lld tokens, %.2f GFLOP\n", t->microbatches(),
              t->microbatch_size(), T, (long long)tokens_per_step,
              flops_per_token * tokens_per_step / 1e9);
  const int steps = t->steps();
  if (steps < 1) {
    std::cerr << "trainer_bench: --steps must be >= 1\n";
    return 1;
  }
  if (absl::GetFlag(FLAGS_curve)) return Curve(spec);
  return Timed(spec, double(tokens_per_step) * steps, flops_per_token, peak);
}
