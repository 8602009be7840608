// gpu_ops_compare: runs every Ops method on the CUDA backend and on the CPU backend with the same
// random inputs and prints, for each output, max|cuda - cpu| / max|cpu| (the "relative error"
// column); exits 1 when one is above --tolerance or not finite. Gradient outputs start from
// random values, so an op that overwrites instead of adding fails. A GPT-2 shaped stack of the
// ops (forward + backward) is compared end to end as well.
// --bench also prints cuBLAS sgemm throughput (through MatmulForward) and the tokens/s of that
// stack's forward + backward at a GPT-2 small shape.
// Exits 77 (ctest: skipped) when no CUDA device is visible.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "kernels/ops.h"

ABSL_FLAG(double, tolerance, 1e-4, "largest accepted max|cuda - cpu| / max|cpu| of any output");
ABSL_FLAG(bool, bench, false, "also time sgemm and a GPT-2 shaped forward + backward");
ABSL_FLAG(int, bench_layers, 12, "--bench model: layers");
ABSL_FLAG(int, bench_channels, 768, "--bench model: channels C");
ABSL_FLAG(int, bench_heads, 12, "--bench model: heads");
ABSL_FLAG(int, bench_seq, 1024, "--bench model: sequence length T");
ABSL_FLAG(int, bench_batch, 4, "--bench model: batch B");
ABSL_FLAG(int, bench_vocab, 50304, "--bench model: vocabulary V");
ABSL_FLAG(int, bench_sgemm, 4096, "--bench: M = N = K of the timed sgemm");

namespace pp::kernels {
namespace {

// splitmix64 (Steele, Lea, Flood 2014): fast and the same on every machine, so both backends
// and every run see the same inputs.
class Random {
 public:
  explicit Random(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float Uniform(float lo, float hi) {
    return lo + (hi - lo) * static_cast<float>((Next() >> 40) * 0x1p-24);
  }
  int32_t Below(int n) { return static_cast<int32_t>(Next() % static_cast<uint64_t>(n)); }

 private:
  uint64_t state_;
};

std::vector<float> UniformVector(Random& rng, size_t n, float lo, float hi) {
  std::vector<float> v(n);
  for (float& x : v) x = rng.Uniform(lo, hi);
  return v;
}

std::vector<int32_t> TokenVector(Random& rng, size_t n, int vocab) {
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = rng.Below(vocab);
  return v;
}

enum Side { kCpu = 0, kGpu = 1 };

struct Backends {
  Ops* side[2];
};

// One tensor held by both backends.
class Twin {
 public:
  Twin(const Backends& be, size_t n) : be_(be), n_(n) {
    for (int s : {kCpu, kGpu}) p_[s] = be_.side[s]->Alloc(n);
  }
  ~Twin() {
    for (int s : {kCpu, kGpu}) be_.side[s]->Free(p_[s]);
  }
  Twin(const Twin&) = delete;
  Twin& operator=(const Twin&) = delete;

  float* operator[](Side s) const { return p_[s]; }
  void Set(const std::vector<float>& host) {
    for (int s : {kCpu, kGpu}) be_.side[s]->CopyToDevice(p_[s], host.data(), n_);
  }
  void Uniform(Random& rng, float lo, float hi) { Set(UniformVector(rng, n_, lo, hi)); }
  // Gives the GPU the CPU's values, so a backward op is compared on identical inputs.
  void ShareCpuValues() { Set(Values(kCpu)); }
  std::vector<float> Values(Side s) const {
    std::vector<float> host(n_);
    be_.side[s]->CopyToHost(host.data(), p_[s], n_);
    return host;
  }

 private:
  const Backends& be_;
  size_t n_;
  float* p_[2];
};

class IntTwin {
 public:
  IntTwin(const Backends& be, const std::vector<int32_t>& host) : be_(be) {
    for (int s : {kCpu, kGpu}) {
      p_[s] = be_.side[s]->AllocInt(host.size());
      be_.side[s]->CopyIntToDevice(p_[s], host.data(), host.size());
    }
  }
  ~IntTwin() {
    for (int s : {kCpu, kGpu}) be_.side[s]->Free(p_[s]);
  }
  IntTwin(const IntTwin&) = delete;
  IntTwin& operator=(const IntTwin&) = delete;
  const int32_t* operator[](Side s) const { return p_[s]; }

 private:
  const Backends& be_;
  int32_t* p_[2];
};

// Runs f(ops, side) on the CPU backend, then on the CUDA one.
template <typename F>
void OnBoth(const Backends& be, F f) {
  for (Side s : {kCpu, kGpu}) f(*be.side[s], s);
}

// max|gpu - cpu| / max|cpu|; infinite when the GPU gives a non-finite value the CPU does not.
double RelativeError(const std::vector<float>& gpu, const std::vector<float>& cpu) {
  double max_diff = 0.0;
  double max_ref = 0.0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    if (std::isfinite(gpu[i]) != std::isfinite(cpu[i])) {
      return std::numeric_limits<double>::infinity();
    }
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(gpu[i]) - cpu[i]));
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(cpu[i])));
  }
  return max_ref > 0.0 ? max_diff / max_ref : max_diff;
}

class Report {
 public:
  explicit Report(double tolerance) : tolerance_(tolerance) {}

  void Compare(const std::string& op, const std::string& output, const Twin& t) {
    CompareValues(op, output, t.Values(kGpu), t.Values(kCpu));
  }
  void CompareValues(const std::string& op, const std::string& output,
                     const std::vector<float>& gpu, const std::vector<float>& cpu) {
    Add(op, output, RelativeError(gpu, cpu));
  }
  void CompareScalar(const std::string& op, const std::string& output, double gpu, double cpu) {
    const double diff = std::fabs(gpu - cpu);
    Add(op, output,
        std::isfinite(gpu) ? diff / std::max(std::fabs(cpu), 1e-300)
                           : std::numeric_limits<double>::infinity());
  }
  // A check that holds or not (bitwise repeatability): 0 or infinity in the table.
  void Require(const std::string& op, const std::string& output, bool holds) {
    Add(op, output, holds ? 0.0 : std::numeric_limits<double>::infinity());
  }

  // Prints the table; true when every row passed.
  bool Print() const {
    std::printf("%-30s %-18s %12s  %s\n", "op", "output", "rel error", "result");
    int failed = 0;
    for (const Row& r : rows_) {
      const bool ok = r.error <= tolerance_;
      failed += ok ? 0 : 1;
      std::printf("%-30s %-18s %12.3e  %s\n", r.op.c_str(), r.output.c_str(), r.error,
                  ok ? "ok" : "FAIL");
    }
    std::printf("%zu outputs compared, tolerance %.1e: %zu passed, %d failed\n", rows_.size(),
                tolerance_, rows_.size() - failed, failed);
    return failed == 0;
  }

 private:
  struct Row {
    std::string op, output;
    double error;
  };
  void Add(const std::string& op, const std::string& output, double error) {
    rows_.push_back({op, output, error});
  }
  double tolerance_;
  std::vector<Row> rows_;
};

// ---- one check per group of ops -------------------------------------------------------------

void CheckElementwise(const Backends& be, Random& rng, Report& report) {
  const size_t n = 100003;  // not a multiple of any block size
  Twin acc(be, n), x(be, n), out(be, n);
  acc.Uniform(rng, -1, 1);
  x.Uniform(rng, -1, 1);
  OnBoth(be, [&](Ops& ops, Side s) { ops.Add(acc[s], x[s], n); });
  report.Compare("Add", "acc", acc);
  OnBoth(be, [&](Ops& ops, Side s) { ops.Scale(acc[s], -0.37f, n); });
  report.Compare("Scale", "x", acc);
  OnBoth(be, [&](Ops& ops, Side s) { ops.ResidualForward(out[s], acc[s], x[s], n); });
  report.Compare("ResidualForward", "out", out);
  double sums[2], squares[2];
  OnBoth(be, [&](Ops& ops, Side s) {
    sums[s] = ops.Sum(x[s], n);
    squares[s] = ops.SumSquares(x[s], n);
  });
  report.CompareScalar("Sum", "sum", sums[kGpu], sums[kCpu]);
  report.CompareScalar("SumSquares", "sum", squares[kGpu], squares[kCpu]);
  const double again = be.side[kGpu]->SumSquares(x[kGpu], n);
  report.Require("SumSquares", "repeatable",
                 std::memcmp(&again, &squares[kGpu], sizeof(double)) == 0);

  Twin dinp(be, n);
  dinp.Uniform(rng, -1, 1);
  x.Uniform(rng, -6, 6);
  OnBoth(be, [&](Ops& ops, Side s) { ops.GeluForward(out[s], x[s], n); });
  report.Compare("GeluForward", "out", out);
  OnBoth(be, [&](Ops& ops, Side s) { ops.GeluBackward(dinp[s], x[s], acc[s], n); });
  report.Compare("GeluBackward", "dinp", dinp);
}

// positions: (B,T) position ids (ops.h), or empty for position t (a null pointer).
void CheckEncoder(const Backends& be, Random& rng, Report& report,
                  const std::vector<int32_t>& positions = {}) {
  const int B = 3, T = 45, C = 300, V = 37;  // few tokens: many repeats in dwte rows
  const std::string tag = positions.empty() ? "" : " document positions";
  IntTwin tokens(be, TokenVector(rng, B * T, V));
  std::unique_ptr<IntTwin> ids;
  if (!positions.empty()) ids = std::make_unique<IntTwin>(be, positions);
  auto pos = [&](Side s) { return ids ? (*ids)[s] : nullptr; };
  Twin wte(be, V * C), wpe(be, T * C), out(be, B * T * C);
  wte.Uniform(rng, -1, 1);
  wpe.Uniform(rng, -1, 1);
  OnBoth(be, [&](Ops& ops, Side s) {
    ops.EncoderForward(out[s], tokens[s], wte[s], wpe[s], pos(s), B, T, C);
  });
  report.Compare("EncoderForward" + tag, "out", out);
  Twin dout(be, B * T * C);
  dout.Uniform(rng, -1, 1);
  wte.Uniform(rng, -1, 1);  // now the gradients accumulated into
  wpe.Uniform(rng, -1, 1);
  OnBoth(be, [&](Ops& ops, Side s) {
    ops.EncoderBackward(wte[s], wpe[s], dout[s], tokens[s], pos(s), B, T, C);
  });
  report.Compare("EncoderBackward" + tag, "dwte", wte);
  report.Compare("EncoderBackward" + tag, "dwpe", wpe);
}

void CheckLayerNorm(const Backends& be, Random& rng, Report& report) {
  const int N = 77, C = 200;
  Twin inp(be, N * C), weight(be, C), bias(be, C), out(be, N * C), mean(be, N), rstd(be, N);
  inp.Uniform(rng, -2, 3);
  weight.Uniform(rng, 0.5f, 1.5f);
  bias.Uniform(rng, -0.5f, 0.5f);
  OnBoth(be, [&](Ops& ops, Side s) {
    ops.LayerNormForward(out[s], mean[s], rstd[s], inp[s], weight[s], bias[s], N, C);
  });
  report.Compare("LayerNormForward", "out", out);
  report.Compare("LayerNormForward", "mean", mean);
  report.Compare("LayerNormForward", "rstd", rstd);
  mean.ShareCpuValues();
  rstd.ShareCpuValues();
  Twin dout(be, N * C), dres(be, N * C), dinp(be, N * C), dweight(be, C), dbias(be, C);
  for (Twin* t : {&dout, &dres, &dinp, &dweight, &dbias}) t->Uniform(rng, -1, 1);
  OnBoth(be, [&](Ops& ops, Side s) {
    ops.LayerNormBackwardInput(dinp[s], dres[s], dout[s], inp[s], weight[s], mean[s], rstd[s], N,
                               C);
    ops.LayerNormBackwardWeight(dweight[s], dbias[s], dout[s], inp[s], mean[s], rstd[s], N, C);
  });
  report.Compare("LayerNormBackwardInput", "dinp", dinp);
  report.Compare("LayerNormBackwardWeight", "dweight", dweight);
  report.Compare("LayerNormBackwardWeight", "dbias", dbias);
  OnBoth(be, [&](Ops& ops, Side s) {  // null dres: the gradient alone, dinp overwritten
    ops.LayerNormBackwardInput(dinp[s], nullptr, dout[s], inp[s], weight[s], mean[s], rstd[s], N,
                               C);
  });
  report.Compare("LayerNormBackwardInput (no residual)", "dinp", dinp);
  Twin res(be, N * C);
  OnBoth(be, [&](Ops& ops, Side s) {
    ops.ResidualLayerNormForward(res[s], out[s], mean[s], rstd[s], inp[s], dout[s], weight[s],
                                 bias[s], N, C);
  });
  report.Compare("ResidualLayerNormForward", "res", res);
  report.Compare("ResidualLayerNormForward", "out", out);
  report.Compare("ResidualLayerNormForward", "rstd", rstd);
}

// tag: "" for fp32, "bf16 " when both backends run train.precision bf16 (bf16 operands, fp32
// sums: the same exact products summed in another order, so fp32 tolerances still hold).
void CheckMatmul(const Backends& be, Random& rng, Report& report, const std::string& tag = "") {
  const int N = 130, IC = 72, OC = 100;
  Twin inp(be, N * IC), weight(be, OC * IC), bias(be, OC), out(be, N * OC);
  for (Twin* t : {&inp, &weight, &bias, &out}) t->Uniform(rng, -1, 1);
  OnBoth(be, [&](Ops& ops, Side s) {
    ops.MatmulForward(out[s], inp[s], weight[s], bias[s], N, IC, OC);
  });
  report.Compare(tag + "MatmulForward", "out", out);
  out.Uniform(rng, -1, 1);
  OnBoth(be, [&](Ops& ops, Side s) {
    ops.MatmulForward(out[s], inp[s], weight[s], nullptr, N, IC, OC);
  });
  report.Compare(tag + "MatmulForward", "out, no bias", out);
  Twin dout(be, N * OC), dinp(be, N * IC), dweight(be, OC * IC), dbias(be, OC);
  for (Twin* t : {&dout, &dinp, &dweight, &dbias}) t->Uniform(rng, -1, 1);
  OnBoth(be, [&](Ops& ops, Side s) {
    ops.MatmulBackwardInput(dinp[s], dout[s], weight[s], N, IC, OC);
    ops.MatmulBackwardWeight(dweight[s], dbias[s], dout[s], inp[s], N, IC, OC);
  });
  report.Compare(tag + "MatmulBackwardInput", "dinp", dinp);
  report.Compare(tag + "MatmulBackwardWeight", "dweight", dweight);
  report.Compare(tag + "MatmulBackwardWeight", "dbias", dbias);
  OnBoth(be, [&](Ops& ops, Side s) {
    ops.MatmulBackwardWeight(dweight[s], nullptr, dout[s], inp[s], N, IC, OC);
  });
  report.Compare(tag + "MatmulBackwardWeight", "dweight, no dbias", dweight);
}

// (B,T) document starts (ops.h doc_start): row b has a one-token document at 0, then documents
// of 5 + 3b tokens, and a last one-token document at T - 1.
std::vector<int32_t> PackedDocStarts(int B, int T) {
  std::vector<int32_t> starts(static_cast<size_t>(B) * T);
  for (int b = 0; b < B; ++b) {
    int cur = 0;
    for (int t = 0; t < T; ++t) {
      if (t == 1 || t == T - 1 || (t > 0 && t % (5 + 3 * b) == 0)) cur = t;
      starts[static_cast<size_t>(b) * T + t] = cur;
    }
  }
  return starts;
}

// hs below and above the warp width, T below and above it; docs: (B,T) document starts, or
// empty for plain causal attention (a null doc_start).
void CheckAttention(const Backends& be, Random& rng, Report& report, int B, int T, int C, int NH,
                    const std::vector<int32_t>& docs = {}) {
  const std::string op = absl::StrCat("Attention", docs.empty() ? "" : " packed", " B", B, " T", T,
                                      " C", C, " NH", NH);
  std::unique_ptr<IntTwin> starts;
  if (!docs.empty()) starts = std::make_unique<IntTwin>(be, docs);
  auto doc = [&](Side s) { return starts ? (*starts)[s] : nullptr; };
  Twin qkv(be, B * T * 3 * C), out(be, B * T * C), stats(be, B * NH * T * 2);
  qkv.Uniform(rng, -1.5f, 1.5f);
  stats.Uniform(rng, -1, 1);  // the op must write every row's stats
  OnBoth(be, [&](Ops& ops, Side s) {
    ops.AttentionForward(out[s], stats[s], qkv[s], doc(s), B, T, C, NH);
  });
  report.Compare(op + " fwd", "out", out);
  report.Compare(op + " fwd", "stats", stats);
  stats.ShareCpuValues();
  Twin dout(be, B * T * C), dqkv(be, B * T * 3 * C);
  dout.Uniform(rng, -1, 1);
  dqkv.Uniform(rng, -1, 1);
  OnBoth(be, [&](Ops& ops, Side s) {
    ops.AttentionBackward(dqkv[s], dout[s], qkv[s], stats[s], doc(s), B, T, C, NH);
  });
  report.Compare(op + " bwd", "dqkv", dqkv);
}

void CheckCrossEntropy(const Backends& be, Random& rng, Report& report) {
  const int N = 53, V = 1000;  // V above the block width
  for (const int Vr : {V, 937}) {  // 937: the last 63 columns are masked vocabulary padding
    const std::string op = Vr == V ? "CrossEntropy" : "CrossEntropy padded";
    IntTwin targets(be, TokenVector(rng, N, Vr));
    Twin logits(be, N * V), losses(be, N), probs(be, N * V);
    logits.Uniform(rng, -4, 4);
    OnBoth(be, [&](Ops& ops, Side s) {
      ops.CrossEntropyForward(losses[s], probs[s], logits[s], targets[s], N, V, Vr);
    });
    report.Compare(op + "Forward", "losses", losses);
    report.Compare(op + "Forward", "probs", probs);
    probs.ShareCpuValues();
    Twin dlogits(be, N * V);
    dlogits.Uniform(rng, -1, 1);
    OnBoth(be, [&](Ops& ops, Side s) {
      ops.CrossEntropyBackward(dlogits[s], probs[s], targets[s], 1.0f / N, N, V, Vr);
    });
    report.Compare(op + "Backward", "dlogits", dlogits);
  }
}

void CheckAdamW(const Backends& be, Random& rng, Report& report) {
  const size_t n = 4099;
  Twin params(be, n), grads(be, n), m(be, n), v(be, n);
  params.Uniform(rng, -1, 1);
  grads.Uniform(rng, -1, 1);
  m.Uniform(rng, -0.1f, 0.1f);
  v.Uniform(rng, 0.0f, 0.01f);
  AdamWParams p;
  p.lr = 1e-2f;
  p.weight_decay = 0.1f;
  p.step = 3;
  p.grad_scale = 0.5f;
  OnBoth(be, [&](Ops& ops, Side s) { ops.AdamW(params[s], grads[s], m[s], v[s], n, p); });
  report.Compare("AdamW", "params", params);
  report.Compare("AdamW", "m", m);
  report.Compare("AdamW", "v", v);
}

// ---- a GPT-2 shaped stack of ops ------------------------------------------------------------

struct GptShape {
  int layers, channels, heads, seq, batch, vocab;
};

// Parameter offsets in one flat buffer, per layer then the final LayerNorm and head
// (the tensors of docs/model.md, untied head).
struct GptLayout {
  explicit GptLayout(const GptShape& s) {
    const size_t C = s.channels;
    size_t at = 0;
    const auto take = [&at](size_t n) {
      const size_t o = at;
      at += n;
      return o;
    };
    wte = take(static_cast<size_t>(s.vocab) * C);
    wpe = take(static_cast<size_t>(s.seq) * C);
    for (int l = 0; l < s.layers; ++l) {
      Layer L;
      L.ln1w = take(C), L.ln1b = take(C), L.qkvw = take(3 * C * C), L.qkvb = take(3 * C);
      L.projw = take(C * C), L.projb = take(C), L.ln2w = take(C), L.ln2b = take(C);
      L.fcw = take(4 * C * C), L.fcb = take(4 * C), L.fcprojw = take(4 * C * C);
      L.fcprojb = take(C);
      layer.push_back(L);
    }
    lnfw = take(C), lnfb = take(C), head = take(static_cast<size_t>(s.vocab) * C);
    size = at;
  }
  struct Layer {
    size_t ln1w, ln1b, qkvw, qkvb, projw, projb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
  };
  size_t wte, wpe, lnfw, lnfb, head, size;
  std::vector<Layer> layer;
};

// Forward + backward of the stack on one backend; all buffers belong to that backend.
class MiniGpt {
 public:
  MiniGpt(Ops& ops, const GptShape& s, const std::vector<float>& params)
      : ops_(ops), s_(s), lay_(s), bt_(static_cast<size_t>(s.batch) * s.seq) {
    params_ = Buffer(lay_.size);
    grads_ = Buffer(lay_.size);
    ops_.CopyToDevice(params_, params.data(), lay_.size);
    const size_t C = s.channels;
    for (int l = 0; l < s.layers; ++l) {
      Acts a;
      a.ln1 = Buffer(bt_ * C), a.ln1_mean = Buffer(bt_), a.ln1_rstd = Buffer(bt_);
      a.qkv = Buffer(bt_ * 3 * C), a.atty = Buffer(bt_ * C);
      a.att = Buffer(bt_ * s.heads * 2), a.attproj = Buffer(bt_ * C), a.res1 = Buffer(bt_ * C);
      a.ln2 = Buffer(bt_ * C), a.ln2_mean = Buffer(bt_), a.ln2_rstd = Buffer(bt_);
      a.fch = Buffer(bt_ * 4 * C), a.fch_gelu = Buffer(bt_ * 4 * C);
      a.fcproj = Buffer(bt_ * C), a.res2 = Buffer(bt_ * C);
      acts_.push_back(a);
    }
    encoded_ = Buffer(bt_ * C), lnf_ = Buffer(bt_ * C), lnf_mean_ = Buffer(bt_);
    lnf_rstd_ = Buffer(bt_), logits_ = Buffer(bt_ * s.vocab), probs_ = Buffer(bt_ * s.vocab);
    losses_ = Buffer(bt_);
    dres_ = Buffer(bt_ * C), dln_ = Buffer(bt_ * C), datty_ = Buffer(bt_ * C);
    dqkv_ = Buffer(bt_ * 3 * C), dfch_ = Buffer(bt_ * 4 * C), dfch_gelu_ = Buffer(bt_ * 4 * C);
    dlogits_ = Buffer(bt_ * s.vocab);
    tokens_ = ops_.AllocInt(bt_);
    targets_ = ops_.AllocInt(bt_);
  }
  ~MiniGpt() {
    for (float* p : owned_) ops_.Free(p);
    ops_.Free(tokens_);
    ops_.Free(targets_);
  }
  MiniGpt(const MiniGpt&) = delete;
  MiniGpt& operator=(const MiniGpt&) = delete;

  static size_t NumParams(const GptShape& s) { return GptLayout(s).size; }

  // tokens, targets (B,T) on the host
  void SetBatch(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets) {
    ops_.CopyIntToDevice(tokens_, tokens.data(), bt_);
    ops_.CopyIntToDevice(targets_, targets.data(), bt_);
  }

  // Mean loss of the batch; leaves d(mean loss)/d(params) in grads().
  double Step() {
    const double loss = Forward();
    ops_.Zero(grads_, lay_.size);
    Backward();
    return loss;
  }
  std::vector<float> Grads() const {
    std::vector<float> host(lay_.size);
    ops_.CopyToHost(host.data(), grads_, lay_.size);
    return host;
  }

 private:
  struct Acts {
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att, *attproj, *res1, *ln2, *ln2_mean,
        *ln2_rstd, *fch, *fch_gelu, *fcproj, *res2;
  };

  float* Buffer(size_t n) {
    owned_.push_back(ops_.Alloc(n));
    return owned_.back();
  }
  const float* P(size_t offset) const { return params_ + offset; }
  float* G(size_t offset) const { return grads_ + offset; }

  double Forward() {
    const int B = s_.batch, T = s_.seq, C = s_.channels, NH = s_.heads, V = s_.vocab;
    const int N = static_cast<int>(bt_);
    ops_.EncoderForward(encoded_, tokens_, P(lay_.wte), P(lay_.wpe), nullptr, B, T, C);
    const float* x = encoded_;
    for (int l = 0; l < s_.layers; ++l) {
      const GptLayout::Layer& w = lay_.layer[l];
      Acts& a = acts_[l];
      ops_.LayerNormForward(a.ln1, a.ln1_mean, a.ln1_rstd, x, P(w.ln1w), P(w.ln1b), N, C);
      ops_.MatmulForward(a.qkv, a.ln1, P(w.qkvw), P(w.qkvb), N, C, 3 * C);
      ops_.AttentionForward(a.atty, a.att, a.qkv, nullptr, B, T, C, NH);
      ops_.MatmulForward(a.attproj, a.atty, P(w.projw), P(w.projb), N, C, C);
      ops_.ResidualForward(a.res1, x, a.attproj, bt_ * C);
      ops_.LayerNormForward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res1, P(w.ln2w), P(w.ln2b), N, C);
      ops_.MatmulForward(a.fch, a.ln2, P(w.fcw), P(w.fcb), N, C, 4 * C);
      ops_.GeluForward(a.fch_gelu, a.fch, bt_ * 4 * C);
      ops_.MatmulForward(a.fcproj, a.fch_gelu, P(w.fcprojw), P(w.fcprojb), N, 4 * C, C);
      ops_.ResidualForward(a.res2, a.res1, a.fcproj, bt_ * C);
      x = a.res2;
    }
    ops_.LayerNormForward(lnf_, lnf_mean_, lnf_rstd_, x, P(lay_.lnfw), P(lay_.lnfb), N, C);
    ops_.MatmulForward(logits_, lnf_, P(lay_.head), nullptr, N, C, V);
    ops_.CrossEntropyForward(losses_, probs_, logits_, targets_, N, V, V);
    return ops_.Sum(losses_, bt_) / static_cast<double>(bt_);
  }

  // Reverse of Forward. dres_ carries d(loss)/d(residual stream) down the layers; the other
  // gradient buffers are zeroed before each use since backward ops add.
  void Backward() {
    const int B = s_.batch, T = s_.seq, C = s_.channels, NH = s_.heads, V = s_.vocab;
    const int N = static_cast<int>(bt_);
    const size_t nc = bt_ * C;
    ops_.Zero(dlogits_, bt_ * V);
    ops_.CrossEntropyBackward(dlogits_, probs_, targets_, 1.0f / N, N, V, V);
    ops_.Zero(dln_, nc);
    ops_.MatmulBackwardInput(dln_, dlogits_, P(lay_.head), N, C, V);
    ops_.MatmulBackwardWeight(G(lay_.head), nullptr, dlogits_, lnf_, N, C, V);
    const float* top = s_.layers > 0 ? acts_.back().res2 : encoded_;
    ops_.Zero(dres_, nc);
    ops_.LayerNormBackwardInput(dres_, dres_, dln_, top, P(lay_.lnfw), lnf_mean_, lnf_rstd_, N, C);
    ops_.LayerNormBackwardWeight(G(lay_.lnfw), G(lay_.lnfb), dln_, top, lnf_mean_, lnf_rstd_, N, C);
    for (int l = s_.layers - 1; l >= 0; --l) {
      const GptLayout::Layer& w = lay_.layer[l];
      const Acts& a = acts_[l];
      const float* x = l > 0 ? acts_[l - 1].res2 : encoded_;
      // res2 = res1 + fcproj: the MLP branch sees dres_
      ops_.Zero(dfch_gelu_, 4 * nc);
      ops_.MatmulBackwardInput(dfch_gelu_, dres_, P(w.fcprojw), N, 4 * C, C);
      ops_.MatmulBackwardWeight(G(w.fcprojw), G(w.fcprojb), dres_, a.fch_gelu, N, 4 * C, C);
      ops_.Zero(dfch_, 4 * nc);
      ops_.GeluBackward(dfch_, a.fch, dfch_gelu_, 4 * nc);
      ops_.Zero(dln_, nc);
      ops_.MatmulBackwardInput(dln_, dfch_, P(w.fcw), N, C, 4 * C);
      ops_.MatmulBackwardWeight(G(w.fcw), G(w.fcb), dfch_, a.ln2, N, C, 4 * C);
      ops_.LayerNormBackwardInput(dres_, dres_, dln_, a.res1, P(w.ln2w), a.ln2_mean, a.ln2_rstd, N,
                                  C);
      ops_.LayerNormBackwardWeight(G(w.ln2w), G(w.ln2b), dln_, a.res1, a.ln2_mean, a.ln2_rstd, N,
                                   C);
      // res1 = x + attproj
      ops_.Zero(datty_, nc);
      ops_.MatmulBackwardInput(datty_, dres_, P(w.projw), N, C, C);
      ops_.MatmulBackwardWeight(G(w.projw), G(w.projb), dres_, a.atty, N, C, C);
      ops_.Zero(dqkv_, 3 * nc);
      ops_.AttentionBackward(dqkv_, datty_, a.qkv, a.att, nullptr, B, T, C, NH);
      ops_.Zero(dln_, nc);
      ops_.MatmulBackwardInput(dln_, dqkv_, P(w.qkvw), N, C, 3 * C);
      ops_.MatmulBackwardWeight(G(w.qkvw), G(w.qkvb), dqkv_, a.ln1, N, C, 3 * C);
      ops_.LayerNormBackwardInput(dres_, dres_, dln_, x, P(w.ln1w), a.ln1_mean, a.ln1_rstd, N, C);
      ops_.LayerNormBackwardWeight(G(w.ln1w), G(w.ln1b), dln_, x, a.ln1_mean, a.ln1_rstd, N, C);
    }
    ops_.EncoderBackward(G(lay_.wte), G(lay_.wpe), dres_, tokens_, nullptr, B, T, C);
  }

  Ops& ops_;
  const GptShape s_;
  const GptLayout lay_;
  const size_t bt_;
  std::vector<float*> owned_;
  float* params_;
  float* grads_;
  std::vector<Acts> acts_;
  float *encoded_, *lnf_, *lnf_mean_, *lnf_rstd_, *logits_, *probs_, *losses_;
  float *dres_, *dln_, *datty_, *dqkv_, *dfch_, *dfch_gelu_, *dlogits_;
  int32_t* tokens_;
  int32_t* targets_;
};

// Weights around GPT-2's scale (|w| <= 0.05), LayerNorm weights near 1.
std::vector<float> InitParams(const GptShape& s, Random& rng) {
  const GptLayout lay(s);
  std::vector<float> p = UniformVector(rng, lay.size, -0.05f, 0.05f);
  const auto ones = [&](size_t offset) {
    for (int c = 0; c < s.channels; ++c) p[offset + c] = 1.0f;
  };
  for (const GptLayout::Layer& L : lay.layer) {
    ones(L.ln1w);
    ones(L.ln2w);
  }
  ones(lay.lnfw);
  return p;
}

void CheckModel(const Backends& be, Random& rng, Report& report) {
  const GptShape s{2, 64, 4, 40, 3, 256};
  const std::vector<float> params = InitParams(s, rng);
  const size_t bt = static_cast<size_t>(s.batch) * s.seq;
  const std::vector<int32_t> tokens = TokenVector(rng, bt, s.vocab);
  const std::vector<int32_t> targets = TokenVector(rng, bt, s.vocab);
  double loss[2];
  std::vector<float> grads[2];
  OnBoth(be, [&](Ops& ops, Side side) {
    MiniGpt gpt(ops, s, params);
    gpt.SetBatch(tokens, targets);
    loss[side] = gpt.Step();
    grads[side] = gpt.Grads();
  });
  report.CompareScalar("GPT stack L2 C64 T40 B3", "loss", loss[kGpu], loss[kCpu]);
  report.CompareValues("GPT stack L2 C64 T40 B3", "grads", grads[kGpu], grads[kCpu]);
}

// ---- throughput --------------------------------------------------------------------------------

template <typename F>
double SecondsPerCall(Ops& ops, int warmup, int timed, F f) {
  for (int i = 0; i < warmup; ++i) f();
  ops.Synchronize();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < timed; ++i) f();
  ops.Synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / timed;
}

void BenchSgemm(Ops& ops, int n) {
  const size_t nn = static_cast<size_t>(n) * n;
  float* a = ops.Alloc(nn);
  float* b = ops.Alloc(nn);
  float* c = ops.Alloc(nn);
  Random rng(7);
  const std::vector<float> host = UniformVector(rng, nn, -1, 1);
  ops.CopyToDevice(a, host.data(), nn);
  ops.CopyToDevice(b, host.data(), nn);
  const double sec =
      SecondsPerCall(ops, 3, 20, [&] { ops.MatmulForward(c, a, b, nullptr, n, n, n); });
  std::printf("bench sgemm %dx%dx%d (fp32, cuBLAS): %.2f ms, %.1f TFLOP/s\n", n, n, n, sec * 1e3,
              2.0 * n * nn / sec * 1e-12);
  for (float* p : {a, b, c}) ops.Free(p);
}

void BenchModel(Ops& ops, const GptShape& s) {
  Random rng(11);
  const std::vector<float> params = InitParams(s, rng);
  const size_t bt = static_cast<size_t>(s.batch) * s.seq;
  MiniGpt gpt(ops, s, params);
  gpt.SetBatch(TokenVector(rng, bt, s.vocab), TokenVector(rng, bt, s.vocab));
  double loss = 0.0;
  const double sec = SecondsPerCall(ops, 2, 5, [&] { loss = gpt.Step(); });
  // Training FLOPs per token: 6 per parameter plus attention's 12 L T C (PaLM, Chowdhery et al.
  // 2022, appendix B), counting the full T x T scores although only the causal half is computed.
  const double params_count = static_cast<double>(MiniGpt::NumParams(s));
  const double flops = (6.0 * params_count + 12.0 * s.layers * s.seq * s.channels) * bt;
  std::printf(
      "bench GPT stack L%d C%d NH%d T%d B%d V%d (%.1fM params): forward+backward %.1f ms, "
      "%.0f tokens/s, %.1f TFLOP/s (model FLOPs), loss %.4f\n",
      s.layers, s.channels, s.heads, s.seq, s.batch, s.vocab, params_count * 1e-6, sec * 1e3,
      bt / sec, flops / sec * 1e-12, loss);
}

// train.precision bf16: cublasGemmEx on bf16 operands against the CPU's bf16 matmuls, and a
// product that must differ from fp32's by bf16's rounding (about 2^-9 relative), so a backend
// that ignored the precision fails.
bool CheckBf16(Random& rng, Report& report) {
  absl::StatusOr<std::unique_ptr<Ops>> cuda = MakeOps("cuda:0", 1, common::Precision::kBf16);
  absl::StatusOr<std::unique_ptr<Ops>> cpu = MakeOps("cpu", 1, common::Precision::kBf16);
  absl::StatusOr<std::unique_ptr<Ops>> fp32 = MakeOps("cpu");
  for (const auto* made : {&cuda, &cpu, &fp32}) {
    if (!made->ok()) {
      std::fprintf(stderr, "gpu_ops_compare: bf16: %s\n", made->status().ToString().c_str());
      return false;
    }
  }
  CheckMatmul(Backends{{cpu->get(), cuda->get()}}, rng, report, "bf16 ");
  const Backends vs_fp32{{fp32->get(), cuda->get()}};
  const int N = 64, IC = 96, OC = 48;
  Twin inp(vs_fp32, N * IC), weight(vs_fp32, OC * IC), out(vs_fp32, N * OC);
  inp.Uniform(rng, -1, 1), weight.Uniform(rng, -1, 1);
  OnBoth(vs_fp32, [&](Ops& ops, Side s) {
    ops.MatmulForward(out[s], inp[s], weight[s], nullptr, N, IC, OC);
  });
  const double apart = RelativeError(out.Values(kGpu), out.Values(kCpu));
  std::printf("bf16 MatmulForward (%s) vs fp32: relative difference %.2e (must exceed 1e-4)\n",
              (*cuda)->MatmulPath().c_str(), apart);
  return apart > 1e-4;
}

int Main() {
  if (!CudaDeviceAvailable()) {
    std::printf("gpu_ops_compare: no CUDA device visible; skipped\n");
    return 77;
  }
  absl::StatusOr<std::unique_ptr<Ops>> cuda = MakeOps("cuda:0");
  absl::StatusOr<std::unique_ptr<Ops>> cpu = MakeOps("cpu");
  for (const auto* made : {&cuda, &cpu}) {
    if (!made->ok()) {
      std::fprintf(stderr, "gpu_ops_compare: %s\n", made->status().ToString().c_str());
      return 1;
    }
  }
  const Backends be{{cpu->get(), cuda->get()}};
  Random rng(2024);
  Report report(absl::GetFlag(FLAGS_tolerance));
  CheckElementwise(be, rng, report);
  CheckEncoder(be, rng, report);
  {
    // Document positions t - doc_start of the packed rows the attention checks use (B3 T45).
    std::vector<int32_t> positions = PackedDocStarts(3, 45);
    for (size_t i = 0; i < positions.size(); ++i) {
      positions[i] = static_cast<int32_t>(i % 45) - positions[i];
    }
    CheckEncoder(be, rng, report, positions);
  }
  CheckLayerNorm(be, rng, report);
  CheckMatmul(be, rng, report);
  CheckAttention(be, rng, report, 2, 19, 48, 4);   // hs 12
  CheckAttention(be, rng, report, 2, 75, 256, 4);  // hs 64, T over two warps
  CheckAttention(be, rng, report, 2, 19, 48, 4, PackedDocStarts(2, 19));
  CheckAttention(be, rng, report, 2, 75, 256, 4, PackedDocStarts(2, 75));
  CheckCrossEntropy(be, rng, report);
  CheckAdamW(be, rng, report);
  CheckModel(be, rng, report);
  if (!CheckBf16(rng, report)) return 1;
  std::printf("backends: %s vs %s\n", be.side[kGpu]->Name().c_str(), be.side[kCpu]->Name().c_str());
  const bool ok = report.Print();
  if (absl::GetFlag(FLAGS_bench)) {
    BenchSgemm(*be.side[kGpu], absl::GetFlag(FLAGS_bench_sgemm));
    BenchModel(*be.side[kGpu],
               GptShape{absl::GetFlag(FLAGS_bench_layers), absl::GetFlag(FLAGS_bench_channels),
                        absl::GetFlag(FLAGS_bench_heads), absl::GetFlag(FLAGS_bench_seq),
                        absl::GetFlag(FLAGS_bench_batch), absl::GetFlag(FLAGS_bench_vocab)});
  }
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace pp::kernels

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return pp::kernels::Main();
}
