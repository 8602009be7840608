// config.json of the Hugging Face GPT-2 layout: reading (checked against the numerics we compute)
// and writing. Keys and defaults are those of transformers' GPT2Config.
#include <google/protobuf/struct.pb.h>

#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_io.h"
#include "common/hf_gpt2.h"
#include "common/job_spec.h"
#include "common/path_roots.h"
#include "common/proto_io.h"
#include "common/spec_bounds.h"

namespace pp::common {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

absl::Status Refuse(absl::string_view origin, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(origin, ": ", what));
}

// The value of `key`, or null when absent or JSON null (transformers' "use the default").
const Value* Field(const Struct& root, const std::string& key) {
  auto it = root.fields().find(key);
  if (it == root.fields().end() || it->second.kind_case() == Value::kNullValue) return nullptr;
  return &it->second;
}

// A required integer in [1, max].
absl::StatusOr<int> PositiveInt(const Struct& root, const std::string& key, int64_t max,
                                absl::string_view origin) {
  const Value* v = Field(root, key);
  if (v == nullptr) return Refuse(origin, absl::StrCat(key, " is missing"));
  if (v->kind_case() != Value::kNumberValue) {
    return Refuse(origin, absl::StrCat(key, " must be a number"));
  }
  const double d = v->number_value();
  if (!(d >= 1 && d <= static_cast<double>(max)) || std::floor(d) != d) {
    return Refuse(origin, absl::StrCat(key, " must be an integer in [1, ", max, "], got ", d));
  }
  return static_cast<int>(d);
}

// An optional boolean that must equal `want` (the numerics we compute) when present.
absl::Status BoolIs(const Struct& root, const std::string& key, bool want,
                    absl::string_view origin) {
  const Value* v = Field(root, key);
  if (v == nullptr) return absl::OkStatus();
  if (v->kind_case() != Value::kBoolValue) {
    return Refuse(origin, absl::StrCat(key, " must be true or false"));
  }
  if (v->bool_value() != want) {
    return Refuse(origin, absl::StrCat(key, " ", v->bool_value() ? "true" : "false",
                                       " is not supported (only ", want ? "true" : "false", ")"));
  }
  return absl::OkStatus();
}

// The keys that change the arithmetic: each must describe what worker/model computes.
absl::Status CheckNumerics(const Struct& root, int n_embd, absl::string_view origin) {
  if (const Value* v = Field(root, "model_type");
      v != nullptr && (v->kind_case() != Value::kStringValue || v->string_value() != "gpt2")) {
    return Refuse(origin, "model_type must be \"gpt2\"");
  }
  if (const Value* v = Field(root, "activation_function"); v != nullptr) {
    // gelu_new and gelu_pytorch_tanh are the same tanh formula; "gelu" is the erf one.
    const bool tanh = v->kind_case() == Value::kStringValue &&
                      (v->string_value() == "gelu_new" || v->string_value() == "gelu_pytorch_tanh");
    if (!tanh) return Refuse(origin, "activation_function must be \"gelu_new\" (GELU tanh)");
  }
  if (const Value* v = Field(root, "layer_norm_epsilon"); v != nullptr) {
    if (v->kind_case() != Value::kNumberValue || std::fabs(v->number_value() - 1e-5) > 1e-12) {
      return Refuse(origin, "layer_norm_epsilon must be 1e-05 (our LayerNorm's)");
    }
  }
  if (const Value* v = Field(root, "n_inner"); v != nullptr) {
    if (v->kind_case() != Value::kNumberValue || v->number_value() != 4.0 * n_embd) {
      return Refuse(origin, absl::StrCat("n_inner must be null or 4 x n_embd = ", 4 * n_embd));
    }
  }
  for (const auto& [key, want] : {std::pair<const char*, bool>{"scale_attn_weights", true},
                                  {"scale_attn_by_inverse_layer_idx", false},
                                  {"add_cross_attention", false}}) {
    if (absl::Status s = BoolIs(root, key, want, origin); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<pp::v1::ModelSpec> ParseHfGpt2Config(absl::string_view json,
                                                    absl::string_view origin) {
  if (json.size() > kMaxHfConfigBytes) {
    return Refuse(origin, absl::StrCat("over ", kMaxHfConfigBytes, " bytes"));
  }
  Struct root;
  // The parser's message quotes the bytes around the error: not passed on.
  if (!JsonToMessage(json, &root).ok()) return Refuse(origin, "not a JSON object");
  pp::v1::ModelSpec model;
  const std::pair<const char*, int64_t> sizes[] = {{"vocab_size", kMaxVocabSize},
                                                   {"n_positions", kMaxSeqLen},
                                                   {"n_embd", kMaxDModel},
                                                   {"n_head", kMaxDModel},
                                                   {"n_layer", kMaxLayers}};
  int v[5];
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<int> n = PositiveInt(root, sizes[i].first, sizes[i].second, origin);
    if (!n.ok()) return n.status();
    v[i] = *n;
  }
  if (v[2] % v[3] != 0) {
    return Refuse(origin, absl::StrCat("n_head (", v[3], ") must divide n_embd (", v[2], ")"));
  }
  if (absl::Status s = CheckNumerics(root, v[2], origin); !s.ok()) return s;
  bool tied = true;  // GPT2Config's default
  if (const Value* t = Field(root, "tie_word_embeddings"); t != nullptr) {
    if (t->kind_case() != Value::kBoolValue) {
      return Refuse(origin, "tie_word_embeddings must be true or false");
    }
    tied = t->bool_value();
  }
  model.set_vocab_size(v[0]);
  model.set_seq_len(v[1]);
  model.set_d_model(v[2]);
  model.set_n_heads(v[3]);
  model.set_n_layers(v[4]);
  model.set_tie_embeddings(tied);
  return model;
}

absl::StatusOr<pp::v1::ModelSpec> ReadHfGpt2Config(const std::string& dir,
                                                   const std::vector<std::string>& data_roots) {
  const std::string path = absl::StrCat(dir, "/", kHfConfigFile);
  absl::StatusOr<RegularFile> file = OpenUnderRoots(kHfConfigFile, path, data_roots, "data_root");
  if (!file.ok()) return file.status();
  absl::StatusOr<std::string> json = ReadWhole(*file, kMaxHfConfigBytes);
  if (!json.ok()) return json.status();
  return ParseHfGpt2Config(*json, path);
}

std::string HfGpt2ConfigJson(const pp::v1::ModelSpec& m) {
  // No dropout: we train without it, so a model fine-tuned on in transformers behaves the same.
  // The token ids are null: GPT-2's 50256 is outside a byte-level vocabulary.
  // vocab_size is the real one: the padding rows are not written (ToHfGpt2Tensors).
  return absl::StrFormat(
      "{\n"
      "  \"architectures\": [\"GPT2LMHeadModel\"],\n"
      "  \"model_type\": \"gpt2\",\n"
      "  \"vocab_size\": %d,\n"
      "  \"n_positions\": %d,\n"
      "  \"n_embd\": %d,\n"
      "  \"n_layer\": %d,\n"
      "  \"n_head\": %d,\n"
      "  \"n_inner\": null,\n"
      "  \"activation_function\": \"gelu_new\",\n"
      "  \"layer_norm_epsilon\": 1e-05,\n"
      "  \"tie_word_embeddings\": %s,\n"
      "  \"scale_attn_weights\": true,\n"
      "  \"scale_attn_by_inverse_layer_idx\": false,\n"
      "  \"reorder_and_upcast_attn\": false,\n"
      "  \"resid_pdrop\": 0.0,\n"
      "  \"embd_pdrop\": 0.0,\n"
      "  \"attn_pdrop\": 0.0,\n"
      "  \"bos_token_id\": null,\n"
      "  \"eos_token_id\": null,\n"
      "  \"dtype\": \"float32\"\n"
      "}\n",
      RealVocabSize(m), m.seq_len(), m.d_model(), m.n_layers(), m.n_heads(),
      m.tie_embeddings() ? "true" : "false");
}

namespace {

// config.json's vocabulary is the spec's real one; a larger model.vocab_size is padding, which
// needs model.real_vocab_size (the weights get zero rows when read: ReadInitFrom).
absl::Status FitVocab(int hf_vocab, absl::string_view origin, pp::v1::ModelSpec* spec) {
  const int vocab = spec->vocab_size(), real = spec->real_vocab_size();
  if (real != 0 && real != hf_vocab) {
    return absl::InvalidArgumentError(absl::StrCat("model.real_vocab_size: the spec says ", real,
                                                   ", ", origin, " says vocab_size ", hf_vocab));
  }
  if (vocab == 0) {
    spec->set_vocab_size(hf_vocab);
  } else if (real == 0 && vocab != hf_vocab) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.vocab_size: the spec says ", vocab, ", ", origin, " says vocab_size ", hf_vocab,
        vocab > hf_vocab ? absl::StrCat(" (to pad it, set model.real_vocab_size ", hf_vocab, ")")
                         : ""));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status FitModelSpec(const pp::v1::ModelSpec& hf, absl::string_view origin,
                          pp::v1::ModelSpec* spec) {
  struct Size {
    const char* field;
    const char* hf_key;
    int hf_value;
    int (pp::v1::ModelSpec::*get)() const;
    void (pp::v1::ModelSpec::*set)(int32_t);
  };
  if (absl::Status s = FitVocab(hf.vocab_size(), origin, spec); !s.ok()) return s;
  const Size sizes[] = {{"seq_len", "n_positions", hf.seq_len(), &pp::v1::ModelSpec::seq_len,
                         &pp::v1::ModelSpec::set_seq_len},
                        {"d_model", "n_embd", hf.d_model(), &pp::v1::ModelSpec::d_model,
                         &pp::v1::ModelSpec::set_d_model},
                        {"n_heads", "n_head", hf.n_heads(), &pp::v1::ModelSpec::n_heads,
                         &pp::v1::ModelSpec::set_n_heads},
                        {"n_layers", "n_layer", hf.n_layers(), &pp::v1::ModelSpec::n_layers,
                         &pp::v1::ModelSpec::set_n_layers}};
  for (const Size& s : sizes) {
    const int mine = (spec->*s.get)();
    if (mine != 0 && mine != s.hf_value) {
      return absl::InvalidArgumentError(absl::StrCat("model.", s.field, ": the spec says ", mine,
                                                     ", ", origin, " says ", s.hf_key, " ",
                                                     s.hf_value));
    }
    (spec->*s.set)(s.hf_value);
  }
  if (spec->tie_embeddings() && !hf.tie_embeddings()) {
    return absl::InvalidArgumentError(absl::StrCat("model.tie_embeddings: the spec ties the head, ",
                                                   origin, " has an untied lm_head"));
  }
  spec->set_tie_embeddings(hf.tie_embeddings());
  return absl::OkStatus();
}

}  // namespace pp::common
