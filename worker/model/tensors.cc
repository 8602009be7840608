// Tensor names, shapes, deterministic initial values, tensor-parallel slices and host copies.
#include <cmath>
#include <numbers>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/checkpoint.h"
#include "common/splitmix.h"
#include "worker/model/model.h"

namespace pp::model {
namespace {

uint64_t Mix(uint64_t z) { return common::SplitMix(z); }  // common/splitmix.h
constexpr uint64_t kGolden = common::kSplitMixGolden;

// FNV-1a, 64 bit.
uint64_t HashName(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

}  // namespace

absl::StatusOr<ModelConfig> ModelConfigFromSpec(const pp::v1::ModelSpec& spec) {
  ModelConfig c;
  c.vocab_size = spec.vocab_size();
  c.real_vocab_size = spec.real_vocab_size();
  c.seq_len = spec.seq_len();
  c.d_model = spec.d_model();
  c.n_heads = spec.n_heads();
  c.n_layers = spec.n_layers();
  c.tie_embeddings = spec.tie_embeddings();
  if (spec.positions() == "document") {
    c.document_positions = true;
  } else if (!spec.positions().empty() && spec.positions() != "absolute") {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.positions must be \"absolute\" or \"document\", got \"", spec.positions(), "\""));
  }
  const std::pair<const char*, int> positive[] = {{"vocab_size", c.vocab_size},
                                                  {"seq_len", c.seq_len},
                                                  {"d_model", c.d_model},
                                                  {"n_heads", c.n_heads},
                                                  {"n_layers", c.n_layers}};
  for (const auto& [name, value] : positive) {
    if (value <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("model.", name, " must be > 0, got ", value));
    }
  }
  if (c.d_model % c.n_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.n_heads (", c.n_heads, ") must divide model.d_model (", c.d_model, ")"));
  }
  if (c.real_vocab_size < 0 || c.real_vocab_size > c.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("model.real_vocab_size must be in [0, ",
                                                   c.vocab_size, "], got ", c.real_vocab_size));
  }
  return c;
}

int NumUnits(const ModelConfig& config) { return config.n_layers + 2; }

size_t TensorShape::size() const {
  size_t n = 1;
  for (int d : shape) n *= static_cast<size_t>(d);
  return n;
}

std::vector<TensorShape> UnitTensors(const ModelConfig& config, int unit) {
  const int C = config.d_model, V = config.vocab_size;
  if (unit == 0) return {{"wte.weight", {V, C}}, {"wpe.weight", {config.seq_len, C}}};
  if (unit == config.n_layers + 1) {
    std::vector<TensorShape> t = {{"ln_f.weight", {C}}, {"ln_f.bias", {C}}};
    if (!config.tie_embeddings) t.push_back({"lm_head.weight", {V, C}});
    return t;
  }
  const std::string p = absl::StrCat("h.", unit - 1, ".");
  return {{p + "ln_1.weight", {C}},
          {p + "ln_1.bias", {C}},
          {p + "attn.qkv.weight", {3 * C, C}},
          {p + "attn.qkv.bias", {3 * C}},
          {p + "attn.proj.weight", {C, C}},
          {p + "attn.proj.bias", {C}},
          {p + "ln_2.weight", {C}},
          {p + "ln_2.bias", {C}},
          {p + "mlp.fc.weight", {4 * C, C}},
          {p + "mlp.fc.bias", {4 * C}},
          {p + "mlp.proj.weight", {C, 4 * C}},
          {p + "mlp.proj.bias", {C}}};
}

std::vector<TensorShape> ModelTensors(const ModelConfig& config) {
  std::vector<TensorShape> all;
  for (int u = 0; u < NumUnits(config); ++u) {
    for (auto& t : UnitTensors(config, u)) all.push_back(std::move(t));
  }
  return all;
}

int64_t NumParameters(const ModelConfig& config) {
  int64_t n = 0;
  for (const auto& t : ModelTensors(config)) n += static_cast<int64_t>(t.size());
  return n;
}

std::vector<float> InitTensorValues(const TensorShape& tensor, int n_layers, uint64_t seed) {
  const size_t n = tensor.size();
  const bool layer_norm = absl::StrContains(tensor.name, "ln_");
  if (absl::EndsWith(tensor.name, ".bias")) return std::vector<float>(n, 0.0f);
  if (layer_norm) return std::vector<float>(n, 1.0f);
  double stddev = 0.02;
  if (absl::EndsWith(tensor.name, "attn.proj.weight") ||
      absl::EndsWith(tensor.name, "mlp.proj.weight")) {
    stddev /= std::sqrt(2.0 * n_layers);
  }
  const uint64_t key = Mix(seed ^ HashName(tensor.name));
  std::vector<float> out(n);
  // Box-Muller on counter pairs: element 2p and 2p+1 share draws 2p+1, 2p+2.
  for (size_t p = 0; 2 * p < n; ++p) {
    uint64_t a = Mix(key + (2 * p + 1) * kGolden), b = Mix(key + (2 * p + 2) * kGolden);
    double u1 = (static_cast<double>(a >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
    double u2 = static_cast<double>(b >> 11) * 0x1.0p-53;          // [0, 1)
    double r = std::sqrt(-2.0 * std::log(u1)), angle = 2.0 * std::numbers::pi * u2;
    out[2 * p] = static_cast<float>(stddev * r * std::cos(angle));
    if (2 * p + 1 < n) out[2 * p + 1] = static_cast<float>(stddev * r * std::sin(angle));
  }
  return out;
}

absl::StatusOr<common::TensorSlice> TensorParallelSlice(const ModelConfig& config,
                                                        const TensorShape& tensor, int tp_rank,
                                                        int tp_size) {
  if (tp_size < 1 || tp_rank < 0 || tp_rank >= tp_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor-parallel rank ", tp_rank, " is outside [0, ", tp_size, ")"));
  }
  if (config.n_heads % tp_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor parallelism ", tp_size, " does not divide model.n_heads (", config.n_heads, ")"));
  }
  if (tensor.shape.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", tensor.name, "' has no shape"));
  }
  const std::string& n = tensor.name;
  const int C = config.d_model;
  // (dim, parts, block): how a split tensor is cut; anything else is replicated.
  int dim = 0, parts = 1, block = tensor.shape[0];
  if (absl::EndsWith(n, ".attn.qkv.weight") || absl::EndsWith(n, ".attn.qkv.bias")) {
    parts = 3, block = C;
  } else if (absl::EndsWith(n, ".mlp.fc.weight") || absl::EndsWith(n, ".mlp.fc.bias")) {
    block = 4 * C;
  } else if (absl::EndsWith(n, ".attn.proj.weight")) {
    dim = 1, block = C;
  } else if (absl::EndsWith(n, ".mlp.proj.weight")) {
    dim = 1, block = 4 * C;
  } else {
    return common::TensorSlice{0, 1, 0, tensor.shape[0]};
  }
  const int length = block / tp_size;
  return common::TensorSlice{dim, parts, tp_rank * length, length};
}

std::vector<common::Tensor> HostTensors(kernels::Ops& ops,
                                        const std::vector<ModelTensor>& tensors) {
  std::vector<common::Tensor> out;
  auto add = [&](const std::string& name, const ModelTensor& t, const float* src) {
    common::Tensor host;
    host.name = name;
    host.shape.assign(t.shape.begin(), t.shape.end());
    host.data.resize(t.size);
    ops.CopyToHost(host.data.data(), src, t.size);
    out.push_back(std::move(host));
  };
  for (const ModelTensor& t : tensors) {
    add(t.name, t, t.value);
    add(common::ExpAvgName(t.name), t, t.exp_avg);
    add(common::ExpAvgSqName(t.name), t, t.exp_avg_sq);
  }
  return out;
}

}  // namespace pp::model
