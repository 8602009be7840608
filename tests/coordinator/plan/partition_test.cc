#include <numeric>

#include "coordinator/plan/plan.h"
#include "gtest/gtest.h"

namespace pp::plan {
namespace {

pp::v1::ModelSpec Model(int layers) {
  pp::v1::ModelSpec model;
  model.set_vocab_size(256);
  model.set_seq_len(64);
  model.set_d_model(128);
  model.set_n_heads(4);
  model.set_n_layers(layers);
  return model;
}

int Sum(const std::vector<int>& v) { return std::accumulate(v.begin(), v.end(), 0); }

TEST(PartitionTest, UniformNeverDropsLayers) {
  // The failure seen elsewhere: 30 layers on 4 stages built 28. Here all 32 units are placed.
  absl::StatusOr<std::vector<int>> parts = PartitionUnits(Model(30), 4, "uniform", {}, {});
  ASSERT_TRUE(parts.ok()) << parts.status();
  EXPECT_EQ(*parts, (std::vector<int>{8, 8, 8, 8}));
  for (int layers = 1; layers <= 40; ++layers) {
    for (int S = 1; S <= layers + 2; ++S) {
      absl::StatusOr<std::vector<int>> p = PartitionUnits(Model(layers), S, "", {}, {});
      ASSERT_TRUE(p.ok());
      EXPECT_EQ(Sum(*p), layers + 2);
      EXPECT_EQ(static_cast<int>(p->size()), S);
      EXPECT_LE(*std::max_element(p->begin(), p->end()) - *std::min_element(p->begin(), p->end()),
                1);
    }
  }
}

TEST(PartitionTest, RefusesEmptyStagesAndDroppedLayers) {
  absl::StatusOr<std::vector<int>> too_many = PartitionUnits(Model(4), 7, "uniform", {}, {});
  ASSERT_FALSE(too_many.ok());
  EXPECT_EQ(too_many.status().message(),
            "cannot split 6 partition units (4 layers + embedding + head) into 7 stages: a stage "
            "would be empty");
  absl::StatusOr<std::vector<int>> dropped =
      PartitionUnits(Model(30), 4, "explicit", {7, 7, 7, 7}, {});
  ASSERT_FALSE(dropped.ok());
  EXPECT_EQ(dropped.status().message(),
            "explicit partition covers 28 units but the model has 32 partition units (30 layers "
            "+ embedding + head)");
  EXPECT_FALSE(PartitionUnits(Model(4), 2, "explicit", {6, 0}, {}).ok());
  EXPECT_FALSE(PartitionUnits(Model(4), 2, "explicit", {6}, {}).ok());
  EXPECT_FALSE(PartitionUnits(Model(4), 2, "bogus", {}, {}).ok());
  EXPECT_FALSE(PartitionUnits(Model(0), 1, "uniform", {}, {}).ok());
  EXPECT_EQ(*PartitionUnits(Model(4), 2, "explicit", {1, 5}, {}), (std::vector<int>{1, 5}));
}

TEST(PartitionTest, CostBalancesTheHeaviestStage) {
  // Units: embedding 1, four blocks 4, head 6. Best max on 3 stages is 9: {1,4,4} {4,4} {6}.
  const std::vector<double> costs = {1, 4, 4, 4, 4, 6};
  absl::StatusOr<std::vector<int>> parts = PartitionUnits(Model(4), 3, "cost", {}, costs);
  ASSERT_TRUE(parts.ok()) << parts.status();
  EXPECT_EQ(*parts, (std::vector<int>{3, 2, 1}));
  EXPECT_FALSE(PartitionUnits(Model(4), 3, "cost", {}, {1, 2}).ok());
  EXPECT_FALSE(PartitionUnits(Model(4), 3, "cost", {}, {1, 4, 4, 4, 4, -6}).ok());
}

TEST(PartitionTest, ParamsCountsEmbeddingAndHead) {
  // C=128, vocab 50000: embedding and head (6.4M params each) dwarf a block (197k), so with
  // 2 + 12 units on 4 stages the embedding and head get stages of their own.
  pp::v1::ModelSpec model = Model(12);
  model.set_vocab_size(50000);
  absl::StatusOr<std::vector<int>> parts = PartitionUnits(model, 4, "params", {}, {});
  ASSERT_TRUE(parts.ok()) << parts.status();
  EXPECT_EQ(parts->front(), 1);
  EXPECT_EQ(parts->back(), 1);
  EXPECT_EQ(Sum(*parts), 14);
}

}  // namespace
}  // namespace pp::plan
