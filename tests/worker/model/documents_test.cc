// Packed documents in the stage model (issue 33; model.h StageInput.doc_start, ModelConfig
// .document_positions): a document packed after another gives, token for token, the states and
// loss it gets alone at the start of a window (within 1e-5 relative: the attention tiles differ);
// gradients flow, with no gradient for positions no document reaches; full and selective
// recomputation give none's gradients bit for bit; tensor-parallel ranks mask too; bad inputs
// are clear errors.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/worker/model/model_fixture.h"
#include "worker/parallel/parallel.h"

namespace pp::model {
namespace {

// doc_start (T) of one row whose documents begin at `begins` (0 first, ascending).
std::vector<int32_t> Starts(int T, const std::vector<int>& begins) {
  std::vector<int32_t> s(T);
  for (int t = 0, cur = 0; t < T; ++t) {
    if (std::find(begins.begin(), begins.end(), t) != begins.end()) cur = t;
    s[t] = cur;
  }
  return s;
}

template <typename T>
std::vector<T> Concat(const std::vector<T>& a, const std::vector<T>& b) {
  std::vector<T> out = a;
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

// Rows [from, from + n) of an (T,C) output against rows [to, to + n) of another: the largest
// difference relative to the largest magnitude of the row.
double RowsRelativeDiff(const std::vector<float>& a, int from, const std::vector<float>& b, int to,
                        int n, int C) {
  double worst = 0;
  for (int r = 0; r < n; ++r) {
    double diff = 0, scale = 0;
    for (int c = 0; c < C; ++c) {
      const double x = a[(from + r) * C + c], y = b[(to + r) * C + c];
      diff = std::max(diff, std::abs(x - y));
      scale = std::max({scale, std::abs(x), std::abs(y)});
    }
    worst = std::max(worst, diff / scale);
  }
  return worst;
}

struct Window {
  std::vector<int32_t> tokens, targets, doc_start;  // (B,T) each; doc_start empty: none
};

class DocumentsTest : public ModelTest {
 protected:
  // Units [0, n_layers] then the head, B = 1: the blocks' output (T,C) and the loss.
  std::pair<std::vector<float>, double> Evaluate(const ModelConfig& c, const Window& w) {
    StageInput in;
    in.tokens = w.tokens.data(), in.targets = w.targets.data();
    in.doc_start = w.doc_start.empty() ? nullptr : w.doc_start.data();
    return EvaluateBodyThenHead(c, in);
  }

  // Forward of every window through a chain (doc_start to every stage), then the backwards in
  // window order, split into I then W when split_iw: the gradients, by name.
  Values Gradients(const ModelConfig& c, const std::vector<int>& firsts,
                   const std::vector<Window>& windows, int B, bool split_iw) {
    auto stages = Chain(c, firsts, B, static_cast<int>(windows.size()));
    for (size_t mb = 0; mb < windows.size(); ++mb) ForwardDocs(stages, int(mb), windows[mb]);
    for (size_t mb = 0; mb < windows.size(); ++mb) BackwardChain(stages, int(mb), split_iw);
    for (size_t mb = 0; split_iw && mb < windows.size(); ++mb) {
      for (auto& s : stages) EXPECT_TRUE(s->BackwardWeight(int(mb)).ok());
    }
    Values grads;
    for (auto& s : stages) {
      EXPECT_EQ(s->live_activation_bytes(), 0);
      for (auto& t : s->tensors()) grads[t.name] = Host(*ops_, t.grad, t.size);
    }
    return grads;
  }

  void ForwardDocs(std::vector<std::unique_ptr<StageModel>>& stages, int mb, const Window& w) {
    std::vector<float> act;
    for (auto& s : stages) {
      const size_t n = s->activation_size();
      float* in = act.empty() ? nullptr : ops_->Alloc(n);
      if (in != nullptr) ops_->CopyToDevice(in, act.data(), n);
      float* out = s->has_head() ? nullptr : ops_->Alloc(n);
      StageInput si;
      si.tokens = w.tokens.data(), si.targets = w.targets.data(), si.activations = in;
      si.doc_start = w.doc_start.data();
      absl::StatusOr<double> r = s->Forward(mb, si, out);
      EXPECT_TRUE(r.ok()) << r.status();
      if (out != nullptr) act = Host(*ops_, out, n);
      ops_->Free(in);
      ops_->Free(out);
    }
  }
};

TEST_F(DocumentsTest, APackedDocumentSeesWhatItSeesAloneAtTheStart) {
  const ModelConfig c = DocumentsConfig();
  const int T = c.seq_len, C = c.d_model;
  uint64_t seed = 5;
  // Document A: 3 tokens, the last the end-of-text 0; B: 5 tokens. Targets go with the tokens.
  std::vector<int32_t> a = testing::LcgTokens(seed, c.vocab_size, 3),
                       b = testing::LcgTokens(seed, c.vocab_size, 5);
  a.back() = 0;
  const std::vector<int32_t> ta = testing::LcgTokens(seed, c.vocab_size, 3),
                             tb = testing::LcgTokens(seed, c.vocab_size, 5),
                             filler = testing::LcgTokens(seed, c.vocab_size, 3);
  const Window ab{Concat(a, b), Concat(ta, tb), Starts(T, {0, 3})};
  const Window ba{Concat(b, a), Concat(tb, ta), Starts(T, {0, 5})};
  // B alone at the start: plain causal attention and positions t, which B's tokens share
  const Window alone{Concat(b, filler), Concat(tb, filler), {}};
  ModelConfig absolute = c;
  absolute.document_positions = false;
  const auto [ab_states, ab_loss] = Evaluate(c, ab);
  const auto [ba_states, ba_loss] = Evaluate(c, ba);
  const auto [alone_states, alone_loss] = Evaluate(absolute, alone);
  EXPECT_LT(RowsRelativeDiff(ab_states, 3, alone_states, 0, 5, C), 1e-5) << "B after A vs alone";
  EXPECT_LT(RowsRelativeDiff(ab_states, 3, ba_states, 0, 5, C), 1e-5) << "B after A vs first";
  EXPECT_LT(RowsRelativeDiff(ab_states, 0, ba_states, 5, 3, C), 1e-5) << "A first vs after B";
  // Every token's loss term is the same in both orders, so the means are too.
  EXPECT_NEAR(ab_loss, ba_loss, 1e-5 * ab_loss);
  // Both halves matter: absolute positions, or no mask, move B's states well off.
  const auto [abs_states, abs_loss] = Evaluate(absolute, ab);
  EXPECT_GT(RowsRelativeDiff(abs_states, 3, alone_states, 0, 5, C), 1e-3) << "absolute";
  ModelConfig unmasked = absolute;
  Window no_mask = ab;
  no_mask.doc_start.clear();
  const auto [open_states, open_loss] = Evaluate(unmasked, no_mask);
  EXPECT_GT(RowsRelativeDiff(open_states, 3, abs_states, 3, 5, C), 1e-3) << "no mask";
}

// Two microbatches of two rows each; no document is longer than 5 tokens.
std::vector<Window> PackedWindows(const ModelConfig& c) {
  const int T = c.seq_len;
  std::vector<Window> windows;
  uint64_t seed = 11;
  const std::vector<std::vector<int>> rows = {{0, 3}, {0, 2, 6}, {0, 5}, {0, 1, 4}};
  for (size_t i = 0; i < rows.size(); i += 2) {
    Window w;
    w.tokens = testing::LcgTokens(seed, c.vocab_size, 2 * T);
    w.targets = testing::LcgTokens(seed, c.vocab_size, 2 * T);
    w.doc_start = Concat(Starts(T, rows[i]), Starts(T, rows[i + 1]));
    windows.push_back(w);
  }
  return windows;
}

TEST_F(DocumentsTest, GradientsFlowAndRecomputationGivesTheBitsOfNone) {
  const ModelConfig c = DocumentsConfig();
  const std::vector<Window> windows = PackedWindows(c);
  const Values none = Gradients(c, {0}, windows, 2, false);
  for (const auto& [name, g] : none) {
    double sum = 0;
    for (float x : g) sum += double(x) * x;
    EXPECT_GT(sum, 0.0) << name << " got no gradient";
  }
  // Positions reach 4 at most: wpe rows 5..7 get exactly nothing, rows 0..4 something.
  const std::vector<float>& dwpe = none.at("wpe.weight");
  for (int p = 0; p < c.seq_len; ++p) {
    const auto row = dwpe.begin() + p * c.d_model;
    const bool any = std::any_of(row, row + c.d_model, [](float x) { return x != 0.0f; });
    EXPECT_EQ(any, p <= 4) << "wpe row " << p;
  }
  for (Recompute mode : {Recompute::kNone, Recompute::kFull, Recompute::kSelective}) {
    recompute_ = mode;
    for (const std::vector<int>& firsts : {std::vector<int>{0}, std::vector<int>{0, 2, 3}}) {
      for (bool split_iw : {false, true}) {
        const Values got = Gradients(c, firsts, windows, 2, split_iw);
        for (const auto& [name, g] : none) {
          EXPECT_TRUE(BitwiseEqual(g, got.at(name)))
              << common::RecomputeName(mode) << ", " << firsts.size() << " stages"
              << (split_iw ? ", I then W" : "") << ": " << name;
        }
      }
    }
  }
}

// Each rank's heads mask the same documents: two ranks give the unsplit loss, not the unmasked one.
TEST_F(DocumentsTest, TensorParallelRanksMaskToo) {
  const ModelConfig c = DocumentsConfig();
  const Window w = PackedWindows(c)[0];
  auto whole = Stage(c, 0, NumUnits(c) - 1, 2, 1);
  StageInput in;
  in.tokens = w.tokens.data(), in.targets = w.targets.data(), in.doc_start = w.doc_start.data();
  const double masked = *whole->Evaluate(in, nullptr);
  ModelConfig absolute = c;
  absolute.document_positions = false;
  StageInput open = in;
  open.doc_start = nullptr;
  const double unmasked = *Stage(absolute, 0, NumUnits(c) - 1, 2, 1)->Evaluate(open, nullptr);
  const int tp = 2;
  std::vector<std::unique_ptr<parallel::Collectives>> group = parallel::MakeInProcessGroup(tp);
  std::vector<double> loss(tp, 0.0);
  std::vector<std::thread> ranks;
  for (int r = 0; r < tp; ++r) {
    ranks.emplace_back([&, r] {
      auto ops = kernels::MakeOps("cpu", 1);
      ASSERT_TRUE(ops.ok()) << ops.status();
      StageOptions o;
      o.first_unit = 0, o.last_unit = NumUnits(c) - 1, o.microbatch_size = 2, o.seed = 7;
      o.tensor_parallel = group[r].get();
      auto stage = StageModel::Create(ops->get(), c, o);
      ASSERT_TRUE(stage.ok()) << stage.status();
      absl::StatusOr<double> l = (*stage)->Forward(0, in, nullptr);
      ASSERT_TRUE(l.ok()) << l.status();
      loss[r] = *l;
      EXPECT_TRUE((*stage)->Backward(0, nullptr, nullptr).ok());
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < tp; ++r) {
    EXPECT_NEAR(loss[r], masked, 1e-5 * masked) << "rank " << r;
    EXPECT_GT(std::abs(loss[r] - unmasked), 1e-4) << "rank " << r;
  }
}

TEST_F(DocumentsTest, BadDocumentInputsAreClearErrors) {
  const ModelConfig c = DocumentsConfig();
  Window w = PackedWindows(c)[0];
  auto first = Stage(c, 0, 1, 2, 1);
  auto middle = Stage(c, 1, 2, 2, 1);
  float* act = ops_->Alloc(first->activation_size());
  StageInput in;
  in.tokens = w.tokens.data();
  absl::StatusOr<double> r = first->Forward(0, in, act);  // document positions need starts
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("doc_start"), std::string::npos) << r.status();
  in.activations = act;  // a middle stage without starts: plain causal, no positions to make
  EXPECT_TRUE(middle->Evaluate(in, act).ok());
  w.doc_start[2] = 1;  // neither the previous start (0) nor its own index
  in.doc_start = w.doc_start.data();
  r = middle->Forward(0, in, act);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("doc_start[0,2] = 1"), std::string::npos) << r.status();
  EXPECT_EQ(middle->live_activation_bytes(), 0);
  ops_->Free(act);

  pp::v1::ModelSpec spec;
  spec.set_vocab_size(13), spec.set_seq_len(8), spec.set_d_model(8), spec.set_n_heads(2);
  spec.set_n_layers(2);
  for (const char* name : {"", "absolute", "document"}) {
    spec.set_positions(name);
    absl::StatusOr<ModelConfig> cfg = ModelConfigFromSpec(spec);
    ASSERT_TRUE(cfg.ok()) << cfg.status();
    EXPECT_EQ(cfg->document_positions, std::string(name) == "document") << name;
  }
  spec.set_positions("relative");
  absl::StatusOr<ModelConfig> bad = ModelConfigFromSpec(spec);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("model.positions"), std::string::npos) << bad.status();
}

}  // namespace
}  // namespace pp::model
