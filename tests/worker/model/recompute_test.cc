// Activation recomputation in the stage model (stage_impl.h): full and selective give the losses,
// gradients and updates of none bit for bit, on every cut and with the backward split into I
// and W; between a forward and its backward they hold exactly the bytes the planner's memory
// model says (coordinator/plan/memory.h HeldBytesPerMicrobatch), which are fewer.
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "coordinator/plan/plan.h"
#include "gtest/gtest.h"
#include "tests/worker/model/model_fixture.h"

namespace pp::model {
namespace {

class RecomputeTest : public ModelTest {};

const char* NameOf(Recompute mode) { return common::RecomputeName(mode); }

TEST_F(RecomputeTest, FullAndSelectiveGiveTheBitsOfNone) {
  const Outcome plain = Train({0}, false, 2);
  for (Recompute mode : {Recompute::kFull, Recompute::kSelective}) {
    recompute_ = mode;
    for (const std::vector<int>& firsts :
         {std::vector<int>{0}, std::vector<int>{0, 2, 4}, std::vector<int>{0, 1, 2, 3, 4}}) {
      for (bool split_iw : {false, true}) {
        ExpectSameBits(plain, Train(firsts, split_iw, 2),
                       absl::StrCat(NameOf(mode), ", ", firsts.size(), " stages",
                                    split_iw ? ", I then W" : ""));
      }
    }
  }
}

// The tiny model as a job spec, for the planner's memory model.
pp::v1::JobSpec TinySpec(Recompute mode) {
  const ModelConfig c = Tiny();
  pp::v1::JobSpec spec;
  pp::v1::ModelSpec* m = spec.mutable_model();
  m->set_vocab_size(c.vocab_size);
  m->set_seq_len(c.seq_len);
  m->set_d_model(c.d_model);
  m->set_n_heads(c.n_heads);
  m->set_n_layers(c.n_layers);
  spec.mutable_train()->set_microbatch_size(2);
  spec.mutable_parallel()->set_recompute(NameOf(mode));
  return spec;
}

// Live bytes after one forward of each stage of the cut at units 0 | 1-2 | 3-4 (the embedding,
// two blocks, a block and the head), then after its input-gradient, then after W.
struct Live {
  std::vector<int64_t> forward, input_grad, weight;
};
Live Measure(ModelTest& t, std::vector<std::unique_ptr<StageModel>>& stages, const Batch& b) {
  Live live;
  t.ForwardChain(stages, 0, b);
  for (auto& s : stages) live.forward.push_back(s->live_activation_bytes());
  t.BackwardChain(stages, 0, /*input_only=*/true);
  for (auto& s : stages) live.input_grad.push_back(s->live_activation_bytes());
  for (auto& s : stages) EXPECT_TRUE(s->BackwardWeight(0).ok());
  for (auto& s : stages) live.weight.push_back(s->live_activation_bytes());
  return live;
}

TEST_F(RecomputeTest, HeldBytesAreTheMemoryModelsAndFewer) {
  const ModelConfig c = Tiny();
  const int B = 2;
  const int64_t N = B * c.seq_len, NC = N * c.d_model * 4,
                att = int64_t{B} * c.n_heads * c.seq_len * 2 * 4;  // a block's attention stats
  const std::vector<int> firsts = {0, 1, 3}, units = {1, 2, 2};
  const Batch batch = MakeBatches(c, B, 1, 21)[0];
  Live none;
  for (Recompute mode : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    recompute_ = mode;
    auto stages = Chain(c, firsts, B, 1);
    const Live live = Measure(*this, stages, batch);
    absl::StatusOr<std::vector<int64_t>> held =
        plan::HeldBytesPerMicrobatch(TinySpec(mode), units);
    ASSERT_TRUE(held.ok()) << held.status();
    EXPECT_EQ(live.forward, *held) << NameOf(mode);
    EXPECT_EQ(live.weight, (std::vector<int64_t>{0, 0, 0})) << NameOf(mode);
    if (mode == Recompute::kNone) {
      none = live;
      continue;
    }
    // From the input-gradient on, the state is none's: W reads what the forward kept.
    EXPECT_EQ(live.input_grad, none.input_grad) << NameOf(mode);
    std::cout << NameOf(mode) << ": held after a forward per stage";
    for (size_t s = 0; s < units.size(); ++s) {
      std::cout << " " << live.forward[s] << " (none " << none.forward[s] << ")";
    }
    std::cout << " bytes\n";
    if (mode == Recompute::kFull) {  // the inputs: tokens; the input copy; the copy, targets
      EXPECT_EQ(live.forward, (std::vector<int64_t>{N * 4, NC, NC + N * 4}));
    } else {  // each block's attention stats fewer: no block on stage 0, two on 1, one on 2
      EXPECT_EQ(live.forward, (std::vector<int64_t>{none.forward[0], none.forward[1] - 2 * att,
                                                    none.forward[2] - att}));
    }
  }
}

// A recomputing stage still refuses what a plain one refuses, and forgets nothing on errors.
TEST_F(RecomputeTest, TheContractHoldsUnderRecomputation) {
  const ModelConfig c = Tiny();
  recompute_ = Recompute::kFull;
  auto stages = Chain(c, {0}, 2, 2);
  StageModel& s = *stages[0];
  const Batch batch = MakeBatches(c, 2, 1, 3)[0];
  ForwardChain(stages, 0, batch);
  StageInput in;
  in.tokens = batch.tokens.data(), in.targets = batch.targets.data();
  EXPECT_EQ(s.Forward(0, in, nullptr).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.BackwardWeight(0).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(s.Backward(0, nullptr, nullptr).ok());
  EXPECT_EQ(s.live_activation_bytes(), 0);
  // Evaluation keeps nothing, whatever the mode.
  recompute_ = Recompute::kSelective;
  auto eval = Chain(c, {0}, 2, 2);
  ASSERT_TRUE(eval[0]->Evaluate(in, nullptr).ok());
  EXPECT_EQ(eval[0]->live_activation_bytes(), 0);
}

TEST(RecomputeNames, NamesAndRefusals) {
  EXPECT_EQ(*common::RecomputeFromName(""), Recompute::kNone);
  EXPECT_EQ(*common::RecomputeFromName("none"), Recompute::kNone);
  EXPECT_EQ(*common::RecomputeFromName("full"), Recompute::kFull);
  EXPECT_EQ(*common::RecomputeFromName("selective"), Recompute::kSelective);
  for (const char* bad : {"auto", "Full", "some"}) {
    absl::StatusOr<Recompute> mode = common::RecomputeFromName(bad);
    EXPECT_EQ(mode.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(mode.status().message().find("parallel.recompute"), std::string::npos) << bad;
  }
}

}  // namespace
}  // namespace pp::model
