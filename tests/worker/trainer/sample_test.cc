// The inference path (worker/trainer/sample.h): its logits give the training model's loss, the
// key/value cache gives the logits of a whole-sequence recomputation, generation is
// deterministic per seed and the same with and without the cache, bad requests are refused.
#include "worker/trainer/sample.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/checkpoint.h"
#include "common/hf_gpt2.h"
#include "common/job_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "worker/model/model.h"
#include "worker/trainer/trainer.h"

namespace pp::trainer {
namespace {

using ::testing::HasSubstr;

pp::v1::JobSpec TinySpec(const std::string& name) {
  pp::v1::JobSpec spec;
  spec.set_name(name);
  auto* m = spec.mutable_model();
  m->set_vocab_size(256), m->set_seq_len(24), m->set_d_model(16), m->set_n_heads(2);
  m->set_n_layers(2);
  spec.mutable_parallel()->set_pipeline(1);
  spec.mutable_parallel()->set_schedule("1f1b");
  auto* t = spec.mutable_train();
  t->set_steps(8), t->set_microbatches(2), t->set_microbatch_size(2), t->set_lr(1e-2);
  t->set_seed(5);
  spec.mutable_data()->set_format("generated");
  spec.mutable_data()->set_generated_tokens(20000);
  common::ApplyDefaults(&spec);
  return spec;
}

// ctest runs each test as its own process, two at a time: one folder per process, removed at
// the end.
const std::string& Root() {
  static const std::string root =
      absl::StrCat(::testing::TempDir(), "/sample_test_ckpt-", getpid());
  return root;
}
class RemoveRoot : public ::testing::Environment {
  void TearDown() override { std::filesystem::remove_all(Root()); }
};
::testing::Environment* const kRemoveRoot = ::testing::AddGlobalTestEnvironment(new RemoveRoot);

// A trained tiny model: its checkpoint's step folder (trained once per test binary).
std::string TrainedCheckpoint() {
  static const std::string dir = [] {
    const std::string& root = Root();
    std::filesystem::remove_all(root);
    TrainOptions o;
    o.checkpoint_root = root;
    EXPECT_TRUE(Train(TinySpec("s"), o).ok());
    return common::StepDir(root, "s", 8);
  }();
  return dir;
}

std::unique_ptr<Decoder> Load() {
  absl::StatusOr<std::unique_ptr<Decoder>> d = LoadDecoder(TrainedCheckpoint());
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *std::move(d) : nullptr;
}

std::vector<int32_t> Tokens(const std::string& s) { return {s.begin(), s.end()}; }

TEST(Sample, LogitsGiveTheTrainingModelsLoss) {
  std::unique_ptr<Decoder> d = Load();
  ASSERT_NE(d, nullptr);
  const std::string text = "the quick brown fox jump";  // 24 bytes = seq_len
  const std::vector<int32_t> in = Tokens(text.substr(0, 23)), target = Tokens(text.substr(1));
  absl::StatusOr<std::vector<float>> logits = d->Logits(in);
  ASSERT_TRUE(logits.ok()) << logits.status();
  double ce = 0;
  for (int t = 0; t < 23; ++t) {
    const float* row = &(*logits)[t * 256];
    double max = row[0], sum = 0;
    for (int v = 0; v < 256; ++v) max = std::max<double>(max, row[v]);
    for (int v = 0; v < 256; ++v) sum += std::exp(row[v] - max);
    ce += std::log(sum) + max - row[target[t]];
  }
  ce /= 23;
  // The training model (worker/model) on the same weights and tokens.
  absl::StatusOr<common::Checkpoint> ckpt = common::LoadCheckpoint(TrainedCheckpoint());
  ASSERT_TRUE(ckpt.ok());
  pp::v1::ModelSpec spec = ckpt->manifest.spec().model();
  spec.set_seq_len(23);  // Evaluate runs whole sequences of seq_len
  model::ModelConfig cfg = *model::ModelConfigFromSpec(spec);
  auto ops = *kernels::MakeOps("cpu");
  model::StageOptions so;
  so.last_unit = model::NumUnits(cfg) - 1;
  auto stage = *model::StageModel::Create(ops.get(), cfg, so);
  for (model::ModelTensor& t : stage->tensors()) {
    const std::vector<float>& v = ckpt->tensors.at(t.name).data;
    ops->CopyToDevice(t.value, v.data(), t.size);  // wpe: the first 23 rows
  }
  model::StageInput mi{in.data(), target.data(), nullptr};
  absl::StatusOr<double> loss = stage->Evaluate(mi, nullptr);
  ASSERT_TRUE(loss.ok());
  EXPECT_NEAR(ce, *loss, 1e-5 * *loss);
  EXPECT_LT(*loss, std::log(256.0) - 0.5);  // it has learnt something
}

TEST(Sample, CachedStepsEqualTheRecomputation) {
  std::unique_ptr<Decoder> d = Load();
  ASSERT_NE(d, nullptr);
  const std::vector<int32_t> tokens = Tokens("Hello, pipelines! 12345");
  absl::StatusOr<std::vector<float>> full = d->Logits(tokens);
  ASSERT_TRUE(full.ok());
  d->Reset();
  double worst = 0;
  for (size_t t = 0; t < tokens.size(); ++t) {
    absl::StatusOr<std::vector<float>> step = d->Step(tokens[t]);
    ASSERT_TRUE(step.ok());
    for (int v = 0; v < 256; ++v) {
      const double ref = (*full)[t * 256 + v];
      worst = std::max(worst, std::fabs((*step)[v] - ref) / std::max(1.0, std::fabs(ref)));
    }
  }
  EXPECT_LT(worst, 1e-5);
}

TEST(Sample, DeterministicPerSeedAndTheSameWithoutTheCache) {
  std::unique_ptr<Decoder> d = Load();
  ASSERT_NE(d, nullptr);
  SampleOptions o;
  o.prompt = "the ";
  o.tokens = 20;
  o.temperature = 0.8;
  o.top_k = 20;
  o.seed = 7;
  const std::string a = *Generate(*d, o), b = *Generate(*d, o);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.size(), 20u);
  o.use_cache = false;
  EXPECT_EQ(*Generate(*d, o), a);
  o.use_cache = true;
  std::set<std::string> seen = {a};
  for (uint64_t seed : {8, 9, 10}) {
    o.seed = seed;
    seen.insert(*Generate(*d, o));
  }
  EXPECT_GT(seen.size(), 1u);  // seeds matter
  o.temperature = 0;           // greedy: the seed does not matter
  o.seed = 1;
  const std::string g = *Generate(*d, o);
  o.seed = 2;
  EXPECT_EQ(*Generate(*d, o), g);
}

TEST(Sample, SampleTokenHonoursTopKAndTemperature) {
  const std::vector<float> logits = {0.0f, 3.0f, 1.0f, 3.0f};
  EXPECT_EQ(SampleToken(logits, 0.0, 0, 0.99), 1);  // greedy, lower id on the tie
  for (double u : {0.0, 0.3, 0.7, 0.999}) {
    const int32_t id = SampleToken(logits, 1.0, 2, u);
    EXPECT_TRUE(id == 1 || id == 3) << u;
  }
  EXPECT_EQ(SampleToken(logits, 1.0, 1, 0.999), 1);
}

// A padded model (vocab 320, real 300) whose padding rows of the head would win every draw: ln_f
// makes every position's features all ones, so a logit is its head row's sum, and the padding
// rows sum to 10 C. The decoder returns the 300 real logits only, so greedy, top-k and plain
// draws, cached or not, give real ids; <|endoftext|>-style stops end the generation.
TEST(Sample, NeverEmitsAPaddingId) {
  pp::v1::ModelSpec m = TinySpec("p").model();
  m.set_vocab_size(320), m.set_real_vocab_size(300);
  absl::StatusOr<model::ModelConfig> cfg = model::ModelConfigFromSpec(m);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  const int C = cfg->d_model;
  std::map<std::string, common::Tensor> tensors;
  for (const model::TensorShape& t : model::ModelTensors(*cfg)) {
    std::vector<float> v = model::InitTensorValues(t, cfg->n_layers, 1);
    if (t.name == "ln_f.weight") std::fill(v.begin(), v.end(), 0.0f);
    if (t.name == "ln_f.bias") std::fill(v.begin(), v.end(), 1.0f);
    if (t.name == "lm_head.weight") std::fill(v.begin() + 300 * C, v.end(), 10.0f);
    tensors[t.name] = common::Tensor{t.name, {}, std::move(v)};
  }
  absl::StatusOr<std::unique_ptr<Decoder>> d = Decoder::Create(m, tensors);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ((*d)->real_vocab_size(), 300);
  absl::StatusOr<std::vector<float>> logits = (*d)->Logits({1, 2, 3});
  ASSERT_TRUE(logits.ok()) << logits.status();
  EXPECT_EQ(logits->size(), 3u * 300);
  EXPECT_FALSE((*d)->Logits({300}).ok());  // a padding id is no input either
  SampleOptions o;
  o.tokens = 20;
  for (const auto& [temperature, top_k, cache] : std::vector<std::tuple<double, int, bool>>{
           {0, 0, true}, {1, 0, true}, {5, 0, false}, {1, 310, true}, {100, 3, true}}) {
    o.temperature = temperature, o.top_k = top_k, o.use_cache = cache;
    absl::StatusOr<std::vector<int32_t>> ids = GenerateTokens(**d, {1, 2, 3}, o);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(ids->size(), 20u);
    for (int32_t id : *ids) ASSERT_LT(id, 300) << temperature << " " << top_k;
  }
  o.temperature = 0;
  const int32_t first = (*GenerateTokens(**d, {1, 2, 3}, o))[0];
  o.stop_token = first;
  EXPECT_EQ(*GenerateTokens(**d, {1, 2, 3}, o), std::vector<int32_t>{first});
}

TEST(Sample, RefusesBadRequests) {
  std::unique_ptr<Decoder> d = Load();
  ASSERT_NE(d, nullptr);
  SampleOptions o;
  EXPECT_THAT(std::string(Generate(*d, o).status().message()), HasSubstr("prompt is empty"));
  o.prompt = "abc";
  o.tokens = 22;
  EXPECT_THAT(std::string(Generate(*d, o).status().message()),
              HasSubstr("the prompt (3 bytes) plus 22 tokens exceed the model's 24 positions"));
  EXPECT_FALSE(d->Logits({}).ok());
  EXPECT_FALSE(d->Logits({300}).ok());
  EXPECT_FALSE(d->Step(-1).ok());
  EXPECT_EQ(LoadDecoder(::testing::TempDir() + "/nowhere").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace pp::trainer
