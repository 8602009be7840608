// Packed rows (common/packing.h): the rule on hand-made streams, a property check against a naive
// restatement on random streams, and the spec's rules for train.tokens_per_microbatch.
#include "common/packing.h"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pp::common {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int32_t kEot = 0;

PackedRows Pack(const std::vector<int32_t>& tokens, int64_t piece_limit, int64_t budget) {
  absl::StatusOr<PackedRows> rows = PackRows(
      static_cast<int64_t>(tokens.size()),
      [&](int64_t start, int64_t count, int32_t* out) {
        std::copy_n(tokens.begin() + start, count, out);
        return absl::OkStatus();
      },
      kEot, piece_limit, budget);
  EXPECT_TRUE(rows.ok()) << rows.status();
  return rows.ok() ? *rows : PackedRows{};
}

// Documents a b c . (a document ends with its end-of-text 0), then one token only a target.
TEST(PackRowsTest, WholeDocumentsGoGreedilyIntoRowsOfAtMostTheBudget) {
  //                                 doc 0 (3)  doc 1 (4)     doc 2 (2) doc 3 (3, no eot) target
  const std::vector<int32_t> tokens = {5, 6, 0, 7, 8, 9, 0, 4, 0, 1, 2, 3, 9};
  const PackedRows rows = Pack(tokens, /*piece_limit=*/8, /*budget=*/7);
  // 3 + 4 = 7 fits; 2 + 3 = 5 fits; the last token is only a target.
  EXPECT_THAT(rows.starts, ElementsAre(0, 7, 12));
  EXPECT_EQ(rows.count(), 2);
  EXPECT_EQ(rows.length(0), 7);
  EXPECT_EQ(rows.length(1), 5);
}

TEST(PackRowsTest, ADocumentLongerThanAPieceIsCutIntoPiecesAndKept) {
  // One document of 10 inputs (no end of text), pieces of 4: 4 4 2; a budget of 6 takes one
  // piece of 4 per row, and the last 2 join the second piece's row.
  std::vector<int32_t> tokens(11, 7);
  const PackedRows rows = Pack(tokens, /*piece_limit=*/4, /*budget=*/6);
  EXPECT_THAT(rows.starts, ElementsAre(0, 4, 10));
  EXPECT_THAT(RowSequences(tokens.data() + 4, 6, kEot, 4), ElementsAre(0, 4, 6));
}

TEST(PackRowsTest, EmptyDocumentsBecomeOneTokenDocumentsAndABudgetOfOneWorks) {
  // "0 0": the second end of text is a one-token document of its own; nothing is empty.
  const std::vector<int32_t> tokens = {3, 0, 0, 0, 4, 5};
  const PackedRows rows = Pack(tokens, /*piece_limit=*/1, /*budget=*/1);
  EXPECT_THAT(rows.starts, ElementsAre(0, 1, 2, 3, 4, 5));
  const PackedRows wide = Pack(tokens, /*piece_limit=*/8, /*budget=*/8);
  EXPECT_THAT(wide.starts, ElementsAre(0, 5));
  EXPECT_THAT(RowSequences(tokens.data(), 5, kEot, 8), ElementsAre(0, 2, 3, 4, 5));
}

// The rule restated naively: documents, then pieces, then greedy rows, all as lists.
std::vector<int64_t> NaivePieceStarts(const std::vector<int32_t>& tokens, int64_t limit) {
  std::vector<int64_t> starts;
  const int64_t inputs = static_cast<int64_t>(tokens.size()) - 1;
  int64_t doc = 0;
  for (int64_t p = 0; p < inputs; ++p) {
    if ((p - doc) % limit == 0) starts.push_back(p);
    if (tokens[p] == kEot) doc = p + 1;
  }
  return starts;
}

TEST(PackRowsTest, RandomStreamsMatchTheRuleRestatedNaively) {
  std::mt19937 rng(17);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 400);
    std::vector<int32_t> tokens(n);
    const int eot_one_in = 1 + static_cast<int>(rng() % 30);
    for (int32_t& t : tokens)
      t = rng() % eot_one_in == 0 ? kEot : 1 + static_cast<int32_t>(rng() % 50);
    const int64_t limit = 1 + rng() % 40;
    const int64_t budget = limit + rng() % 60;
    const PackedRows rows = Pack(tokens, limit, budget);
    const std::vector<int64_t> pieces = NaivePieceStarts(tokens, limit);
    // Greedy rows over the naive pieces.
    std::vector<int64_t> want = {0};
    int64_t used = 0;
    for (size_t i = 0; i < pieces.size(); ++i) {
      const int64_t end = i + 1 < pieces.size() ? pieces[i + 1] : n - 1;
      if (used + (end - pieces[i]) > budget) want.push_back(pieces[i]), used = 0;
      used += end - pieces[i];
    }
    want.push_back(n - 1);
    ASSERT_EQ(rows.starts, want) << "trial " << trial;
    // Each row's sequences, from its tokens alone, are the pieces inside it.
    for (int64_t g = 0; g < rows.count(); ++g) {
      ASSERT_GE(rows.length(g), 1);
      ASSERT_LE(rows.length(g), budget);
      const std::vector<int32_t> cu =
          RowSequences(tokens.data() + rows.starts[g], rows.length(g), kEot, limit);
      std::vector<int64_t> inside;
      for (int64_t p : pieces) {
        if (p >= rows.starts[g] && p < rows.starts[g + 1]) inside.push_back(p - rows.starts[g]);
      }
      inside.push_back(rows.length(g));
      ASSERT_EQ(std::vector<int64_t>(cu.begin(), cu.end()), inside) << "trial " << trial;
    }
  }
}

TEST(PackingTest, TokenMeanLossWeighsEachMicrobatchByItsTokens) {
  EXPECT_DOUBLE_EQ(TokenMeanLoss({1.0, 4.0}, {3, 1}), (3.0 + 4.0) / 4.0);
  EXPECT_EQ(SequenceSquares({0, 2, 5}), 4 + 9);
}

// A valid packed spec, then each rule broken once.
pp::v1::JobSpec PackedSpec() {
  pp::v1::JobSpec spec;
  spec.set_name("p");
  spec.mutable_model()->set_vocab_size(256);
  spec.mutable_model()->set_seq_len(16);
  spec.mutable_model()->set_d_model(32);
  spec.mutable_model()->set_n_heads(2);
  spec.mutable_model()->set_n_layers(2);
  spec.mutable_model()->set_positions("document");
  spec.mutable_parallel()->set_pipeline(1);
  spec.mutable_parallel()->set_schedule("1f1b");
  spec.mutable_train()->set_steps(1);
  spec.mutable_train()->set_microbatches(2);
  spec.mutable_train()->set_lr(1e-3);
  spec.mutable_train()->set_tokens_per_microbatch(40);
  spec.mutable_data()->set_format("generated");
  spec.mutable_data()->set_documents("mask");
  ApplyDefaults(&spec);
  return spec;
}

std::string Problem(const pp::v1::JobSpec& spec) {
  return std::string(ValidateJobSpecFields(spec).message());
}

TEST(PackingSpecTest, AnUnsetMicrobatchSizeDefaultsToOneRow) {
  const pp::v1::JobSpec spec = PackedSpec();
  EXPECT_EQ(spec.train().microbatch_size(), 1);
  EXPECT_TRUE(ValidateJobSpecFields(spec).ok()) << ValidateJobSpecFields(spec);
  EXPECT_EQ(MaxMicrobatchTokens(spec), 40);
  EXPECT_EQ(PieceLimit(spec), 16);
}

TEST(PackingSpecTest, BadBudgetsAndMissingCompanionsAreRefusedNamingTheField) {
  pp::v1::JobSpec spec = PackedSpec();
  spec.mutable_train()->set_tokens_per_microbatch(-1);
  EXPECT_THAT(Problem(spec), HasSubstr("train.tokens_per_microbatch: -1 is not a token budget"));
  spec.mutable_train()->set_tokens_per_microbatch(kMaxTokensPerMicrobatch + 1);
  EXPECT_THAT(Problem(spec), HasSubstr("train.tokens_per_microbatch"));
  spec = PackedSpec();
  spec.mutable_train()->set_microbatch_size(4);
  EXPECT_THAT(Problem(spec), HasSubstr("train.microbatch_size: 4 beside"));
  spec = PackedSpec();
  spec.mutable_data()->clear_documents();
  EXPECT_THAT(Problem(spec), HasSubstr("data.documents \"mask\""));
  spec = PackedSpec();
  spec.mutable_model()->set_positions("absolute");
  EXPECT_THAT(Problem(spec), HasSubstr("model.positions"));
  spec = PackedSpec();
  spec.mutable_data()->add_mix();
  EXPECT_THAT(Problem(spec), HasSubstr("mix"));
  spec = PackedSpec();
  spec.mutable_train()->set_epochs(1);
  spec.mutable_train()->set_steps(0);
  EXPECT_THAT(Problem(spec), HasSubstr("train.epochs"));
}

}  // namespace
}  // namespace pp::common
