// The activation table (common/activations.h) against a real StageModel. For every recompute
// mode and both precisions, on cuts that put each unit kind alone, first, last and among others,
// every unit holds exactly its table bytes after a forward and after its input-gradient, and
// nothing after W; every stage exactly the memory model's per-microbatch figure
// (plan::HeldBytesPerMicrobatch) and the net of the table's stage event lists. The model counts
// what it really allocates (Buf), so a saved tensor added to the model but not to the table, or
// the reverse, breaks an equality here.
#include "common/activations.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/plan/plan.h"
#include "gtest/gtest.h"
#include "tests/worker/model/model_fixture.h"
#include "worker/parallel/parallel.h"

namespace pp::model {
namespace {

using common::ActivationEvent;
using common::ActivationTable;
using common::Precision;
using common::StageUnits;

// What a chain's stages hold, per stage and unit, after a forward, its input-gradient and W.
struct Held {
  std::vector<std::vector<int64_t>> forward, input_grad, weight;
};

StageUnits UnitsOf(const ModelConfig& c, int first, int last) {
  StageUnits s;
  s.embedding = first == 0, s.head = last == c.n_layers + 1;
  s.blocks = std::min(last, c.n_layers) - std::max(first, 1) + 1;
  return s;
}

ActivationTable TableFor(const ModelConfig& c, int B, int tp, Precision precision) {
  common::ActivationDims d;
  d.B = B, d.T = c.seq_len, d.C = c.d_model, d.n_heads = c.n_heads, d.vocab = c.vocab_size;
  d.tp = tp, d.precision = precision;
  absl::StatusOr<ActivationTable> table = ActivationTable::Make(d);
  EXPECT_TRUE(table.ok()) << table.status();
  return table.ok() ? *table : ActivationTable();
}

// Per local unit, the bytes `events` leave live.
std::vector<int64_t> NetPerUnit(const std::vector<ActivationEvent>& events, int units) {
  std::vector<int64_t> net(units, 0);
  for (const ActivationEvent& e : events) net.at(e.unit) += e.delta();
  return net;
}

int64_t Sum(const std::vector<int64_t>& v) {
  int64_t sum = 0;
  for (int64_t x : v) sum += x;
  return sum;
}

// The table's figures for one stage, and the model's, per unit.
void ExpectStageMatches(const ActivationTable& table, const StageUnits& units,
                        common::Recompute mode, const std::vector<int64_t>& forward,
                        const std::vector<int64_t>& input_grad, const std::vector<int64_t>& weight,
                        const std::string& what) {
  const int n = units.units();
  ASSERT_EQ(static_cast<int>(forward.size()), n) << what;
  for (int u = 0; u < n; ++u) {
    const common::UnitKind kind = units.kind(u);
    EXPECT_EQ(forward[u], common::TotalBytes(table.SavedByForward(kind, mode, u == 0)))
        << what << ", unit " << u << " after F";
    EXPECT_EQ(input_grad[u], common::TotalBytes(table.HeldAfterInputGradient(kind)))
        << what << ", unit " << u << " after I";
    EXPECT_EQ(weight[u], 0) << what << ", unit " << u << " after W";
  }
  // The event lists the memory model replays end where the model is, unit by unit.
  std::vector<ActivationEvent> events = table.StageForward(units, mode);
  EXPECT_EQ(NetPerUnit(events, n), forward) << what;
  const std::vector<ActivationEvent> more = table.StageInputGradient(units, mode);
  events.insert(events.end(), more.begin(), more.end());
  EXPECT_EQ(NetPerUnit(events, n), input_grad) << what;
}

pp::v1::JobSpec SpecOf(const ModelConfig& c, int B, common::Recompute mode, Precision precision) {
  pp::v1::JobSpec spec;
  pp::v1::ModelSpec* m = spec.mutable_model();
  m->set_vocab_size(c.vocab_size), m->set_seq_len(c.seq_len), m->set_d_model(c.d_model);
  m->set_n_heads(c.n_heads), m->set_n_layers(c.n_layers);
  spec.mutable_train()->set_microbatch_size(B);
  spec.mutable_train()->set_precision(common::PrecisionName(precision));
  spec.mutable_parallel()->set_recompute(common::RecomputeName(mode));
  return spec;
}

class ActivationTableTest : public ModelTest {
 protected:
  void UsePrecision(Precision precision) {
    auto ops = kernels::MakeOps("cpu", 1, precision);
    ASSERT_TRUE(ops.ok()) << ops.status();
    ops_ = std::move(*ops), precision_ = precision;
  }

  Held Measure(std::vector<std::unique_ptr<StageModel>>& stages, const Batch& b) {
    Held held;
    ForwardChain(stages, 0, b);
    for (auto& s : stages) {
      held.forward.push_back(s->live_activation_bytes_by_unit());
      EXPECT_EQ(Sum(held.forward.back()), s->live_activation_bytes());
    }
    BackwardChain(stages, 0, /*input_only=*/true);
    for (auto& s : stages) held.input_grad.push_back(s->live_activation_bytes_by_unit());
    for (auto& s : stages) EXPECT_TRUE(s->BackwardWeight(0).ok());
    for (auto& s : stages) held.weight.push_back(s->live_activation_bytes_by_unit());
    return held;
  }
};

TEST_F(ActivationTableTest, EveryUnitHoldsItsTableBytesInEveryModeAndPrecision) {
  const ModelConfig c = Tiny();  // 3 blocks: units 0..4
  const int B = 2;
  const Batch batch = MakeBatches(c, B, 1, 5)[0];
  // Whole; embedding | blocks | head alone; embedding + block | block | block + head.
  const std::vector<std::vector<int>> cuts = {{0}, {0, 1, 4}, {0, 2, 3}};
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
    UsePrecision(precision);
    const ActivationTable table = TableFor(c, B, 1, precision);
    for (common::Recompute mode :
         {common::Recompute::kNone, common::Recompute::kSelective, common::Recompute::kFull}) {
      recompute_ = mode;
      for (const std::vector<int>& firsts : cuts) {
        auto stages = Chain(c, firsts, B, 1);
        const Held held = Measure(stages, batch);
        std::vector<int> units;
        for (size_t i = 0; i < firsts.size(); ++i) {
          units.push_back((i + 1 < firsts.size() ? firsts[i + 1] : NumUnits(c)) - firsts[i]);
        }
        absl::StatusOr<std::vector<int64_t>> estimate =
            plan::HeldBytesPerMicrobatch(SpecOf(c, B, mode, precision), units);
        ASSERT_TRUE(estimate.ok()) << estimate.status();
        for (size_t i = 0; i < firsts.size(); ++i) {
          const std::string what =
              absl::StrCat(common::PrecisionName(precision), ", ", common::RecomputeName(mode),
                           ", stage from unit ", firsts[i], " of ", firsts.size());
          const StageUnits stage = UnitsOf(c, firsts[i], firsts[i] + units[i] - 1);
          ExpectStageMatches(table, stage, mode, held.forward[i], held.input_grad[i],
                             held.weight[i], what);
          EXPECT_EQ(Sum(held.forward[i]), (*estimate)[i]) << what;
        }
      }
    }
  }
}

// A tensor-parallel rank holds its share: qkv, attention, fc and their gradients at C/TP channels
// and NH/TP heads, the rest whole. Two ranks of one group run in threads (the block all-reduces).
TEST(ActivationTableTensorParallel, EachRankHoldsItsShare) {
  const ModelConfig c = Tiny();  // 2 heads
  const int B = 2, tp = 2;
  const Batch batch = MakeBatches(c, B, 1, 9)[0];
  const ActivationTable table = TableFor(c, B, tp, Precision::kFp32);
  const StageUnits whole = UnitsOf(c, 0, NumUnits(c) - 1);
  for (common::Recompute mode :
       {common::Recompute::kNone, common::Recompute::kSelective, common::Recompute::kFull}) {
    std::vector<std::unique_ptr<parallel::Collectives>> group = parallel::MakeInProcessGroup(tp);
    std::vector<Held> held(tp);
    std::vector<std::thread> ranks;
    for (int r = 0; r < tp; ++r) {
      ranks.emplace_back([&, r] {
        auto ops = kernels::MakeOps("cpu", 1);
        ASSERT_TRUE(ops.ok()) << ops.status();
        StageOptions o;
        o.first_unit = 0, o.last_unit = NumUnits(c) - 1, o.microbatch_size = B, o.seed = 7;
        o.tensor_parallel = group[r].get(), o.recompute = mode;
        auto stage = StageModel::Create(ops->get(), c, o);
        ASSERT_TRUE(stage.ok()) << stage.status();
        StageModel& s = **stage;
        StageInput in;
        in.tokens = batch.tokens.data(), in.targets = batch.targets.data();
        ASSERT_TRUE(s.Forward(0, in, nullptr).ok());
        held[r].forward.push_back(s.live_activation_bytes_by_unit());
        ASSERT_TRUE(s.BackwardInput(0, nullptr, nullptr).ok());
        held[r].input_grad.push_back(s.live_activation_bytes_by_unit());
        ASSERT_TRUE(s.BackwardWeight(0).ok());
        held[r].weight.push_back(s.live_activation_bytes_by_unit());
      });
    }
    for (std::thread& t : ranks) t.join();
    absl::StatusOr<std::vector<int64_t>> estimate = plan::HeldBytesPerMicrobatch(
        [&] {
          pp::v1::JobSpec spec = SpecOf(c, B, mode, Precision::kFp32);
          spec.mutable_parallel()->set_tensor(tp);
          return spec;
        }(),
        {NumUnits(c)});
    ASSERT_TRUE(estimate.ok()) << estimate.status();
    for (int r = 0; r < tp; ++r) {
      ASSERT_EQ(held[r].forward.size(), 1u) << r;
      const std::string what = absl::StrCat("TP rank ", r, ", ", common::RecomputeName(mode));
      ExpectStageMatches(table, whole, mode, held[r].forward[0], held[r].input_grad[0],
                         held[r].weight[0], what);
      EXPECT_EQ(Sum(held[r].forward[0]), (*estimate)[0]) << what;
    }
  }
}

}  // namespace
}  // namespace pp::model
