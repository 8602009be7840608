// The memory model (memory.h): parameters counted per unit, and the saved activations (the
// activation table's event lists, common/activations.h) and boundary buffers replayed through
// each rank's program in the order the worker allocates them.
#include "coordinator/plan/memory.h"

#include <algorithm>
#include <initializer_list>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/activations.h"
#include "common/packing.h"
#include "common/precision.h"
#include "common/recompute.h"
#include "common/spec_bounds.h"
#include "program/proto.h"

namespace pp::plan {
namespace {

using common::Recompute;

constexpr int64_t kWord = 4;  // bytes of a float and of an int32 token
// parallel.bucket_bytes = 0 means this (worker/compute/model_compute.cc).
constexpr int64_t kDefaultBucketBytes = int64_t{4} << 20;

// Int64 arithmetic that remembers an overflow instead of wrapping: the figures multiply spec
// fields, and one overflow makes the whole estimate an error.
class Checked {
 public:
  int64_t Mul(std::initializer_list<int64_t> factors) {
    const std::optional<int64_t> product = common::CheckedProduct(factors);
    if (!product) overflow_ = true;
    return product.value_or(0);
  }
  int64_t Add(int64_t a, int64_t b) {
    int64_t sum = 0;
    if (__builtin_add_overflow(a, b, &sum)) overflow_ = true;
    return sum;
  }
  void Fail() { overflow_ = true; }
  bool overflow() const { return overflow_; }

 private:
  bool overflow_ = false;
};

// The shapes one stage works with (memory.h's letters).
struct Shapes {
  int64_t B, T, C, Cl, Vo, N;
};

// One compute call's effect on the live bytes: the highest point above where it started, and
// where it ends.
struct Swing {
  int64_t rise = 0;
  int64_t net = 0;
  void Step(Checked& c, int64_t delta) {
    net = c.Add(net, delta);
    rise = std::max(rise, net);
  }
};

struct StageMemory {
  int64_t params = 0;            // held parameters (elements)
  int64_t written_params = 0;    // of them, what a TP rank > 0 writes to a checkpoint
  int64_t largest_tensor = 0;    // elements
  int64_t scratch = 0;           // bytes
  Swing forward, input_grad;     // bytes, per microbatch
  int64_t boundary = 0;          // bytes of one (N,C) boundary tensor
  int64_t operands[2] = {0, 0};  // bytes: the backend's operand buffers its products need
  int64_t weight_copies = 0;     // bytes: bf16's converted weights (CountOperands)
};

// Parameters of one unit for TP rank shares (memory.h).
void CountParams(Checked& c, const Shapes& s, int unit, int n_layers, bool tied, StageMemory& m) {
  auto add = [&](int64_t elements, bool sliced) {
    m.params = c.Add(m.params, elements);
    if (sliced) m.written_params = c.Add(m.written_params, elements);
    m.largest_tensor = std::max(m.largest_tensor, elements);
  };
  if (unit == 0) {
    add(c.Mul({s.Vo, s.C}), false), add(c.Mul({s.T, s.C}), false);
  } else if (unit == n_layers + 1) {
    add(s.C, false), add(s.C, false);
    if (!tied) add(c.Mul({s.Vo, s.C}), false);
  } else {
    for (int64_t ln = 0; ln < 4; ++ln) add(s.C, false);             // ln_1, ln_2 weight and bias
    add(c.Mul({3, s.Cl, s.C}), true), add(c.Mul({3, s.Cl}), true);  // attn.qkv
    add(c.Mul({s.C, s.Cl}), true), add(s.C, false);                 // attn.proj
    add(c.Mul({4, s.Cl, s.C}), true), add(c.Mul({4, s.Cl}), true);  // mlp.fc
    add(c.Mul({s.C, 4, s.Cl}), true), add(s.C, false);              // mlp.proj
  }
}

// A stage's forward or input-gradient events (common/activations.h) as a swing.
Swing Fold(Checked& c, const std::vector<common::ActivationEvent>& events) {
  Swing swing;
  for (const common::ActivationEvent& e : events) swing.Step(c, e.delta());
  return swing;
}

// The saved activations of one microbatch, from the activation table (the worker's own, so the
// two cannot disagree), and the stage's scratch and boundary tensor.
void CountActivations(Checked& c, const Shapes& s, const common::ActivationTable& table,
                      const common::StageUnits& units, Recompute mode, StageMemory& m) {
  m.forward = Fold(c, table.StageForward(units, mode));
  m.input_grad = Fold(c, table.StageInputGradient(units, mode));
  const int64_t NC = c.Mul({s.N, s.C, kWord});
  m.scratch = c.Add(NC, c.Mul({s.N, 4, s.Cl, kWord}));  // tmp_c, tmp_4c
  if (units.head) {                                       // logits, losses
    m.scratch = c.Add(m.scratch, c.Add(c.Mul({s.N, s.Vo, kWord}), c.Mul({s.N, kWord})));
  }
  m.boundary = NC;
}

// The CPU backend's operand buffers for this stage's products (kernels/cpu/cpu_products.cc Prepare
// and Weight): slot 0 holds the (N,IC) input or the (N,OC) gradient, slot 1 a B operand: in fp32
// the (OC,IC) weight or the (N,IC) input, copied only where its rows would be a multiple of 4 KiB
// apart (such rows get 16 floats more, kernels/cpu/cpu_products.cc PaddedLd, on oneDNN, whose presence
// only the worker knows: counted always); in bf16 every operand is converted, as fp32-sized
// values on the fallback (the fast path's bf16 needs half), and slot 1 holds only the (N,IC)
// input, since each weight keeps its own converted copy (kernels/cpu/weight_copies.h) for the
// backend's life: (OC,IC), and (OC,IC+16) more where padded. On AMX tiles a weight has two bf16
// packings, (OC,IC) each (kernels/cpu/cpu_products.cc): within the fp32-sized (OC,IC) counted. The products are a block's qkv (C ->
// 3Cl), proj (Cl -> C), fc (C -> 4Cl), mlp.proj (4Cl -> C) and the head's (C -> Vo).
void CountOperands(Checked& c, const Shapes& s, int64_t blocks, bool head, bool bf16,
                   StageMemory& m) {
  int64_t& slot0 = m.operands[0];
  int64_t& slot1 = m.operands[1];
  auto product = [&](int64_t ic, int64_t oc, int64_t count) {
    const bool padded = ic * kWord % 4096 == 0;
    const int64_t ld = padded ? ic + 16 : ic;
    if (bf16) {
      slot0 = std::max(slot0, c.Mul({s.N, std::max(ic, oc), kWord}));
      slot1 = std::max(slot1, c.Mul({s.N, ld, kWord}));
      const int64_t copies = c.Mul({oc, padded ? ic + ld : ic, kWord});
      m.weight_copies = c.Add(m.weight_copies, c.Mul({count, copies}));
    } else if (padded) {
      slot1 = std::max(slot1, c.Mul({std::max(s.N, oc), ld, kWord}));
    }
  };
  if (blocks > 0) {
    product(s.C, 3 * s.Cl, blocks), product(s.Cl, s.C, blocks);
    product(s.C, 4 * s.Cl, blocks), product(4 * s.Cl, s.C, blocks);
  }
  if (head) product(s.C, s.Vo, 1);
}

// Live bytes while replaying one rank's program: the model's saved state and the executor's
// boundary buffers, and both at the highest point of their sum.
struct Replay {
  int64_t saved = 0, buffers = 0;
  int64_t peak_saved = 0, peak_buffers = 0;
  void Note(Checked& c, int64_t rise_saved, int64_t rise_buffers) {
    const int64_t high = c.Add(c.Add(saved, rise_saved), c.Add(buffers, rise_buffers));
    if (high > c.Add(peak_saved, peak_buffers)) {
      peak_saved = c.Add(saved, rise_saved), peak_buffers = c.Add(buffers, rise_buffers);
    }
  }
};

// The step of `program` (worker/executor/executor.cc): every receive is allocated at the step's
// start; a forward allocates its output before it runs and frees its input after; an
// input-gradient (B or I) allocates grad_in before and frees grad_out after; sent tensors stay
// until the step ends.
absl::Status ReplayProgram(Checked& c, const pp::v1::RankProgram& program,
                           const std::vector<StageMemory>& stages, Replay& r) {
  const int S = static_cast<int>(stages.size());
  const int64_t boundary = stages.front().boundary;
  using prog::Kind;
  for (const pp::v1::Action& proto : program.actions()) {
    const std::optional<prog::Action> a = prog::ActionFromProto(proto);
    if (a && (a->kind == Kind::kRecvActivation || a->kind == Kind::kRecvGrad)) {
      r.buffers = c.Add(r.buffers, boundary);
    }
  }
  r.Note(c, 0, 0);
  for (const pp::v1::Action& proto : program.actions()) {
    const int s = proto.stage();
    if (s < 0 || s >= S) return absl::InvalidArgumentError(absl::StrCat("stage ", s, " of ", S));
    const std::optional<prog::Action> a = prog::ActionFromProto(proto);
    if (!a) continue;  // a kind this build does not know holds nothing
    const StageMemory& m = stages[s];
    const int64_t out = s + 1 < S ? boundary : 0, in = s > 0 ? boundary : 0;
    switch (a->kind) {
      case Kind::kForward:
        r.Note(c, m.forward.rise, out);
        r.saved = c.Add(r.saved, m.forward.net);
        r.buffers = c.Add(r.buffers, out - in);
        break;
      case Kind::kBackward:
      case Kind::kBackwardInput:
        r.Note(c, m.input_grad.rise, in);
        r.saved =
            c.Add(r.saved, a->kind == Kind::kBackward ? -m.forward.net : m.input_grad.net);
        r.buffers = c.Add(r.buffers, in - out);
        break;
      case Kind::kBackwardWeight:
        r.saved = c.Add(r.saved, -c.Add(m.forward.net, m.input_grad.net));
        break;
      default:  // sends keep their buffer to the step's end; receives were allocated above
        break;
    }
  }
  return absl::OkStatus();
}

// Every stage's figures for TP rank shares of tensor degree `tp` (all TP ranks hold equal shares).
std::vector<StageMemory> StageFigures(Checked& c, const pp::v1::JobSpec& spec,
                                      const std::vector<int>& stage_units, int64_t tp,
                                      Recompute mode) {
  const pp::v1::ModelSpec& model = spec.model();
  Shapes s;
  s.B = spec.train().microbatch_size(), s.T = model.seq_len(), s.C = model.d_model();
  s.Cl = s.C / tp, s.Vo = model.vocab_size();
  s.N = c.Mul({s.B, s.T});
  const bool bf16 = spec.train().precision() == "bf16";
  common::ActivationDims dims;
  dims.B = s.B, dims.T = s.T, dims.C = s.C, dims.n_heads = model.n_heads(), dims.vocab = s.Vo;
  if (common::PacksMicrobatches(spec)) {  // the fullest row a packed step may hold
    s.N = common::MaxMicrobatchTokens(spec);
    dims.B = 1, dims.T = s.N;
  }
  dims.tp = tp;
  dims.precision = bf16 ? common::Precision::kBf16 : common::Precision::kFp32;
  absl::StatusOr<common::ActivationTable> table = common::ActivationTable::Make(dims);
  if (!table.ok()) c.Fail();  // only a byte count that does not fit int64, for a valid spec
  std::vector<StageMemory> stages;
  int first = 0;
  for (int units : stage_units) {
    const int last = first + units - 1;
    StageMemory& m = stages.emplace_back();
    for (int u = first; u <= last; ++u) {
      CountParams(c, s, u, model.n_layers(), model.tie_embeddings(), m);
    }
    common::StageUnits held;
    held.embedding = first == 0, held.head = last == model.n_layers() + 1;
    const int blocks = std::min(last, model.n_layers()) - std::max(first, 1) + 1;
    held.blocks = std::max(blocks, 0);
    CountActivations(c, s, table.ok() ? *table : common::ActivationTable(), held, mode, m);
    CountOperands(c, s, held.blocks, held.head, bf16, m);
    first = last + 1;
  }
  return stages;
}

// Whether a checkpoint is written while later steps still run (common::CheckpointDue): its
// copies then live beside the activations.
bool CheckpointsMidRun(const pp::v1::JobSpec& spec) {
  // checkpoint.autoEverySteps: ppcoord may choose any interval in [1, steps] at a placement.
  if (spec.checkpoint().auto_every_steps()) return spec.train().steps() > 1;
  const int every = spec.checkpoint().every_steps();
  return every > 0 && every < spec.train().steps();
}

absl::StatusOr<MemoryBreakdown> RankFigures(Checked& c, const pp::v1::JobSpec& spec,
                                            const std::vector<StageMemory>& stages,
                                            const pp::v1::Schedule& schedule, int pp, int dp,
                                            int tp) {
  const pp::v1::RankProgram* program = nullptr;
  for (const pp::v1::RankProgram& p : schedule.ranks()) {
    if (p.rank() == pp) program = &p;
  }
  if (program == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("the schedule has no program for rank ", pp));
  }
  int64_t params = 0, written = 0, largest = 0, scratch = 0, operands[2] = {0, 0};
  for (int s = 0; s < schedule.stage_to_rank_size(); ++s) {
    if (schedule.stage_to_rank(s) != pp) continue;
    const StageMemory& m = stages[s];
    params = c.Add(params, m.params);
    written = c.Add(written, tp == 0 ? m.params : m.written_params);
    largest = std::max(largest, m.largest_tensor);
    scratch = c.Add(scratch, c.Add(m.scratch, m.weight_copies));
    for (int slot : {0, 1}) {  // one backend per process: each buffer at its largest stage's size
      operands[slot] = std::max(operands[slot], m.operands[slot]);
    }
  }
  Replay replay;
  if (absl::Status s = ReplayProgram(c, *program, stages, replay); !s.ok()) return s;
  MemoryBreakdown b;
  b.parameters = c.Mul({params, kWord});
  b.gradients = b.parameters;
  b.optimizer = c.Mul({2, b.parameters});
  b.activations = replay.peak_saved;
  b.scratch = c.Add(scratch, c.Add(operands[0], operands[1]));
  int64_t buckets = 0;
  const int64_t shard = dp == 0 ? c.Mul({2, 3, kWord, written}) : 0;  // host copies, serialized
  int64_t digest = 0;
  if (spec.parallel().data() > 1) {
    // The bucket's flat buffer and the all-reduce's own copy of it. The replicas' final state
    // digest copies values and moments to host tensors and appends them to one string that grows
    // by doubling: at its last growth the tensors, the old string and the new one are live.
    const int64_t bucket_bytes = spec.parallel().bucket_bytes() > 0 ? spec.parallel().bucket_bytes()
                                                                    : kDefaultBucketBytes;
    buckets = c.Mul({2, std::min(b.gradients, std::max(bucket_bytes, c.Mul({largest, kWord})))});
    digest = c.Mul({3, 3, b.parameters});
  }
  b.communication = c.Add(replay.peak_buffers, buckets);
  b.checkpoint = std::max(shard, digest);
  b.baseline = kProcessBaselineBytes;
  const int64_t step = c.Add(replay.peak_saved, replay.peak_buffers);
  const int64_t peak = CheckpointsMidRun(spec) ? c.Add(step, shard) : std::max(step, b.checkpoint);
  for (int64_t part : {b.baseline, b.parameters, b.gradients, b.optimizer, b.scratch, buckets, peak}) {
    b.total = c.Add(b.total, part);
  }
  return b;
}

}  // namespace

absl::StatusOr<std::vector<RankMemory>> EstimateMemory(const pp::v1::JobSpec& spec,
                                                       const std::vector<int>& stage_units,
                                                       const pp::v1::Schedule& schedule) {
  const pp::v1::ParallelSpec& p = spec.parallel();
  const int pipeline = p.pipeline(), tensor = std::max(1, p.tensor()), data = std::max(1, p.data());
  if (static_cast<int>(stage_units.size()) != schedule.stage_to_rank_size() ||
      stage_units.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("memory estimate: ", stage_units.size(),
                                                   " partitioned stages for a schedule of ",
                                                   schedule.stage_to_rank_size()));
  }
  absl::StatusOr<Recompute> mode = common::RecomputeFromName(p.recompute());
  if (!mode.ok()) return mode.status();
  Checked c;
  const std::vector<StageMemory> stages = StageFigures(c, spec, stage_units, tensor, *mode);
  std::vector<RankMemory> ranks;
  for (int dp = 0; dp < data; ++dp) {
    for (int pp = 0; pp < pipeline; ++pp) {
      for (int tp = 0; tp < tensor; ++tp) {
        RankMemory& r = ranks.emplace_back();
        r.rank = static_cast<int>(ranks.size()) - 1;  // (dp * pipeline + pp) * tensor + tp
        r.pp = pp, r.dp = dp, r.tp = tp;
        absl::StatusOr<MemoryBreakdown> bytes = RankFigures(c, spec, stages, schedule, pp, dp, tp);
        if (!bytes.ok()) return bytes.status();
        r.bytes = *bytes;
      }
    }
  }
  if (c.overflow()) {
    return absl::InvalidArgumentError("memory estimate: a byte count does not fit int64");
  }
  return ranks;
}

absl::StatusOr<std::vector<int64_t>> HeldBytesPerMicrobatch(const pp::v1::JobSpec& spec,
                                                            const std::vector<int>& stage_units) {
  absl::StatusOr<Recompute> mode = common::RecomputeFromName(spec.parallel().recompute());
  if (!mode.ok()) return mode.status();
  Checked c;
  std::vector<int64_t> held;
  for (const StageMemory& m :
       StageFigures(c, spec, stage_units, std::max(1, spec.parallel().tensor()), *mode)) {
    held.push_back(m.forward.net);
  }
  if (c.overflow()) {
    return absl::InvalidArgumentError("memory estimate: a byte count does not fit int64");
  }
  return held;
}

pp::v1::RankMemory MemoryToProto(const RankMemory& memory) {
  pp::v1::RankMemory out;
  out.set_rank(memory.rank);
  out.set_pp(memory.pp);
  out.set_dp(memory.dp);
  out.set_tp(memory.tp);
  const MemoryBreakdown& b = memory.bytes;
  out.set_parameters(b.parameters);
  out.set_gradients(b.gradients);
  out.set_optimizer(b.optimizer);
  out.set_activations(b.activations);
  out.set_communication(b.communication);
  out.set_scratch(b.scratch);
  out.set_checkpoint(b.checkpoint);
  out.set_baseline(b.baseline);
  out.set_total(b.total);
  return out;
}

std::string FormatBytes(int64_t bytes) {
  const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  double value = static_cast<double>(bytes) / 1024;
  int unit = 0;
  while (value >= 1024 && unit + 1 < 6) value /= 1024, ++unit;
  if (value < 10) return absl::StrFormat("%.2f %s", value, units[unit]);
  if (value < 100) return absl::StrFormat("%.1f %s", value, units[unit]);
  return absl::StrFormat("%.0f %s", value, units[unit]);
}

std::string RenderMemoryTable(const std::vector<RankMemory>& ranks) {
  std::string out = absl::StrFormat("%4s %3s %3s %3s %10s %10s %10s %11s %10s %10s %10s %10s %10s\n",
                                    "rank", "dp", "pp", "tp", "params", "grads", "adamw",
                                    "activations", "comm", "scratch", "checkpoint", "baseline",
                                    "peak");
  for (const RankMemory& r : ranks) {
    const MemoryBreakdown& b = r.bytes;
    absl::StrAppend(
        &out, absl::StrFormat("%4d %3d %3d %3d %10s %10s %10s %11s %10s %10s %10s %10s %10s\n",
                              r.rank, r.dp, r.pp, r.tp, FormatBytes(b.parameters),
                              FormatBytes(b.gradients), FormatBytes(b.optimizer),
                              FormatBytes(b.activations), FormatBytes(b.communication),
                              FormatBytes(b.scratch), FormatBytes(b.checkpoint),
                              FormatBytes(b.baseline), FormatBytes(b.total)));
  }
  return out;
}

}  // namespace pp::plan
