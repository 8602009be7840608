// The inference path of sample.h: whole-sequence logits with the batch kernels, one-token steps
// with a host key/value cache, and sampling.
#include "worker/trainer/sample.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/checkpoint.h"
#include "common/spec_bounds.h"
#include "kernels/ops.h"
#include "common/splitmix.h"
#include "worker/model/model.h"

namespace pp::trainer {
namespace {

uint64_t Mix(uint64_t z) { return common::SplitMix(z); }  // common/splitmix.h

// Backend buffers of one forward over N positions, freed with the object.
struct Buffers {
  kernels::Ops* ops;
  std::vector<float*> owned;
  float* Get(size_t n) { return owned.emplace_back(ops->Alloc(n)); }
  ~Buffers() {
    for (float* p : owned) ops->Free(p);
  }
};

}  // namespace

class Decoder::Impl {
 public:
  std::unique_ptr<kernels::Ops> ops;
  model::ModelConfig cfg;
  std::map<std::string, float*> w;      // backend copies of the weights
  std::vector<float> k_cache, v_cache;  // (n_layers, seq_len, C) each
  int cached = 0;                       // positions in the cache

  ~Impl() {
    for (auto& [name, p] : w) ops->Free(p);
  }
  const float* W(const std::string& name) const { return w.at(name); }
  const float* HeadWeight() const {
    return W(cfg.tie_embeddings ? "wte.weight" : "lm_head.weight");
  }

  // One block over x (N,C) in place; attention(qkv, att_out) fills att_out (N,C) from qkv (N,3C).
  template <typename Attention>
  void Block(int l, float* x, int N, Buffers& buf, Attention attention) {
    const int C = cfg.d_model;
    const std::string h = absl::StrCat("h.", l, ".");
    float* ln = buf.Get(size_t(N) * C);
    float* mean = buf.Get(N);
    float* rstd = buf.Get(N);
    float* qkv = buf.Get(size_t(N) * 3 * C);
    float* att = buf.Get(size_t(N) * C);
    float* proj = buf.Get(size_t(N) * C);
    float* fc = buf.Get(size_t(N) * 4 * C);
    float* gelu = buf.Get(size_t(N) * 4 * C);
    ops->LayerNormForward(ln, mean, rstd, x, W(h + "ln_1.weight"), W(h + "ln_1.bias"), N, C);
    ops->MatmulForward(qkv, ln, W(h + "attn.qkv.weight"), W(h + "attn.qkv.bias"), N, C, 3 * C);
    attention(qkv, att);
    ops->MatmulForward(proj, att, W(h + "attn.proj.weight"), W(h + "attn.proj.bias"), N, C, C);
    ops->Add(x, proj, size_t(N) * C);
    ops->LayerNormForward(ln, mean, rstd, x, W(h + "ln_2.weight"), W(h + "ln_2.bias"), N, C);
    ops->MatmulForward(fc, ln, W(h + "mlp.fc.weight"), W(h + "mlp.fc.bias"), N, C, 4 * C);
    ops->GeluForward(gelu, fc, size_t(N) * 4 * C);
    ops->MatmulForward(proj, gelu, W(h + "mlp.proj.weight"), W(h + "mlp.proj.bias"), N, 4 * C, C);
    ops->Add(x, proj, size_t(N) * C);
  }

  // ln_f and the head over x (N,C) -> logits (N,V) -> their real columns (N,Vr) on the host: the
  // padding columns are dropped here, so nothing downstream can sample them.
  std::vector<float> Head(const float* x, int N, Buffers& buf) {
    const int C = cfg.d_model, V = cfg.vocab_size, Vr = cfg.real_vocab();
    float* ln = buf.Get(size_t(N) * C);
    float* mean = buf.Get(N);
    float* rstd = buf.Get(N);
    float* logits = buf.Get(size_t(N) * V);
    ops->LayerNormForward(ln, mean, rstd, x, W("ln_f.weight"), W("ln_f.bias"), N, C);
    ops->MatmulForward(logits, ln, HeadWeight(), nullptr, N, C, V);
    std::vector<float> out(size_t(N) * V);
    ops->CopyToHost(out.data(), logits, out.size());
    for (int n = 1; n < N && Vr < V; ++n) {
      std::copy_n(&out[size_t(n) * V], Vr, &out[size_t(n) * Vr]);
    }
    out.resize(size_t(N) * Vr);
    return out;
  }

  // x (1,C) of the token at position `pos` (wpe row pos).
  float* Embed(const int32_t* tokens, int N, int pos, Buffers& buf) {
    float* x = buf.Get(size_t(N) * cfg.d_model);
    int32_t* dev_tokens = ops->AllocInt(N);
    ops->CopyIntToDevice(dev_tokens, tokens, N);
    ops->EncoderForward(x, dev_tokens, W("wte.weight"), W("wpe.weight") + size_t(pos) * cfg.d_model,
                        nullptr, 1, N, cfg.d_model);
    ops->Free(dev_tokens);
    return x;
  }

  // One query (the newest position) against the cache of layer l: its k, v are appended first.
  // qkv (3C) -> out (C); per head softmax(q k_j / sqrt(hs)) over j <= pos, then sum p_j v_j.
  void CachedAttention(int l, const float* qkv, float* out) {
    const int C = cfg.d_model, NH = cfg.n_heads, hs = C / NH, pos = cached;
    std::vector<float> host(3 * C), o(C);
    ops->CopyToHost(host.data(), qkv, host.size());
    float* k = &k_cache[(size_t(l) * cfg.seq_len + pos) * C];
    float* v = &v_cache[(size_t(l) * cfg.seq_len + pos) * C];
    std::copy(host.begin() + C, host.begin() + 2 * C, k);
    std::copy(host.begin() + 2 * C, host.end(), v);
    const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
    std::vector<float> p(pos + 1);
    for (int h = 0; h < NH; ++h) {
      const float* q = &host[size_t(h) * hs];
      float max = -INFINITY;
      for (int j = 0; j <= pos; ++j) {
        const float* kj = &k_cache[(size_t(l) * cfg.seq_len + j) * C + size_t(h) * hs];
        float s = 0.0f;
        for (int d = 0; d < hs; ++d) s += q[d] * kj[d];
        p[j] = s * scale;
        max = std::max(max, p[j]);
      }
      float sum = 0.0f;
      for (int j = 0; j <= pos; ++j) sum += (p[j] = std::exp(p[j] - max));
      for (int d = 0; d < hs; ++d) o[size_t(h) * hs + d] = 0.0f;
      for (int j = 0; j <= pos; ++j) {
        const float* vj = &v_cache[(size_t(l) * cfg.seq_len + j) * C + size_t(h) * hs];
        const float pj = p[j] / sum;
        for (int d = 0; d < hs; ++d) o[size_t(h) * hs + d] += pj * vj[d];
      }
    }
    ops->CopyToDevice(out, o.data(), o.size());
  }
};

Decoder::Decoder(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Decoder::~Decoder() = default;
int Decoder::vocab_size() const { return impl_->cfg.vocab_size; }
int Decoder::real_vocab_size() const { return impl_->cfg.real_vocab(); }
int Decoder::seq_len() const { return impl_->cfg.seq_len; }
void Decoder::Reset() { impl_->cached = 0; }

absl::StatusOr<std::unique_ptr<Decoder>> Decoder::Create(
    const pp::v1::ModelSpec& model, const std::map<std::string, common::Tensor>& tensors,
    const std::string& device, int threads) {
  absl::StatusOr<model::ModelConfig> cfg = model::ModelConfigFromSpec(model);
  if (!cfg.ok()) return cfg.status();
  const std::optional<int64_t> cache =
      common::CheckedProduct({cfg->n_layers, cfg->seq_len, cfg->d_model});
  if (!cache || *cache > common::kMaxParameters) {
    return absl::InvalidArgumentError("model too large for the key/value cache");
  }
  auto ops = kernels::MakeOps(device, threads);
  if (!ops.ok()) return ops.status();
  auto impl = std::make_unique<Impl>();
  impl->ops = *std::move(ops);
  impl->cfg = *cfg;
  for (const model::TensorShape& t : model::ModelTensors(*cfg)) {
    auto it = tensors.find(t.name);
    if (it == tensors.end()) return absl::NotFoundError(absl::StrCat("no tensor ", t.name));
    if (it->second.data.size() != t.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", t.name, " has ", it->second.data.size(), " values, want ", t.size()));
    }
    float* p = impl->ops->Alloc(t.size());
    impl->ops->CopyToDevice(p, it->second.data.data(), t.size());
    impl->w[t.name] = p;
  }
  impl->k_cache.assign(static_cast<size_t>(*cache), 0.0f);
  impl->v_cache.assign(static_cast<size_t>(*cache), 0.0f);
  return std::unique_ptr<Decoder>(new Decoder(std::move(impl)));
}

absl::StatusOr<std::vector<float>> Decoder::Logits(const std::vector<int32_t>& tokens) {
  Impl& m = *impl_;
  const int N = static_cast<int>(tokens.size());
  if (N < 1 || N > m.cfg.seq_len) {
    return absl::InvalidArgumentError(
        absl::StrCat(N, " tokens; the model takes 1 to ", m.cfg.seq_len));
  }
  for (int32_t t : tokens) {
    if (t < 0 || t >= m.cfg.real_vocab()) {
      return absl::InvalidArgumentError(absl::StrCat("token ", t, " is outside the vocabulary"));
    }
  }
  Buffers buf{m.ops.get(), {}};
  float* x = m.Embed(tokens.data(), N, 0, buf);
  const int C = m.cfg.d_model, NH = m.cfg.n_heads;
  float* stats = buf.Get(size_t(NH) * N * 2);  // kernels/ops.h; unused here
  for (int l = 0; l < m.cfg.n_layers; ++l) {
    m.Block(l, x, N, buf, [&](const float* qkv, float* out) {
      m.ops->AttentionForward(out, stats, qkv, nullptr, 1, N, C, NH);
    });
  }
  return m.Head(x, N, buf);
}

absl::StatusOr<std::vector<float>> Decoder::Step(int32_t token) {
  Impl& m = *impl_;
  if (m.cached >= m.cfg.seq_len) {
    return absl::OutOfRangeError(
        absl::StrCat("the model takes at most ", m.cfg.seq_len, " positions"));
  }
  if (token < 0 || token >= m.cfg.real_vocab()) {
    return absl::InvalidArgumentError(absl::StrCat("token ", token, " is outside the vocabulary"));
  }
  Buffers buf{m.ops.get(), {}};
  float* x = m.Embed(&token, 1, m.cached, buf);
  for (int l = 0; l < m.cfg.n_layers; ++l) {
    m.Block(l, x, 1, buf, [&](const float* qkv, float* out) { m.CachedAttention(l, qkv, out); });
  }
  ++m.cached;
  return m.Head(x, 1, buf);
}

int32_t SampleToken(const std::vector<float>& logits, double temperature, int top_k, double u) {
  const int V = static_cast<int>(logits.size());
  std::vector<int32_t> ids(V);
  std::iota(ids.begin(), ids.end(), 0);
  // Most likely first, the lower id first on ties: the order does not depend on the sort.
  std::stable_sort(ids.begin(), ids.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  if (temperature <= 0.0) return ids[0];
  const int keep = top_k > 0 && top_k < V ? top_k : V;
  std::vector<double> weight(keep);
  double total = 0.0;
  for (int i = 0; i < keep; ++i) {
    weight[i] = std::exp((static_cast<double>(logits[ids[i]]) - logits[ids[0]]) / temperature);
    total += weight[i];
  }
  double target = u * total, cumulative = 0.0;
  for (int i = 0; i < keep; ++i) {
    cumulative += weight[i];
    if (target < cumulative) return ids[i];
  }
  return ids[keep - 1];
}

absl::StatusOr<std::vector<int32_t>> GenerateTokens(Decoder& decoder,
                                                    const std::vector<int32_t>& prompt,
                                                    const SampleOptions& o) {
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt is empty");
  if (o.tokens < 0 || prompt.size() + size_t(o.tokens) > size_t(decoder.seq_len())) {
    return absl::InvalidArgumentError(absl::StrCat("the prompt (", prompt.size(), " tokens) plus ",
                                                   o.tokens, " tokens exceed the model's ",
                                                   decoder.seq_len(), " positions"));
  }
  std::vector<int32_t> tokens = prompt;
  decoder.Reset();
  std::vector<float> logits;
  for (size_t i = 0; o.use_cache && i < tokens.size(); ++i) {
    absl::StatusOr<std::vector<float>> l = decoder.Step(tokens[i]);
    if (!l.ok()) return l.status();
    logits = *std::move(l);
  }
  const uint64_t key = Mix(o.seed);
  std::vector<int32_t> out;
  for (int i = 0; i < o.tokens; ++i) {
    if (!o.use_cache) {
      absl::StatusOr<std::vector<float>> all = decoder.Logits(tokens);
      if (!all.ok()) return all.status();
      logits.assign(all->end() - decoder.real_vocab_size(), all->end());
    }
    const double u =
        static_cast<double>(Mix(key + (i + 1) * common::kSplitMixGolden) >> 11) * 0x1.0p-53;
    const int32_t next = SampleToken(logits, o.temperature, o.top_k, u);
    out.push_back(next);
    tokens.push_back(next);
    if (next == o.stop_token) break;
    if (o.use_cache && i + 1 < o.tokens) {
      absl::StatusOr<std::vector<float>> l = decoder.Step(next);
      if (!l.ok()) return l.status();
      logits = *std::move(l);
    }
  }
  return out;
}

absl::StatusOr<std::string> Generate(Decoder& decoder, const SampleOptions& o) {
  if (decoder.real_vocab_size() != 256) {  // a byte-level table may be padded
    return absl::FailedPreconditionError(
        absl::StrCat("sample prints bytes: it needs a byte-level model (256 ids), this one has ",
                     decoder.real_vocab_size()));
  }
  if (o.prompt.empty()) return absl::InvalidArgumentError("the prompt is empty");
  if (o.tokens < 0 || o.prompt.size() + size_t(o.tokens) > size_t(decoder.seq_len())) {
    return absl::InvalidArgumentError(absl::StrCat("the prompt (", o.prompt.size(), " bytes) plus ",
                                                   o.tokens, " tokens exceed the model's ",
                                                   decoder.seq_len(), " positions"));
  }
  std::vector<int32_t> prompt;
  for (unsigned char c : o.prompt) prompt.push_back(c);
  absl::StatusOr<std::vector<int32_t>> ids = GenerateTokens(decoder, prompt, o);
  if (!ids.ok()) return ids.status();
  std::string out;
  for (int32_t id : *ids) out.push_back(static_cast<char>(id));
  return out;
}

absl::StatusOr<std::unique_ptr<Decoder>> LoadDecoder(const std::string& step_dir, int threads,
                                                     pp::v1::JobSpec* job) {
  absl::StatusOr<common::Checkpoint> checkpoint = common::LoadCheckpoint(
      step_dir, [](const std::string& name) { return !absl::StartsWith(name, "optim."); });
  if (!checkpoint.ok()) return checkpoint.status();
  if (job != nullptr) *job = checkpoint->manifest.spec();
  return Decoder::Create(checkpoint->manifest.spec().model(), checkpoint->tensors, "cpu", threads);
}

}  // namespace pp::trainer
