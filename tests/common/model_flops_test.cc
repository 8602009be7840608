// common/model_flops.h against counts made by hand, product by product, for a tiny GPT.
#include "common/model_flops.h"

#include "gtest/gtest.h"

namespace pp::common {
namespace {

// 2 layers, C = 8, T = 4, vocab 16.
pp::v1::ModelSpec Tiny() {
  pp::v1::ModelSpec m;
  m.set_n_layers(2), m.set_d_model(8), m.set_seq_len(4), m.set_vocab_size(16), m.set_n_heads(2);
  return m;
}

TEST(ModelFlopsTest, MatmulParametersAreTheWeightMatricesOfTheProductsAndTheHead) {
  // A block's four Linear weights (out x in): qkv 24 x 8, proj 8 x 8, fc 32 x 8, mlp proj 8 x 32.
  const double block = 24 * 8 + 8 * 8 + 32 * 8 + 8 * 32;     // 768
  const double lm_head = 16 * 8;                             // the logits' product, 128
  EXPECT_EQ(MatmulParameters(Tiny()), 2 * block + lm_head);  // 1664
  // wte's lookup is a gather, not a product: tying it to the head changes nothing here.
  pp::v1::ModelSpec tied = Tiny();
  tied.set_tie_embeddings(true);
  EXPECT_EQ(MatmulParameters(tied), MatmulParameters(Tiny()));
}

TEST(ModelFlopsTest, TrainFlopsAreSixPerMatmulWeightPlusTheAttentionProducts) {
  // 6 x 1664 = 9984 for the products; attention: QK^T and AV are 2 x T x C multiply-adds per
  // token and layer forward (2 FLOPs each), 3x that with the backward: 12 x 2 x 4 x 8 = 768.
  EXPECT_EQ(TrainFlopsPerToken(Tiny()), 9984 + 768);
  // Only attention grows with T: doubling it adds 768 more.
  pp::v1::ModelSpec longer = Tiny();
  longer.set_seq_len(8);
  EXPECT_EQ(TrainFlopsPerToken(longer) - TrainFlopsPerToken(Tiny()), 768);
}

TEST(ModelFlopsTest, LargestSpecsCountWithoutOverflow) {
  // Every field at its limit (common/spec_bounds.h): about 2.6e13 FLOPs a token (far past int32),
  // exact in double as a sum of products of powers of two.
  pp::v1::ModelSpec m;
  m.set_n_layers(1024), m.set_d_model(16384), m.set_seq_len(32768), m.set_vocab_size(1 << 20);
  const double C = 16384;
  const double expected = 6 * (1024 * 12 * C * C + (1 << 20) * C) + 12.0 * 1024 * 32768 * C;
  EXPECT_EQ(TrainFlopsPerToken(m), expected);
  EXPECT_GT(TrainFlopsPerToken(m), 2.6e13);
}

}  // namespace
}  // namespace pp::common
