// Tensor-parallel slices of the named tensors: shapes, bitwise cut/assemble round trips, and
// initial values equal to the same slice of the unsplit model.
#include <cstring>
#include <numeric>

#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "worker/model/model.h"
#include "tests/worker/model/model_test_util.h"
#include "worker/parallel/parallel.h"

namespace pp::model {
namespace {

using common::AssembleSlices;
using common::CutSlice;
using common::IsWhole;
using common::Overlap;
using common::SliceShape;
using common::SliceValues;
using common::TensorSlice;

using testing::FindTensor;
using testing::BitwiseEqual;

ModelConfig Config() { return testing::SmallConfig(11, 4, 8, 4, 2); }

TEST(SliceTest, MegatronLayoutOfEachTensor) {
  const ModelConfig c = Config();
  auto slice = [&](const std::string& name, std::vector<int> shape, int rank) {
    return *TensorParallelSlice(c, {name, shape}, rank, 2);
  };
  TensorSlice qkv = slice("h.0.attn.qkv.weight", {24, 8}, 1);
  EXPECT_EQ(qkv.dim, 0);
  EXPECT_EQ(qkv.parts, 3);
  EXPECT_EQ(qkv.offset, 4);
  EXPECT_EQ(qkv.length, 4);
  EXPECT_EQ(*SliceShape({24, 8}, qkv), (std::vector<int>{12, 8}));
  TensorSlice proj = slice("h.1.mlp.proj.weight", {8, 32}, 1);
  EXPECT_EQ(proj.dim, 1);
  EXPECT_EQ(proj.offset, 16);
  EXPECT_EQ(*SliceShape({8, 32}, proj), (std::vector<int>{8, 16}));
  EXPECT_EQ(*SliceShape({32}, slice("h.0.mlp.fc.bias", {32}, 0)), (std::vector<int>{16}));
  for (const char* replicated : {"wte.weight", "h.0.ln_1.weight", "h.0.attn.proj.bias",
                                 "h.0.mlp.proj.bias", "lm_head.weight"}) {
    EXPECT_TRUE(IsWhole(slice(replicated, {11, 8}, 1), {11, 8})) << replicated;
  }
  // One TP rank holds all of q, k and v: whole, so checkpoints mark no slice.
  EXPECT_TRUE(IsWhole(*TensorParallelSlice(c, {"h.0.attn.qkv.weight", {24, 8}}, 0, 1), {24, 8}));
  EXPECT_FALSE(IsWhole(qkv, {24, 8}));
  EXPECT_FALSE(TensorParallelSlice(c, {"wte.weight", {11, 8}}, 0, 3).ok());  // 3 does not divide 4
  EXPECT_FALSE(TensorParallelSlice(c, {"wte.weight", {11, 8}}, 2, 2).ok());
}

TEST(SliceTest, CutThenAssembleRoundTripsBitwise) {
  const ModelConfig c = Config();
  for (int tp : {1, 2, 4}) {
    for (const TensorShape& t : ModelTensors(c)) {
      std::vector<float> full(t.size());
      std::iota(full.begin(), full.end(), 0.5f);
      std::vector<SliceValues> pieces;
      size_t held = 0;
      for (int r = 0; r < tp; ++r) {
        TensorSlice s = *TensorParallelSlice(c, t, r, tp);
        absl::StatusOr<std::vector<float>> part = CutSlice(t.shape, s, full);
        ASSERT_TRUE(part.ok()) << part.status();
        held += part->size();
        pieces.push_back({s, *part});
      }
      if (!IsWhole(pieces[0].slice, t.shape)) {
        EXPECT_EQ(held, t.size()) << t.name;  // split tensors: every element held once
      }
      absl::StatusOr<std::vector<float>> back =
          AssembleSlices(t.name, t.shape, pieces, Overlap::kMustAgree);
      ASSERT_TRUE(back.ok()) << back.status();
      EXPECT_TRUE(BitwiseEqual(*back, full)) << t.name << " tp " << tp;
    }
  }
}

TEST(SliceTest, AssemblyRefusesGapsDisagreementAndBadSizes) {
  const ModelConfig c = Config();
  const TensorShape qkv{"h.0.attn.qkv.weight", {24, 8}};
  std::vector<float> full(qkv.size(), 1.0f);
  TensorSlice s0 = *TensorParallelSlice(c, qkv, 0, 2);
  absl::Status gap = AssembleSlices(qkv.name, qkv.shape, {{s0, *CutSlice(qkv.shape, s0, full)}},
                                    Overlap::kMustAgree)
                         .status();
  EXPECT_NE(gap.message().find("h.0.attn.qkv.weight"), std::string::npos) << gap;
  const TensorShape ln{"h.0.ln_1.weight", {8}};
  TensorSlice whole = *TensorParallelSlice(c, ln, 0, 2);
  std::vector<float> a(8, 1.0f), b(8, 1.0f);
  b[3] = 2.0f;
  EXPECT_FALSE(
      AssembleSlices(ln.name, ln.shape, {{whole, a}, {whole, b}}, Overlap::kMustAgree).ok());
  EXPECT_TRUE(
      AssembleSlices(ln.name, ln.shape, {{whole, a}, {whole, a}}, Overlap::kMustAgree).ok());
  EXPECT_FALSE(
      AssembleSlices(ln.name, ln.shape, {{whole, std::vector<float>(7)}}, Overlap::kMustAgree)
          .ok());
  EXPECT_FALSE(CutSlice(ln.shape, TensorSlice{0, 1, 4, 8}, a).ok());
  EXPECT_FALSE(CutSlice(ln.shape, whole, std::vector<float>(3)).ok());
}

TEST(SliceTest, TensorParallelRanksStartFromSlicesOfTheUnsplitInit) {
  const ModelConfig c = Config();
  auto ops = kernels::MakeOps("cpu", 1);
  ASSERT_TRUE(ops.ok());
  std::vector<std::unique_ptr<parallel::Collectives>> group = parallel::MakeInProcessGroup(2);
  StageOptions o;
  o.first_unit = 0, o.last_unit = NumUnits(c) - 1, o.seed = 3;
  for (int r = 0; r < 2; ++r) {
    o.tensor_parallel = group[r].get();
    auto stage = StageModel::Create(ops->get(), c, o);
    ASSERT_TRUE(stage.ok()) << stage.status();
    std::map<std::string, std::vector<float>> held = (*stage)->ValuesToHost();
    for (const TensorShape& t : ModelTensors(c)) {
      ModelTensor* mt = FindTensor(**stage, t.name);
      ASSERT_NE(mt, nullptr) << t.name;
      EXPECT_EQ(mt->shape, *SliceShape(t.shape, mt->slice)) << t.name;
      std::vector<float> expected =
          *CutSlice(t.shape, mt->slice, InitTensorValues(t, c.n_layers, 3));
      EXPECT_TRUE(BitwiseEqual(held[t.name], expected)) << t.name << " rank " << r;
    }
  }
  // A group size that does not divide the heads is refused by name.
  std::vector<std::unique_ptr<parallel::Collectives>> three = parallel::MakeInProcessGroup(3);
  o.tensor_parallel = three[0].get();
  absl::Status bad = StageModel::Create(ops->get(), c, o).status();
  EXPECT_NE(bad.message().find("n_heads"), std::string::npos) << bad;
}

}  // namespace
}  // namespace pp::model
