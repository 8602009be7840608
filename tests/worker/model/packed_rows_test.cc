// Packed variable-length microbatches in the stage model (issue 33; model.h StageInput.sequences):
// a row of several sequences gives, sequence for sequence, the states and losses each gets alone
// (within 1e-5 relative: products over another row count); the loss gradient is seeded with
// 1/step_tokens (doubling it halves every gradient, exactly); a shorter row keeps fewer bytes;
// recomputation gives none's gradients bit for bit; bad rows are clear errors.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker/model/model_fixture.h"

namespace pp::model {
namespace {

struct Row {
  std::vector<int32_t> tokens, targets, sequences;
  int n() const { return sequences.back(); }
};

Row MakeRow(const std::vector<int>& lengths, uint64_t seed) {
  Row row;
  row.sequences = {0};
  for (int length : lengths) row.sequences.push_back(row.sequences.back() + length);
  row.tokens = testing::LcgTokens(seed, 13, row.n());
  row.targets = testing::LcgTokens(seed, 13, row.n());
  return row;
}

// Sequence i of `row` as a row of its own.
Row Piece(const Row& row, int i) {
  const int from = row.sequences[i], to = row.sequences[i + 1];
  return Row{{row.tokens.begin() + from, row.tokens.begin() + to},
             {row.targets.begin() + from, row.targets.begin() + to},
             {0, to - from}};
}

StageInput Input(const Row& row, int64_t step_tokens) {
  StageInput in;
  in.tokens = row.tokens.data(), in.targets = row.targets.data();
  in.sequences = row.sequences.data();
  in.num_sequences = static_cast<int>(row.sequences.size()) - 1;
  in.step_tokens = step_tokens;
  return in;
}

class PackedRowsTest : public ModelTest {
 protected:
  void SetUp() override {
    ModelTest::SetUp();
    max_tokens_ = 16;  // rows of up to 16 tokens, sequences of up to seq_len 8
  }
  // The blocks' output (n,C) and the head's loss of `row`, evaluated.
  std::pair<std::vector<float>, double> Evaluate(const Row& row) {
    const ModelConfig c = DocumentsConfig();
    return EvaluateBodyThenHead(c, Input(row, row.n()), static_cast<size_t>(row.n()) * c.d_model);
  }
  // One whole-model stage: forward and backward of each row in order, each seeded with
  // 1/step_tokens; the gradients by name.
  Values Gradients(const std::vector<Row>& rows, int64_t step_tokens, bool split_iw) {
    const ModelConfig c = DocumentsConfig();
    auto stage = Stage(c, 0, NumUnits(c) - 1, 1, static_cast<int>(rows.size()));
    for (size_t mb = 0; mb < rows.size(); ++mb) {
      EXPECT_TRUE(stage->Forward(int(mb), Input(rows[mb], step_tokens), nullptr).ok());
    }
    for (size_t mb = 0; mb < rows.size(); ++mb) {
      if (split_iw) {
        EXPECT_TRUE(stage->BackwardInput(int(mb), nullptr, nullptr).ok());
        EXPECT_TRUE(stage->BackwardWeight(int(mb)).ok());
      } else {
        EXPECT_TRUE(stage->Backward(int(mb), nullptr, nullptr).ok());
      }
    }
    EXPECT_EQ(stage->live_activation_bytes(), 0);
    Values grads;
    for (auto& t : stage->tensors()) grads[t.name] = Host(*ops_, t.grad, t.size);
    return grads;
  }
};

TEST_F(PackedRowsTest, EachSequenceOfARowGetsWhatItGetsAlone) {
  const ModelConfig c = DocumentsConfig();
  const Row row = MakeRow({3, 8, 1, 4}, 5);
  const auto [row_states, row_loss] = Evaluate(row);
  double weighted = 0;
  for (int i = 0; i + 1 < static_cast<int>(row.sequences.size()); ++i) {
    const Row piece = Piece(row, i);
    const auto [states, loss] = Evaluate(piece);
    weighted += loss * piece.n();
    for (int t = 0; t < piece.n(); ++t) {
      for (int k = 0; k < c.d_model; ++k) {
        const float got = row_states[(row.sequences[i] + t) * c.d_model + k];
        const float want = states[t * c.d_model + k];
        ASSERT_NEAR(got, want, 1e-5 * std::max(1.0f, std::abs(want)))
            << "sequence " << i << " token " << t;
      }
    }
  }
  EXPECT_NEAR(row_loss, weighted / row.n(), 1e-6 * row_loss);
  // The sequences matter: one sequence over the same tokens attends across them.
  Row joined = row;
  joined.sequences = {0, 8, row.n()};
  EXPECT_GT(std::abs(Evaluate(joined).second - row_loss), 1e-4);
}

TEST_F(PackedRowsTest, TheGradientSeedIsOneOverTheStepsTokens) {
  const std::vector<Row> rows = {MakeRow({3, 8}, 1), MakeRow({5}, 2)};
  const Values once = Gradients(rows, 16, false);
  const Values twice = Gradients(rows, 32, false);
  for (const auto& [name, grad] : once) {
    for (size_t i = 0; i < grad.size(); ++i) {
      ASSERT_EQ(twice.at(name)[i], grad[i] / 2) << name << "[" << i << "]";
    }
  }
}

TEST_F(PackedRowsTest, AShorterRowKeepsFewerBytes) {
  const ModelConfig c = DocumentsConfig();
  auto stage = Stage(c, 0, NumUnits(c) - 1, 1, 2);
  const Row longer = MakeRow({8, 8}, 3), shorter = MakeRow({2, 2}, 4);
  ASSERT_TRUE(stage->Forward(0, Input(longer, 20), nullptr).ok());
  const int64_t long_bytes = stage->live_activation_bytes();
  ASSERT_TRUE(stage->Forward(1, Input(shorter, 20), nullptr).ok());
  const int64_t short_bytes = stage->live_activation_bytes() - long_bytes;
  EXPECT_GT(short_bytes, 0);
  EXPECT_LT(short_bytes * 3, long_bytes) << "a quarter of the tokens keeps a quarter the bytes";
  ASSERT_TRUE(stage->Backward(0, nullptr, nullptr).ok());
  ASSERT_TRUE(stage->Backward(1, nullptr, nullptr).ok());
  EXPECT_EQ(stage->live_activation_bytes(), 0);
}

TEST_F(PackedRowsTest, RecomputationGivesTheBitsOfNone) {
  const std::vector<Row> rows = {MakeRow({3, 8, 2}, 6), MakeRow({7}, 8)};
  const Values none = Gradients(rows, 20, true);
  for (Recompute mode : {Recompute::kFull, Recompute::kSelective}) {
    recompute_ = mode;
    const Values got = Gradients(rows, 20, true);
    for (const auto& [name, grad] : none) {
      EXPECT_EQ(got.at(name), grad) << name << " under " << common::RecomputeName(mode);
    }
  }
}

TEST_F(PackedRowsTest, BadRowsAreClearErrors) {
  const ModelConfig c = DocumentsConfig();
  auto stage = Stage(c, 0, NumUnits(c) - 1, 1, 1);
  Row row = MakeRow({3, 9}, 9);  // 9 > seq_len 8
  absl::StatusOr<double> r = stage->Forward(0, Input(row, 12), nullptr);
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr("packed sequence 1 has 9 tokens"));
  row = MakeRow({8, 8, 1}, 9);  // 17 > max_tokens 16
  r = stage->Forward(0, Input(row, 17), nullptr);
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr("exceeds max_tokens 16"));
  row = MakeRow({3, 4}, 9);
  r = stage->Forward(0, Input(row, 3), nullptr);  // fewer step tokens than the row holds
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr("step_tokens 3"));
  ModelConfig absolute = c;
  absolute.document_positions = false;
  auto plain = Stage(absolute, 0, NumUnits(c) - 1, 1, 1);
  r = plain->Forward(0, Input(row, 7), nullptr);
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr("model.positions"));
  EXPECT_EQ(stage->live_activation_bytes(), 0);
}

}  // namespace
}  // namespace pp::model
