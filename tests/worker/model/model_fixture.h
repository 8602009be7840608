// The model tests' fixture: a tiny GPT, deterministic batches, chains of stages that pass
// activations by copy, a few clipped AdamW steps over a chain, bitwise comparison of outcomes.
// Test code only.
#ifndef PP_TESTS_WORKER_MODEL_MODEL_FIXTURE_H_
#define PP_TESTS_WORKER_MODEL_MODEL_FIXTURE_H_

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "tests/worker/model/model_test_util.h"
#include "worker/model/model.h"
#include "worker/optim/optim.h"

namespace pp::model {

using testing::BitwiseEqual;
using testing::FindTensor;
using Values = std::map<std::string, std::vector<float>>;

inline ModelConfig Tiny() { return testing::SmallConfig(13, 6, 8, 2, 3); }
// T = 8 (the longest document or packed sequence), two blocks (units 0..3), document positions.
inline ModelConfig DocumentsConfig() {
  ModelConfig c = testing::SmallConfig(13, 8, 8, 2, 2);
  c.document_positions = true;
  return c;
}

struct Batch {
  std::vector<int32_t> tokens, targets;
};

inline std::vector<Batch> MakeBatches(const ModelConfig& c, int B, int M, uint64_t seed) {
  std::vector<Batch> out(M);
  uint64_t s = seed;
  for (auto& b : out) {
    // Tokens and targets interleave in one stream, so each batch draws 2 x B x T values.
    const std::vector<int32_t> stream = testing::LcgTokens(s, c.vocab_size, 2 * B * c.seq_len);
    for (size_t i = 0; i < stream.size(); i += 2) {
      b.tokens.push_back(stream[i]);
      b.targets.push_back(stream[i + 1]);
    }
  }
  return out;
}

inline std::vector<float> Host(kernels::Ops& ops, const float* p, size_t n) {
  std::vector<float> v(n);
  ops.CopyToHost(v.data(), p, n);
  return v;
}


class ModelTest : public ::testing::Test {
 public:  // the chain helpers are called by free functions of the tests too
  void SetUp() override {
    auto ops = kernels::MakeOps("cpu", 1);
    ASSERT_TRUE(ops.ok()) << ops.status();
    ops_ = std::move(*ops);
  }

  std::unique_ptr<StageModel> Stage(const ModelConfig& c, int first, int last, int B, int M,
                                    uint64_t seed = 7) {
    StageOptions o;
    o.first_unit = first, o.last_unit = last, o.microbatch_size = B, o.microbatches = M;
    o.seed = seed;
    o.recompute = recompute_;
    o.precision = precision_;
    o.max_tokens = max_tokens_;
    auto s = StageModel::Create(ops_.get(), c, o);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }

  // Stages starting at each unit in `firsts` (ascending, firsts[0] == 0).
  std::vector<std::unique_ptr<StageModel>> Chain(const ModelConfig& c,
                                                 const std::vector<int>& firsts, int B, int M) {
    std::vector<std::unique_ptr<StageModel>> stages;
    for (size_t i = 0; i < firsts.size(); ++i) {
      int last = i + 1 < firsts.size() ? firsts[i + 1] - 1 : NumUnits(c) - 1;
      stages.push_back(Stage(c, firsts[i], last, B, M));
    }
    return stages;
  }

  // Units [0, n_layers] on one stage, then the head on another, B = 1, both evaluated on `in`
  // (its activations are set here): the first `floats` of the blocks' output (0: all of it) and
  // the loss.
  std::pair<std::vector<float>, double> EvaluateBodyThenHead(const ModelConfig& c, StageInput in,
                                                             size_t floats = 0) {
    auto body = Stage(c, 0, c.n_layers, 1, 1);
    auto head = Stage(c, c.n_layers + 1, c.n_layers + 1, 1, 1);
    const size_t n = body->activation_size();
    float* act = ops_->Alloc(n);
    EXPECT_TRUE(body->Evaluate(in, act).ok());
    in.activations = act;
    absl::StatusOr<double> loss = head->Evaluate(in, nullptr);
    EXPECT_TRUE(loss.ok()) << loss.status();
    std::vector<float> states = Host(*ops_, act, floats == 0 ? n : floats);
    ops_->Free(act);
    return {states, loss.ok() ? *loss : 0.0};
  }

  // Forward of microbatch mb through the chain; activations cross stages by copy through host
  // memory. Returns the microbatch loss.
  double ForwardChain(std::vector<std::unique_ptr<StageModel>>& stages, int mb, const Batch& b) {
    std::vector<float> act;
    double loss = 0;
    for (auto& s : stages) {
      const size_t n = s->activation_size();
      float* in = nullptr;
      if (!act.empty()) {
        in = ops_->Alloc(n);
        ops_->CopyToDevice(in, act.data(), n);
      }
      float* out = s->has_head() ? nullptr : ops_->Alloc(n);
      StageInput si;
      si.tokens = s->has_embedding() ? b.tokens.data() : nullptr;
      si.targets = s->has_head() ? b.targets.data() : nullptr;
      si.activations = in;
      auto r = s->Forward(mb, si, out);
      EXPECT_TRUE(r.ok()) << r.status();
      loss = r.ok() ? *r : 0.0;
      if (out) act = Host(*ops_, out, n);
      ops_->Free(in);
      ops_->Free(out);
    }
    return loss;
  }

  // Backward (full, or input part only) of microbatch mb through the chain, by copy.
  void BackwardChain(std::vector<std::unique_ptr<StageModel>>& stages, int mb, bool input_only) {
    std::vector<float> grad;
    for (size_t i = stages.size(); i-- > 0;) {
      StageModel& s = *stages[i];
      const size_t n = s.activation_size();
      float* gout = nullptr;
      if (!grad.empty()) {
        gout = ops_->Alloc(n);
        ops_->CopyToDevice(gout, grad.data(), n);
      }
      float* gin = s.has_embedding() ? nullptr : ops_->Alloc(n);
      absl::Status st = input_only ? s.BackwardInput(mb, gout, gin) : s.Backward(mb, gout, gin);
      EXPECT_TRUE(st.ok()) << st;
      if (gin) grad = Host(*ops_, gin, n);
      ops_->Free(gout);
      ops_->Free(gin);
    }
  }

  struct Outcome {
    std::vector<double> losses;  // step losses
    Values grads;                // of the last step, before its update
    Values values;               // after the last update
  };

  // `steps` training steps with clipping on a chain cut at `firsts`: every forward, then the
  // backwards in microbatch order (split into all I then all W when split_iw).
  Outcome Train(const std::vector<int>& firsts, bool split_iw, int steps) {
    const ModelConfig c = Tiny();
    const int B = 2, M = 3;
    auto stages = Chain(c, firsts, B, M);
    optim::AdamWConfig adamw;
    adamw.lr = 1e-2, adamw.weight_decay = 0.1, adamw.grad_clip = 0.05;
    Outcome o;
    for (int step = 0; step < steps; ++step) {
      auto batches = MakeBatches(c, B, M, 100 + step);
      for (auto& s : stages) s->ZeroGrads();
      double loss = 0;
      for (int mb = 0; mb < M; ++mb) loss += ForwardChain(stages, mb, batches[mb]);
      o.losses.push_back(loss / M);
      for (int mb = 0; mb < M; ++mb) BackwardChain(stages, mb, split_iw);
      if (split_iw) {
        for (int mb = 0; mb < M; ++mb) {
          for (auto& s : stages) EXPECT_TRUE(s->BackwardWeight(mb).ok());
        }
      }
      optim::SumSquares sums;
      for (auto& s : stages) {
        EXPECT_TRUE(optim::MergeSumSquares(optim::GradSumSquares(*ops_, s->tensors()), sums).ok());
      }
      const float scale = optim::ClipScale(optim::GlobalNorm(sums), adamw.grad_clip);
      EXPECT_LT(scale, 1.0f);  // clipping is active
      o.grads.clear();
      for (auto& s : stages) {
        for (auto& t : s->tensors()) o.grads[t.name] = Host(*ops_, t.grad, t.size);
        optim::ApplyAdamW(*ops_, s->tensors(), adamw, step + 1, scale);
      }
    }
    for (auto& s : stages) {
      for (auto& [name, v] : s->ValuesToHost()) o.values[name] = v;
    }
    return o;
  }

  void ExpectSameBits(const Outcome& a, const Outcome& b, const std::string& what) {
    ASSERT_EQ(a.losses.size(), b.losses.size());
    for (size_t i = 0; i < a.losses.size(); ++i) {
      EXPECT_EQ(0, std::memcmp(&a.losses[i], &b.losses[i], sizeof(double)))
          << what << " loss of step " << i << ": " << a.losses[i] << " vs " << b.losses[i];
    }
    ASSERT_EQ(a.grads.size(), ModelTensors(Tiny()).size());
    ASSERT_EQ(b.grads.size(), a.grads.size());
    for (const auto& [name, g] : a.grads) {
      EXPECT_TRUE(BitwiseEqual(g, b.grads.at(name))) << what << " grad of " << name;
      EXPECT_TRUE(BitwiseEqual(a.values.at(name), b.values.at(name)))
          << what << " value of " << name;
    }
  }

  std::unique_ptr<kernels::Ops> ops_;
  Recompute recompute_ = Recompute::kNone;  // of the stages Stage() makes from now on
  common::Precision precision_ = common::Precision::kFp32;  // ops_'s, for those stages too
  int64_t max_tokens_ = 0;  // StageOptions.max_tokens of those stages: packed rows when > 0
};

}  // namespace pp::model

#endif  // PP_TESTS_WORKER_MODEL_MODEL_FIXTURE_H_
