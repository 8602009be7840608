// The Hugging Face GPT-2 layout (common/hf_gpt2.h): the name and layout mapping, config.json in
// both directions, the folder round trip (bitwise), and every refusal being one clear line.
#include "common/hf_gpt2.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pp::common {
namespace {

using ::testing::HasSubstr;

pp::v1::ModelSpec Spec(bool tied) {
  pp::v1::ModelSpec m;
  m.set_vocab_size(256), m.set_seq_len(8), m.set_d_model(4), m.set_n_heads(2), m.set_n_layers(2);
  m.set_tie_embeddings(tied);
  return m;
}

// Every tensor of Spec with distinct values (value = a per-tensor base + index).
std::map<std::string, Tensor> Ours(const pp::v1::ModelSpec& m) {
  const int64_t V = m.vocab_size(), T = m.seq_len(), C = m.d_model();
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {{"wte.weight", {V, C}},
                                                                      {"wpe.weight", {T, C}}};
  for (int i = 0; i < m.n_layers(); ++i) {
    const std::string h = absl::StrCat("h.", i, ".");
    for (auto [n, s] :
         std::vector<std::pair<std::string, std::vector<int64_t>>>{{"ln_1.weight", {C}},
                                                                   {"ln_1.bias", {C}},
                                                                   {"attn.qkv.weight", {3 * C, C}},
                                                                   {"attn.qkv.bias", {3 * C}},
                                                                   {"attn.proj.weight", {C, C}},
                                                                   {"attn.proj.bias", {C}},
                                                                   {"ln_2.weight", {C}},
                                                                   {"ln_2.bias", {C}},
                                                                   {"mlp.fc.weight", {4 * C, C}},
                                                                   {"mlp.fc.bias", {4 * C}},
                                                                   {"mlp.proj.weight", {C, 4 * C}},
                                                                   {"mlp.proj.bias", {C}}}) {
      shapes.push_back({h + n, s});
    }
  }
  shapes.push_back({"ln_f.weight", {C}});
  shapes.push_back({"ln_f.bias", {C}});
  if (!m.tie_embeddings()) shapes.push_back({"lm_head.weight", {V, C}});
  std::map<std::string, Tensor> out;
  float base = 0;
  for (auto& [name, shape] : shapes) {
    Tensor t{name, shape, {}};
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    for (int64_t i = 0; i < n; ++i) t.data.push_back(base + 0.001f * static_cast<float>(i));
    base += 1000;
    out[name] = std::move(t);
  }
  return out;
}

const Tensor* Find(const std::vector<Tensor>& ts, const std::string& name) {
  for (const Tensor& t : ts) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

TEST(HfGpt2, ConvertsNamesAndTransposesConv1D) {
  const pp::v1::ModelSpec m = Spec(false);
  const std::map<std::string, Tensor> ours = Ours(m);
  absl::StatusOr<std::vector<Tensor>> hf = ToHfGpt2Tensors(m, ours);
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->size(), ours.size());
  const Tensor* c_attn = Find(*hf, "transformer.h.1.attn.c_attn.weight");
  ASSERT_NE(c_attn, nullptr);
  EXPECT_EQ(c_attn->shape, (std::vector<int64_t>{4, 12}));
  // ours [3C, C] row r, column k -> HF [C, 3C] row k, column r.
  const Tensor& qkv = ours.at("h.1.attn.qkv.weight");
  for (int r = 0; r < 12; ++r) {
    for (int k = 0; k < 4; ++k) EXPECT_EQ(c_attn->data[k * 12 + r], qkv.data[r * 4 + k]);
  }
  const Tensor* head = Find(*hf, "lm_head.weight");
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(head->data, ours.at("lm_head.weight").data);
  EXPECT_NE(Find(*hf, "transformer.wpe.weight"), nullptr);
  EXPECT_NE(Find(*hf, "transformer.h.0.mlp.c_proj.bias"), nullptr);
}

TEST(HfGpt2, RoundTripIsExactTiedAndUntied) {
  for (bool tied : {false, true}) {
    const pp::v1::ModelSpec m = Spec(tied);
    const std::map<std::string, Tensor> ours = Ours(m);
    absl::StatusOr<std::vector<Tensor>> hf = ToHfGpt2Tensors(m, ours);
    ASSERT_TRUE(hf.ok());
    EXPECT_EQ(Find(*hf, "lm_head.weight") != nullptr, !tied);
    absl::StatusOr<std::map<std::string, Tensor>> back = FromHfGpt2Tensors(m, *hf, "x");
    ASSERT_TRUE(back.ok()) << back.status();
    ASSERT_EQ(back->size(), ours.size());
    for (const auto& [name, t] : ours) {
      EXPECT_EQ(back->at(name).shape, t.shape) << name;
      EXPECT_EQ(back->at(name).data, t.data) << name;
    }
  }
}

TEST(HfGpt2, AcceptsUnprefixedNamesMaskBuffersAndATiedCopy) {
  const pp::v1::ModelSpec m = Spec(true);
  std::vector<Tensor> hf = *ToHfGpt2Tensors(m, Ours(m));
  for (Tensor& t : hf) t.name = t.name.substr(t.name.rfind("transformer.", 0) == 0 ? 12 : 0);
  hf.push_back({"h.0.attn.bias", {1, 1, 8, 8}, std::vector<float>(64, 1.0f)});
  hf.push_back({"lm_head.weight", {256, 4}, Find(hf, "wte.weight")->data});
  EXPECT_TRUE(FromHfGpt2Tensors(m, hf, "x").ok());
  hf.back().data[5] += 1.0f;
  EXPECT_THAT(std::string(FromHfGpt2Tensors(m, hf, "x").status().message()),
              HasSubstr("lm_head.weight differs from wte.weight"));
}

TEST(HfGpt2, RefusesMissingUnknownMisshapenAndDuplicateTensors) {
  const pp::v1::ModelSpec m = Spec(false);
  const std::vector<Tensor> good = *ToHfGpt2Tensors(m, Ours(m));
  auto refuse = [&](std::vector<Tensor> hf) {
    return std::string(
        FromHfGpt2Tensors(m, std::move(hf), "DIR/model.safetensors").status().message());
  };
  std::vector<Tensor> missing = good;
  missing.erase(missing.begin() + 5);
  EXPECT_THAT(refuse(missing), HasSubstr("DIR/model.safetensors: no tensor"));
  std::vector<Tensor> unknown = good;
  unknown.push_back({"transformer.h.9.ln_1.weight", {4}, std::vector<float>(4)});
  EXPECT_THAT(refuse(unknown), HasSubstr("unknown tensor h.9.ln_1.weight"));
  std::vector<Tensor> shaped = good;
  for (Tensor& t : shaped) {
    if (t.name == "transformer.h.0.mlp.c_fc.weight") t.shape = {16, 4};  // ours, not Conv1D
  }
  EXPECT_THAT(refuse(shaped), HasSubstr("h.0.mlp.c_fc.weight has shape [16, 4], config.json "
                                        "needs [4, 16]"));
  std::vector<Tensor> twice = good;
  twice.push_back(*Find(good, "transformer.ln_f.bias"));
  twice.back().name = "ln_f.bias";
  EXPECT_THAT(refuse(twice), HasSubstr("ln_f.bias appears twice"));
  std::vector<Tensor> no_head = good;
  no_head.pop_back();  // lm_head.weight of an untied model
  EXPECT_THAT(refuse(no_head), HasSubstr("no tensor lm_head.weight"));
}

TEST(HfGpt2, ConfigRoundTrip) {
  for (bool tied : {false, true}) {
    const pp::v1::ModelSpec m = Spec(tied);
    absl::StatusOr<pp::v1::ModelSpec> back = ParseHfGpt2Config(HfGpt2ConfigJson(m));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->SerializeAsString(), m.SerializeAsString());
  }
}

TEST(HfGpt2, ConfigDefaultsAreTransformers) {
  // A GPT2Config(...).to_json_string() leaves out nothing we need; defaults: tied, gelu_new.
  absl::StatusOr<pp::v1::ModelSpec> m = ParseHfGpt2Config(
      R"({"vocab_size": 256, "n_positions": 8, "n_embd": 4, "n_head": 2, "n_layer": 2,
          "n_inner": null, "resid_pdrop": 0.1, "bos_token_id": 50256})");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(m->tie_embeddings());
  EXPECT_EQ(m->seq_len(), 8);
}

TEST(HfGpt2, ConfigRefusesWhatWeDoNotCompute) {
  const std::string base =
      R"("vocab_size": 256, "n_positions": 8, "n_embd": 4, "n_head": 2, "n_layer": 2)";
  const std::pair<std::string, std::string> cases[] = {
      {R"(, "activation_function": "gelu")", "activation_function must be \"gelu_new\""},
      {R"(, "layer_norm_epsilon": 1e-6)", "layer_norm_epsilon must be 1e-05"},
      {R"(, "n_inner": 8)", "n_inner must be null or 4 x n_embd = 16"},
      {R"(, "model_type": "llama")", "model_type must be \"gpt2\""},
      {R"(, "scale_attn_weights": false)", "scale_attn_weights false is not supported"},
      {R"(, "scale_attn_by_inverse_layer_idx": true)", "scale_attn_by_inverse_layer_idx true"},
      {R"(, "add_cross_attention": true)", "add_cross_attention true"},
      {R"(, "tie_word_embeddings": 1)", "tie_word_embeddings must be true or false"},
  };
  for (const auto& [extra, want] : cases) {
    absl::Status s = ParseHfGpt2Config("{" + base + extra + "}", "D/config.json").status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << extra;
    EXPECT_THAT(std::string(s.message()), HasSubstr("D/config.json: " + want)) << extra;
  }
  const std::pair<std::string, std::string> bad[] = {
      {R"({"vocab_size": 256})", "n_positions is missing"},
      {R"({"vocab_size": 256.5, "n_positions": 8, "n_embd": 4, "n_head": 2, "n_layer": 2})",
       "vocab_size must be an integer in [1, 1048576], got 256.5"},
      {R"({"vocab_size": 1e300, "n_positions": 8, "n_embd": 4, "n_head": 2, "n_layer": 2})",
       "vocab_size must be an integer"},
      {R"({"vocab_size": "256", "n_positions": 8, "n_embd": 4, "n_head": 2, "n_layer": 2})",
       "vocab_size must be a number"},
      {R"({"vocab_size": 256, "n_positions": 8, "n_embd": 6, "n_head": 4, "n_layer": 2})",
       "n_head (4) must divide n_embd (6)"},
      {"[1, 2]", "not a JSON object"},
      {"{\"vocab_size\": ", "not a JSON object"},
  };
  for (const auto& [json, want] : bad) {
    EXPECT_THAT(std::string(ParseHfGpt2Config(json).status().message()), HasSubstr(want)) << json;
  }
  EXPECT_THAT(
      std::string(ParseHfGpt2Config(std::string(kMaxHfConfigBytes + 1, ' ')).status().message()),
      HasSubstr("over 1048576 bytes"));
}

TEST(HfGpt2, FitModelSpecFillsAndRefusesByField) {
  const pp::v1::ModelSpec hf = Spec(true);
  pp::v1::ModelSpec spec;
  spec.set_d_model(4);
  ASSERT_TRUE(FitModelSpec(hf, "D/config.json", &spec).ok());
  EXPECT_EQ(spec.SerializeAsString(), hf.SerializeAsString());
  pp::v1::ModelSpec wrong;
  wrong.set_vocab_size(512);
  EXPECT_EQ(FitModelSpec(hf, "D/config.json", &wrong).message(),
            "model.vocab_size: the spec says 512, D/config.json says vocab_size 256 (to pad it, "
            "set model.real_vocab_size 256)");
  pp::v1::ModelSpec tied;
  tied.set_tie_embeddings(true);
  EXPECT_THAT(std::string(FitModelSpec(Spec(false), "D/config.json", &tied).message()),
              HasSubstr("model.tie_embeddings: the spec ties the head"));
}

TEST(HfGpt2, FolderRoundTripIsBitwise) {
  const std::string dir = ::testing::TempDir() + "/hf_gpt2_folder";
  std::filesystem::remove_all(dir);
  const pp::v1::ModelSpec m = Spec(false);
  ASSERT_TRUE(WriteHfGpt2(dir + "/a", m, Ours(m)).ok());
  absl::StatusOr<HfGpt2Model> read = ReadHfGpt2(dir + "/a");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->model.SerializeAsString(), m.SerializeAsString());
  ASSERT_TRUE(WriteHfGpt2(dir + "/b", read->model, read->tensors).ok());
  for (const char* f : {kHfConfigFile, kHfWeightsFile}) {
    EXPECT_EQ(*ReadFile(dir + "/a/" + f), *ReadFile(dir + "/b/" + f)) << f;
  }
  std::filesystem::remove_all(dir);
}

// A padded model (vocab_size 320, real 300) exports GPT-2's shape: config.json and wte /
// lm_head say 300. Read back as init_from of the padded spec, the real rows are the same bits and
// the padding rows are zeros; the spec must name the real vocabulary to pad it.
TEST(HfGpt2, PaddedVocabExportsRealRowsAndReadsBackPadded) {
  const std::string dir = ::testing::TempDir() + "/hf_gpt2_padded";
  std::filesystem::remove_all(dir);
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied);
    pp::v1::ModelSpec m = Spec(tied);
    m.set_vocab_size(320), m.set_real_vocab_size(300);
    const std::map<std::string, Tensor> ours = Ours(m);
    ASSERT_TRUE(WriteHfGpt2(dir, m, ours).ok());
    absl::StatusOr<HfGpt2Model> hf = ReadHfGpt2(dir);
    ASSERT_TRUE(hf.ok()) << hf.status();
    EXPECT_EQ(hf->model.vocab_size(), 300);
    EXPECT_EQ(hf->tensors["wte.weight"].shape, (std::vector<int64_t>{300, 4}));
    pp::v1::ModelSpec fitted;
    fitted.set_vocab_size(320), fitted.set_real_vocab_size(300);
    ASSERT_TRUE(FitModelSpec(hf->model, "D/config.json", &fitted).ok());
    m.set_init_from(dir);
    absl::StatusOr<HfGpt2Model> init = ReadInitFrom(m);
    ASSERT_TRUE(init.ok()) << init.status();
    for (const char* name : {"wte.weight", "lm_head.weight"}) {
      if (tied && std::string(name) == "lm_head.weight") continue;
      const Tensor& got = init->tensors[name];
      ASSERT_EQ(got.shape, (std::vector<int64_t>{320, 4})) << name;
      const std::vector<float>& want = ours.at(name).data;
      EXPECT_TRUE(std::equal(want.begin(), want.begin() + 300 * 4, got.data.begin())) << name;
      EXPECT_TRUE(std::all_of(got.data.begin() + 300 * 4, got.data.end(), [](float x) {
        return x == 0.0f;
      })) << name;
    }
    std::filesystem::remove_all(dir);
  }
  pp::v1::ModelSpec wrong_real;
  wrong_real.set_vocab_size(320), wrong_real.set_real_vocab_size(300);
  EXPECT_EQ(FitModelSpec(Spec(false), "D/config.json", &wrong_real).message(),
            "model.real_vocab_size: the spec says 300, D/config.json says vocab_size 256");
}

TEST(HfGpt2, ReadRefusesShardedAndPickleFolders) {
  const std::string dir = ::testing::TempDir() + "/hf_gpt2_other";
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(MakeDirs(dir).ok());
  ASSERT_TRUE(WriteFileAtomic(dir + "/model.safetensors.index.json", "{}").ok());
  EXPECT_THAT(std::string(ReadHfGpt2(dir).status().message()),
              HasSubstr("has model.safetensors.index.json but no model.safetensors"));
  EXPECT_EQ(ReadHfGpt2(dir + "/missing").status().code(), absl::StatusCode::kNotFound);
  std::filesystem::remove_all(dir);
}

// Under --data_root each file of the folder is opened where it resolves: a symlink out of the
// roots is refused, one that stays inside (the Hugging Face cache's blobs) is read.
TEST(HfGpt2, ReadUnderRootsRefusesFilesSymlinkedOutOfThem) {
  namespace fs = std::filesystem;
  const std::string base = ::testing::TempDir() + "/hf_gpt2_roots";
  fs::remove_all(base);
  const pp::v1::ModelSpec m = Spec(false);
  ASSERT_TRUE(WriteHfGpt2(base + "/outside", m, Ours(m)).ok());
  ASSERT_TRUE(WriteHfGpt2(base + "/root/blobs", m, Ours(m)).ok());
  const std::vector<std::string> roots = {base + "/root"};
  for (const char* file : {kHfConfigFile, kHfWeightsFile}) {
    SCOPED_TRACE(file);
    const std::string dir = absl::StrCat(base, "/root/", file, "-linked");
    ASSERT_TRUE(MakeDirs(dir).ok());
    for (const char* f : {kHfConfigFile, kHfWeightsFile}) {
      fs::create_symlink(absl::StrCat(std::string(f) == file ? "../../outside/" : "../blobs/", f),
                         absl::StrCat(dir, "/", f));
    }
    EXPECT_TRUE(ReadHfGpt2(dir).ok()) << "no roots, no rule";
    const absl::Status refused = ReadHfGpt2(dir, roots).status();
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(refused.message()),
                HasSubstr(absl::StrCat(file, " \"", dir, "/", file,
                                       "\" is outside the allowed --data_root")));
  }
  absl::StatusOr<HfGpt2Model> inside = ReadHfGpt2(base + "/root/blobs", roots);
  EXPECT_TRUE(inside.ok()) << inside.status();
  fs::remove_all(base);
}

// The JSON parser's message quotes the bytes around its error: a refusal never passes it on.
TEST(HfGpt2, AConfigThatIsNotJsonIsRefusedWithoutQuotingIt) {
  const std::string secret = "root:x:0:0:TOPSECRET";
  const absl::Status s = ParseHfGpt2Config(secret + "\n", "D/config.json").status();
  EXPECT_EQ(s.message(), "D/config.json: not a JSON object");
}

}  // namespace
}  // namespace pp::common
