// Tensors of the Hugging Face GPT-2 layout <-> ours, and the folder of config.json +
// model.safetensors. The name table is in common/hf_gpt2.h.
#include "common/hf_gpt2.h"

#include <filesystem>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_io.h"
#include "common/job_spec.h"
#include "common/path_roots.h"

namespace pp::common {
namespace {

constexpr char kPrefix[] = "transformer.";

// One of our tensors and its HF twin. `shape` is ours; transposed ones are [shape[1], shape[0]]
// in HF's Conv1D layout.
struct Pair {
  std::string ours;
  std::string hf;  // without kPrefix for the transformer's own tensors
  std::vector<int64_t> shape;
  bool transposed = false;
  bool prefixed = true;
  bool vocab_rows = false;  // wte, lm_head: one row per id; HF holds the real ids' rows only
};

// Our tensor list (docs/model.md "Tensor names") with each one's HF name, in unit order.
std::vector<Pair> Pairs(const pp::v1::ModelSpec& m) {
  const int64_t V = m.vocab_size(), T = m.seq_len(), C = m.d_model();
  std::vector<Pair> p = {{"wte.weight", "wte.weight", {V, C}, false, true, true},
                         {"wpe.weight", "wpe.weight", {T, C}}};
  for (int i = 0; i < m.n_layers(); ++i) {
    const std::string h = absl::StrCat("h.", i, ".");
    auto add = [&](const std::string& ours, const std::string& hf, std::vector<int64_t> shape,
                   bool transposed = false) {
      p.push_back({h + ours, h + hf, std::move(shape), transposed});
    };
    add("ln_1.weight", "ln_1.weight", {C});
    add("ln_1.bias", "ln_1.bias", {C});
    add("attn.qkv.weight", "attn.c_attn.weight", {3 * C, C}, true);
    add("attn.qkv.bias", "attn.c_attn.bias", {3 * C});
    add("attn.proj.weight", "attn.c_proj.weight", {C, C}, true);
    add("attn.proj.bias", "attn.c_proj.bias", {C});
    add("ln_2.weight", "ln_2.weight", {C});
    add("ln_2.bias", "ln_2.bias", {C});
    add("mlp.fc.weight", "mlp.c_fc.weight", {4 * C, C}, true);
    add("mlp.fc.bias", "mlp.c_fc.bias", {4 * C});
    add("mlp.proj.weight", "mlp.c_proj.weight", {C, 4 * C}, true);
    add("mlp.proj.bias", "mlp.c_proj.bias", {C});
  }
  p.push_back({"ln_f.weight", "ln_f.weight", {C}});
  p.push_back({"ln_f.bias", "ln_f.bias", {C}});
  if (!m.tie_embeddings()) {
    p.push_back({"lm_head.weight", "lm_head.weight", {V, C}, false, false, true});
  }
  return p;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// rows x cols, row-major -> cols x rows, row-major.
std::vector<float> Transpose(const std::vector<float>& in, int64_t rows, int64_t cols) {
  std::vector<float> out(in.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = in[r * cols + c];
  }
  return out;
}

std::vector<int64_t> HfShape(const Pair& p) {
  return p.transposed ? std::vector<int64_t>{p.shape[1], p.shape[0]} : p.shape;
}

// The HF tensors by their unprefixed name, without the causal-mask buffers; duplicates refused.
absl::StatusOr<std::map<std::string, Tensor>> ByName(std::vector<Tensor> hf,
                                                     absl::string_view origin) {
  std::map<std::string, Tensor> by_name;
  for (Tensor& t : hf) {
    std::string name = t.name;
    if (absl::StartsWith(name, kPrefix)) name = name.substr(sizeof(kPrefix) - 1);
    if (absl::EndsWith(name, ".attn.bias") || absl::EndsWith(name, ".attn.masked_bias")) continue;
    if (by_name.count(name) > 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          origin, ": tensor ", name, " appears twice (with and without ", kPrefix, ")"));
    }
    by_name[name] = std::move(t);
  }
  return by_name;
}

}  // namespace

absl::StatusOr<std::vector<Tensor>> ToHfGpt2Tensors(const pp::v1::ModelSpec& model,
                                                    const std::map<std::string, Tensor>& ours) {
  std::vector<Tensor> out;
  for (const Pair& p : Pairs(model)) {
    auto it = ours.find(p.ours);
    if (it == ours.end()) {
      return absl::InvalidArgumentError(absl::StrCat("the checkpoint has no tensor ", p.ours));
    }
    if (it->second.shape != p.shape) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", p.ours, " has shape ",
                                                     ShapeText(it->second.shape),
                                                     ", the spec's is ", ShapeText(p.shape)));
    }
    Tensor t;
    t.name = p.prefixed ? absl::StrCat(kPrefix, p.hf) : p.hf;
    t.shape = HfShape(p);
    t.data = p.transposed ? Transpose(it->second.data, p.shape[0], p.shape[1]) : it->second.data;
    if (p.vocab_rows) {  // the padding rows [real, V) stay behind: HF's vocab_size is the real one
      t.shape[0] = RealVocabSize(model);
      t.data.resize(static_cast<size_t>(t.shape[0] * t.shape[1]));
    }
    out.push_back(std::move(t));
  }
  return out;
}

absl::StatusOr<std::map<std::string, Tensor>> FromHfGpt2Tensors(const pp::v1::ModelSpec& model,
                                                                std::vector<Tensor> hf,
                                                                absl::string_view origin) {
  absl::StatusOr<std::map<std::string, Tensor>> by_name = ByName(std::move(hf), origin);
  if (!by_name.ok()) return by_name.status();
  std::map<std::string, Tensor> ours;
  for (const Pair& p : Pairs(model)) {
    auto it = by_name->find(p.hf);
    if (it == by_name->end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(origin, ": no tensor ", p.hf, " (", p.prefixed ? kPrefix : "", p.hf, ")"));
    }
    if (it->second.shape != HfShape(p)) {
      return absl::InvalidArgumentError(
          absl::StrCat(origin, ": tensor ", p.hf, " has shape ", ShapeText(it->second.shape),
                       ", config.json needs ", ShapeText(HfShape(p))));
    }
    Tensor t{p.ours, p.shape, {}};
    t.data = p.transposed ? Transpose(it->second.data, p.shape[1], p.shape[0])
                          : std::move(it->second.data);
    ours[p.ours] = std::move(t);
    by_name->erase(it);
  }
  if (auto head = by_name->find("lm_head.weight"); head != by_name->end()) {
    // save_pretrained drops a tied head; other writers keep the copy. Only a true copy is tied.
    const Tensor& wte = ours["wte.weight"];
    if (head->second.shape != wte.shape || head->second.data != wte.data) {
      return absl::InvalidArgumentError(absl::StrCat(
          origin, ": lm_head.weight differs from wte.weight but config.json ties them"));
    }
    by_name->erase(head);
  }
  if (!by_name->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": unknown tensor ",
                                                   by_name->begin()->first, " (", by_name->size(),
                                                   " not in GPT-2)"));
  }
  return ours;
}

void PadVocabRows(const pp::v1::ModelSpec& model, std::map<std::string, Tensor>* ours) {
  const int64_t real = RealVocabSize(model), V = model.vocab_size();
  for (const char* name : {"wte.weight", "lm_head.weight"}) {
    auto it = ours->find(name);
    if (it == ours->end() || it->second.shape.size() != 2 || it->second.shape[0] != real ||
        real >= V) {
      continue;
    }
    it->second.shape[0] = V;
    it->second.data.resize(static_cast<size_t>(V * it->second.shape[1]), 0.0f);
  }
}

absl::Status WriteHfGpt2(const std::string& dir, const pp::v1::ModelSpec& model,
                         const std::map<std::string, Tensor>& ours) {
  absl::StatusOr<std::vector<Tensor>> hf = ToHfGpt2Tensors(model, ours);
  if (!hf.ok()) return hf.status();
  if (absl::Status s = MakeDirs(dir); !s.ok()) return s;
  // transformers refuses a safetensors file whose metadata does not say which framework wrote it.
  if (absl::Status s =
          WriteSafetensors(absl::StrCat(dir, "/", kHfWeightsFile), *hf, {{"format", "pt"}});
      !s.ok()) {
    return s;
  }
  return WriteFileAtomic(absl::StrCat(dir, "/", kHfConfigFile), HfGpt2ConfigJson(model));
}

absl::StatusOr<HfGpt2Model> ReadHfGpt2(const std::string& dir,
                                       const std::vector<std::string>& data_roots) {
  const std::string weights_path = absl::StrCat(dir, "/", kHfWeightsFile);
  std::error_code ec;
  if (!std::filesystem::exists(weights_path, ec)) {
    for (const char* other : {"model.safetensors.index.json", "pytorch_model.bin"}) {
      if (std::filesystem::exists(absl::StrCat(dir, "/", other), ec)) {
        return absl::InvalidArgumentError(absl::StrCat(
            dir, ": has ", other, " but no ", kHfWeightsFile,
            "; only a single-file safetensors model is read (save_pretrained's default)"));
      }
    }
  }
  HfGpt2Model out;
  absl::StatusOr<pp::v1::ModelSpec> model = ReadHfGpt2Config(dir, data_roots);
  if (!model.ok()) return model.status();
  out.model = *model;
  absl::StatusOr<RegularFile> weights =
      OpenUnderRoots(kHfWeightsFile, weights_path, data_roots, "data_root");
  if (!weights.ok()) return weights.status();
  absl::StatusOr<std::string> bytes = ReadWhole(*weights);
  if (!bytes.ok()) return bytes.status();
  absl::StatusOr<SafetensorsFile> file = ParseSafetensors(*bytes, weights_path);
  if (!file.ok()) return file.status();
  absl::StatusOr<std::map<std::string, Tensor>> tensors =
      FromHfGpt2Tensors(out.model, std::move(file->tensors), weights_path);
  if (!tensors.ok()) return tensors.status();
  out.tensors = *std::move(tensors);
  return out;
}

absl::StatusOr<HfGpt2Model> ReadInitFrom(const pp::v1::ModelSpec& model,
                                         const std::vector<std::string>& data_roots) {
  absl::StatusOr<HfGpt2Model> hf = ReadHfGpt2(model.init_from(), data_roots);
  if (!hf.ok()) {
    return absl::Status(hf.status().code(),
                        absl::StrCat("model.init_from: ", hf.status().message()));
  }
  if (hf->model.vocab_size() == RealVocabSize(model)) PadVocabRows(model, &hf->tensors);
  return hf;
}

}  // namespace pp::common
