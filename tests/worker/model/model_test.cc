// StageModel and the optimizer: finite-difference gradients of the whole model, bitwise equality
// of every chunk split, I-then-W against full backward, clipped updates, init, errors.
#include "worker/model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "tests/worker/model/model_fixture.h"
#include "worker/optim/optim.h"

namespace pp::model {
namespace {

TEST_F(ModelTest, TensorNamesAndShapesFollowDesign) {
  ModelConfig c = Tiny();
  auto all = ModelTensors(c);
  ASSERT_EQ(all.size(), 2u + 12u * 3 + 3u);
  EXPECT_EQ(all[0].name, "wte.weight");
  EXPECT_EQ(all[2].name, "h.0.ln_1.weight");
  EXPECT_EQ(all[4].name, "h.0.attn.qkv.weight");
  EXPECT_EQ(all[4].shape, (std::vector<int>{24, 8}));
  EXPECT_EQ(all[12].shape, (std::vector<int>{8, 32}));  // mlp.proj.weight [C, 4C]
  EXPECT_EQ(all.back().name, "lm_head.weight");
  EXPECT_EQ(all.back().shape, (std::vector<int>{13, 8}));
  c.tie_embeddings = true;
  EXPECT_EQ(ModelTensors(c).back().name, "ln_f.bias");
  auto stage = Stage(Tiny(), 1, 2, 1, 1);
  ASSERT_NE(stage, nullptr);
  std::set<std::string> names;
  for (auto& t : stage->tensors()) names.insert(t.name);
  EXPECT_EQ(names.size(), 24u);
  EXPECT_TRUE(names.count("h.1.mlp.fc.bias"));
  EXPECT_FALSE(names.count("wte.weight"));
}

TEST_F(ModelTest, InitDependsOnlyOnSeedAndName) {
  ModelConfig c = Tiny();
  c.d_model = 64, c.n_heads = 4, c.n_layers = 8;
  TensorShape fc{"h.3.mlp.fc.weight", {256, 64}}, proj{"h.3.mlp.proj.weight", {64, 256}};
  auto a = InitTensorValues(fc, c.n_layers, 5);
  EXPECT_TRUE(BitwiseEqual(a, InitTensorValues(fc, c.n_layers, 5)));
  EXPECT_FALSE(BitwiseEqual(a, InitTensorValues(fc, c.n_layers, 6)));
  EXPECT_FALSE(BitwiseEqual(a, InitTensorValues({"h.4.mlp.fc.weight", {256, 64}}, 8, 5)));
  auto stats = [](const std::vector<float>& v) {
    double s = 0, s2 = 0;
    for (float x : v) s += x, s2 += double(x) * x;
    return std::make_pair(s / v.size(), std::sqrt(s2 / v.size() - s * s / v.size() / v.size()));
  };
  auto [mean, sd] = stats(a);
  EXPECT_NEAR(mean, 0.0, 0.002);
  EXPECT_NEAR(sd, 0.02, 0.001);
  auto [pmean, psd] = stats(InitTensorValues(proj, c.n_layers, 5));
  EXPECT_NEAR(psd, 0.02 / std::sqrt(16.0), 0.0003);
  for (float x : InitTensorValues({"h.0.ln_2.weight", {64}}, 8, 5)) EXPECT_EQ(x, 1.0f);
  for (float x : InitTensorValues({"h.0.ln_2.bias", {64}}, 8, 5)) EXPECT_EQ(x, 0.0f);
  for (float x : InitTensorValues({"h.0.attn.qkv.bias", {192}}, 8, 5)) EXPECT_EQ(x, 0.0f);
  // A stage holding unit 2 starts from the same bits as the whole model.
  auto whole = Stage(Tiny(), 0, 4, 1, 1), part = Stage(Tiny(), 2, 2, 1, 1);
  Values w = whole->ValuesToHost();
  for (auto& [name, v] : part->ValuesToHost()) EXPECT_TRUE(BitwiseEqual(v, w.at(name))) << name;
}

// Directional central differences per tensor: along d = sign(g) * u (u in [0.5, 1.5]) the loss
// change must equal g . (theta+ - theta-), where theta+- are the perturbed float values.
void CheckModelGradients(kernels::Ops& ops, StageModel& model, const std::vector<Batch>& batches) {
  const int M = static_cast<int>(batches.size());
  auto loss = [&] {
    double l = 0;
    for (int mb = 0; mb < M; ++mb) {
      StageInput in;
      in.tokens = batches[mb].tokens.data();
      in.targets = batches[mb].targets.data();
      auto r = model.Forward(mb, in, nullptr);
      EXPECT_TRUE(r.ok()) << r.status();
      EXPECT_TRUE(model.Backward(mb, nullptr, nullptr).ok());
      l += *r;
    }
    return l / M;
  };
  // Weights away from their tiny initial values, so every path carries signal.
  uint64_t s = 99;
  auto uniform = [&] {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>((s >> 11) * 0x1.0p-53);
  };
  for (auto& tensor : model.tensors()) {
    std::vector<float> v(tensor.size);
    for (auto& x : v) x = static_cast<float>(uniform() - 0.5);
    if (tensor.name.find("ln_") != std::string::npos && tensor.shape.size() == 1 &&
        tensor.name.find("weight") != std::string::npos) {
      for (auto& x : v) x += 1.0f;
    }
    ops.CopyToDevice(tensor.value, v.data(), tensor.size);
  }
  model.ZeroGrads();
  loss();
  Values grads;  // the loss evaluations below accumulate more gradients: keep these
  for (auto& tensor : model.tensors()) grads[tensor.name] = Host(ops, tensor.grad, tensor.size);
  for (auto& tensor : model.tensors()) {
    const auto& g = grads[tensor.name];
    auto orig = Host(ops, tensor.value, tensor.size);
    std::vector<float> plus(tensor.size), minus(tensor.size);
    const double eps = 1e-3;
    double predicted = 0;
    for (size_t i = 0; i < tensor.size; ++i) {
      double d = (g[i] > 0 ? 1 : g[i] < 0 ? -1 : 0) * (0.5 + uniform());
      plus[i] = static_cast<float>(orig[i] + eps * d);
      minus[i] = static_cast<float>(orig[i] - eps * d);
      predicted += static_cast<double>(g[i]) * (double(plus[i]) - minus[i]);
    }
    ops.CopyToDevice(tensor.value, plus.data(), tensor.size);
    double lp = loss();
    ops.CopyToDevice(tensor.value, minus.data(), tensor.size);
    double lm = loss();
    ops.CopyToDevice(tensor.value, orig.data(), tensor.size);
    EXPECT_GT(predicted, 1e-6) << tensor.name << " has no gradient";
    EXPECT_NEAR(lp - lm, predicted, 2e-3 * predicted + 5e-7) << tensor.name;
  }
}

TEST_F(ModelTest, GradientsMatchFiniteDifferences) {
  ModelConfig c = Tiny();
  c.n_layers = 2;
  auto model = Stage(c, 0, NumUnits(c) - 1, 2, 2);
  CheckModelGradients(*ops_, *model, MakeBatches(c, 2, 2, 3));
}

TEST_F(ModelTest, TiedEmbeddingGradientsMatchFiniteDifferences) {
  ModelConfig c = Tiny();
  c.n_layers = 1;
  c.tie_embeddings = true;
  auto model = Stage(c, 0, NumUnits(c) - 1, 2, 1);
  EXPECT_EQ(FindTensor(*model, "lm_head.weight"), nullptr);
  CheckModelGradients(*ops_, *model, MakeBatches(c, 2, 1, 4));
}

// Every set of cut points over 5 units (16 layouts) gives the losses, gradients and clipped
// updates of the unsplit model, bit for bit.
TEST_F(ModelTest, EverySplitIsBitwiseEqualToTheWholeModel) {
  const Outcome whole = Train({0}, false, 2);
  for (int mask = 1; mask < 16; ++mask) {
    std::vector<int> firsts = {0};
    for (int u = 1; u <= 4; ++u) {
      if (mask & (1 << (u - 1))) firsts.push_back(u);
    }
    ExpectSameBits(whole, Train(firsts, false, 2), "split mask " + std::to_string(mask));
  }
}

TEST_F(ModelTest, InputThenWeightEqualsFullBackward) {
  const Outcome whole = Train({0}, false, 2);
  ExpectSameBits(whole, Train({0}, true, 2), "I/W unsplit");
  ExpectSameBits(whole, Train({0, 2, 4}, true, 2), "I/W split at 2 and 4");
}

TEST_F(ModelTest, InterleavedZeroBubbleOrderMatches) {
  ModelConfig c = Tiny();
  auto batches = MakeBatches(c, 2, 3, 11);
  auto reference = Chain(c, {0, 3}, 2, 3), zb = Chain(c, {0, 3}, 2, 3);
  for (int mb = 0; mb < 3; ++mb) ForwardChain(reference, mb, batches[mb]);
  for (int mb = 0; mb < 3; ++mb) BackwardChain(reference, mb, false);
  // F0 F1 I0 F2 W0 I1 W1 I2 W2, with activations live across the gaps.
  ForwardChain(zb, 0, batches[0]);
  ForwardChain(zb, 1, batches[1]);
  BackwardChain(zb, 0, true);
  ForwardChain(zb, 2, batches[2]);
  for (int mb = 0; mb < 3; ++mb) {
    for (auto& s : zb) ASSERT_TRUE(s->BackwardWeight(mb).ok());
    if (mb < 2) BackwardChain(zb, mb + 1, true);
  }
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(zb[i]->live_activation_bytes(), 0);
    for (auto& t : reference[i]->tensors()) {
      EXPECT_TRUE(BitwiseEqual(Host(*ops_, t.grad, t.size),
                               Host(*ops_, FindTensor(*zb[i], t.name)->grad, t.size)))
          << t.name;
    }
  }
}

// One step's loss and gradients of `chain` on `batches` (M = batches.size()).
std::pair<double, Values> LossAndGrads(ModelTest& t, std::vector<std::unique_ptr<StageModel>> chain,
                                       const std::vector<Batch>& batches, kernels::Ops& ops) {
  double loss = 0;
  for (size_t mb = 0; mb < batches.size(); ++mb) loss += t.ForwardChain(chain, mb, batches[mb]);
  for (size_t mb = 0; mb < batches.size(); ++mb) t.BackwardChain(chain, mb, false);
  Values grads;
  for (auto& stage : chain) {
    for (auto& tensor : stage->tensors()) grads[tensor.name] = Host(ops, tensor.grad, tensor.size);
  }
  return {loss / batches.size(), grads};
}

// Vocabulary padding: a model of vocab 16 with real 13 computes the loss of the vocab-13 model
// (same seed: the real rows are its rows) whatever its padding rows of the head hold (set to 3
// here; in the softmax they would add 3 more terms); their gradients (lm_head's, or wte's when
// tied) are exactly 0. real_vocab_size == vocab_size is the unpadded model, bit for bit.
TEST_F(ModelTest, PaddedVocabularyIsMaskedOutOfTheLoss) {
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied);
    ModelConfig real = Tiny();
    real.n_layers = 1, real.tie_embeddings = tied;
    ModelConfig padded = real, explicit_real = real;
    padded.vocab_size = 16, padded.real_vocab_size = 13;
    explicit_real.real_vocab_size = 13;
    const std::vector<Batch> batches = MakeBatches(real, 2, 2, 9);
    // Untied: the head on a stage of its own; tied needs it beside the embedding.
    const std::vector<int> firsts = tied ? std::vector<int>{0} : std::vector<int>{0, 2};
    auto b = Chain(padded, firsts, 2, 2);
    ModelTensor* head = FindTensor(*b.back(), tied ? "wte.weight" : "lm_head.weight");
    std::vector<float> w = Host(*ops_, head->value, head->size);
    std::fill(w.begin() + 13 * real.d_model, w.end(), 3.0f);
    ops_->CopyToDevice(head->value, w.data(), w.size());
    const auto [la, ga] = LossAndGrads(*this, Chain(real, firsts, 2, 2), batches, *ops_);
    const auto [lb, gb] = LossAndGrads(*this, std::move(b), batches, *ops_);
    const auto [ls, gs] = LossAndGrads(*this, Chain(explicit_real, firsts, 2, 2), batches, *ops_);
    EXPECT_EQ(std::memcmp(&la, &ls, sizeof(double)), 0);
    EXPECT_NEAR(lb, la, 1e-6 * la);
    for (const auto& [name, want] : ga) {
      EXPECT_TRUE(BitwiseEqual(gs.at(name), want)) << name;
      const std::vector<float>& got = gb.at(name);
      const bool vocab_rows = name == "wte.weight" || name == "lm_head.weight";
      ASSERT_EQ(got.size(), vocab_rows ? want.size() / 13 * 16 : want.size()) << name;
      double scale = 1e-30;
      for (float x : want) scale = std::max(scale, std::fabs(double(x)));
      for (size_t i = 0; i < got.size(); ++i) {
        if (i < want.size()) {
          ASSERT_NEAR(got[i], want[i], 1e-5 * scale) << name << "[" << i << "]";
        } else {
          ASSERT_EQ(got[i], 0.0f) << "padding gradient " << name << "[" << i << "]";
        }
      }
    }
  }
}

TEST_F(ModelTest, LiveActivationBytesFollowTheMicrobatches) {
  ModelConfig c = Tiny();
  auto batches = MakeBatches(c, 2, 2, 5);
  auto stages = Chain(c, {0}, 2, 2);
  StageModel& s = *stages[0];
  EXPECT_EQ(s.live_activation_bytes(), 0);
  ForwardChain(stages, 0, batches[0]);
  const int64_t one = s.live_activation_bytes();
  EXPECT_GT(one, 0);
  ForwardChain(stages, 1, batches[1]);
  EXPECT_EQ(s.live_activation_bytes(), 2 * one);
  ASSERT_TRUE(s.BackwardInput(0, nullptr, nullptr).ok());
  EXPECT_GT(s.live_activation_bytes(), one);  // kept input-gradients for W
  ASSERT_TRUE(s.BackwardWeight(0).ok());
  EXPECT_EQ(s.live_activation_bytes(), one);
  ASSERT_TRUE(s.Backward(1, nullptr, nullptr).ok());
  EXPECT_EQ(s.live_activation_bytes(), 0);
}

TEST_F(ModelTest, BadInputsAreClearErrors) {
  ModelConfig c = Tiny();
  auto batches = MakeBatches(c, 1, 1, 5);
  auto s = Stage(c, 0, 4, 1, 1);
  StageInput in;
  in.tokens = batches[0].tokens.data();
  in.targets = batches[0].targets.data();
  std::vector<int32_t> bad = batches[0].tokens;
  bad[3] = 13;
  StageInput bad_in = in;
  bad_in.tokens = bad.data();
  auto r = s->Forward(0, bad_in, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tokens[3] = 13"), std::string::npos) << r.status();
  bad_in = in;
  bad_in.targets = nullptr;
  EXPECT_FALSE(s->Forward(0, bad_in, nullptr).ok());
  ASSERT_TRUE(s->Forward(0, in, nullptr).ok());
  EXPECT_EQ(s->Forward(0, in, nullptr).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s->BackwardWeight(0).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s->Backward(1, nullptr, nullptr).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(s->BackwardInput(0, nullptr, nullptr).ok());
  EXPECT_FALSE(s->BackwardInput(0, nullptr, nullptr).ok());

  auto middle = Stage(c, 1, 2, 1, 1);
  EXPECT_FALSE(middle->Forward(0, in, nullptr).ok());  // no activations, no output buffer

  StageOptions o;
  o.first_unit = 3, o.last_unit = 5;
  auto range = StageModel::Create(ops_.get(), c, o);
  ASSERT_FALSE(range.ok());
  EXPECT_NE(range.status().message().find("[3, 5]"), std::string::npos) << range.status();
  c.tie_embeddings = true;
  o.first_unit = 4, o.last_unit = 4;
  EXPECT_EQ(StageModel::Create(ops_.get(), c, o).status().code(), absl::StatusCode::kUnimplemented);

  pp::v1::ModelSpec spec;
  spec.set_vocab_size(256), spec.set_seq_len(8), spec.set_d_model(30), spec.set_n_heads(4);
  spec.set_n_layers(2);
  auto cfg = ModelConfigFromSpec(spec);
  ASSERT_FALSE(cfg.ok());
  EXPECT_NE(cfg.status().message().find("n_heads"), std::string::npos);
  spec.set_d_model(32), spec.set_seq_len(0);
  EXPECT_NE(ModelConfigFromSpec(spec).status().message().find("seq_len"), std::string::npos);
}

TEST(OptimTest, ClippingAndDecayRules) {
  EXPECT_EQ(optim::ClipScale(10.0, 0.0), 1.0f);
  EXPECT_EQ(optim::ClipScale(0.5, 1.0), 1.0f);
  EXPECT_NEAR(optim::ClipScale(4.0, 1.0), 0.25f, 1e-6);
  optim::SumSquares a = {{"b", 1.0}, {"a", 3.0}}, into;
  ASSERT_TRUE(optim::MergeSumSquares(a, into).ok());
  EXPECT_DOUBLE_EQ(optim::GlobalNorm(into), 2.0);
  auto dup = optim::MergeSumSquares({{"a", 1.0}}, into);
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.message().find("'a'"), std::string::npos);

  auto ops = kernels::MakeOps("cpu");
  ASSERT_TRUE(ops.ok());
  StageOptions o;
  o.first_unit = 1, o.last_unit = 1;
  auto stage = StageModel::Create(ops->get(), Tiny(), o);
  ASSERT_TRUE(stage.ok());
  auto before = (*stage)->ValuesToHost();
  optim::AdamWConfig cfg;
  cfg.lr = 0.1, cfg.weight_decay = 0.5;
  optim::ApplyAdamW(**ops, (*stage)->tensors(), cfg, 1, 1.0f);  // zero gradients: decay only
  for (auto& [name, v] : (*stage)->ValuesToHost()) {
    const bool matrix = FindTensor(**stage, name)->shape.size() == 2;
    const auto& b = before.at(name);
    for (size_t i = 0; i < v.size(); ++i) {
      ASSERT_EQ(v[i], matrix ? b[i] - 0.1f * (0.5f * b[i]) : b[i]) << name;
    }
  }
}

TEST(OptimTest, ConfigDefaultsFromSpec) {
  pp::v1::TrainSpec t;
  t.set_lr(0.01), t.set_beta2(0.99);
  auto c = optim::AdamWConfigFromSpec(t);
  EXPECT_EQ(c.lr, 0.01);
  EXPECT_EQ(c.beta1, 0.9);
  EXPECT_EQ(c.beta2, 0.99);
  EXPECT_EQ(c.eps, 1e-8);
}

}  // namespace
}  // namespace pp::model
