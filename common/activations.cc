// The activation table (activations.h): each tensor's shape, and the lists of what each unit
// saves, in the order worker/model/model.cc and layers.cc allocate them.
#include "common/activations.h"

#include <algorithm>
#include <initializer_list>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/spec_bounds.h"

namespace pp::common {
namespace {

using A = Activation;

// Each tensor's name and shape, in enum order, as factors of its element count.
struct Row {
  A id;
  const char* name;
  enum Shape { kN, kNC, kN3Cl, kNCl, kNNHl2, kN4Cl, kNV } shape;
};
constexpr Row kRows[kNumActivations] = {
    {A::kTokens, "tokens", Row::kN},
    {A::kTargets, "targets", Row::kN},
    {A::kInput, "resid", Row::kNC},
    {A::kLn1, "ln1", Row::kNC},
    {A::kMean1, "mean1", Row::kN},
    {A::kRstd1, "rstd1", Row::kN},
    {A::kQkv, "qkv", Row::kN3Cl},
    {A::kAtty, "atty", Row::kNCl},
    {A::kAttStats, "att_stats", Row::kNNHl2},
    {A::kRes2, "res2", Row::kNC},
    {A::kLn2, "ln2", Row::kNC},
    {A::kMean2, "mean2", Row::kN},
    {A::kRstd2, "rstd2", Row::kN},
    {A::kFch, "fch", Row::kN4Cl},
    {A::kFchGelu, "fch_gelu", Row::kN4Cl},
    {A::kLnf, "lnf", Row::kNC},
    {A::kMeanF, "mean", Row::kN},
    {A::kRstdF, "rstd", Row::kN},
    {A::kProbs, "probs", Row::kNV},
    {A::kDout, "dout", Row::kNC},
    {A::kDfch, "dfch", Row::kN4Cl},
    {A::kDln2, "dln2", Row::kNC},
    {A::kDres2, "dres2", Row::kNC},
    {A::kDqkv, "dqkv", Row::kN3Cl},
    {A::kDln1, "dln1", Row::kNC},
    {A::kDlogits, "dlogits", Row::kNV},
    {A::kDlnf, "dlnf", Row::kNC},
    {A::kDiscard, "discard", Row::kNC},
};

constexpr bool RowsInEnumOrder() {
  for (int i = 0; i < kNumActivations; ++i) {
    if (static_cast<int>(kRows[i].id) != i) return false;
  }
  return true;
}
static_assert(RowsInEnumOrder(), "kRows: one row per Activation, in enum order");

// A block's forward (layers.cc BlockForward), in allocation order.
constexpr A kBlockForward[] = {A::kLn1,  A::kMean1, A::kRstd1, A::kQkv,   A::kAtty, A::kAttStats,
                               A::kRes2, A::kLn2,   A::kMean2, A::kRstd2, A::kFch,  A::kFchGelu};
constexpr A kHeadForward[] = {A::kLnf, A::kMeanF, A::kRstdF, A::kProbs};
// Input-gradients: allocated in this order, then the forward tensors W does not read are freed.
constexpr A kBlockInputGrad[] = {A::kDfch, A::kDln2, A::kDres2, A::kDqkv, A::kDln1};
constexpr A kBlockInputGradFrees[] = {A::kQkv, A::kAttStats, A::kFch};
constexpr A kHeadInputGrad[] = {A::kDlogits, A::kDlnf};
constexpr A kHeadInputGradFrees[] = {A::kProbs};

// The unit's inputs, saved by it (activations.h).
std::vector<A> Inputs(UnitKind kind) {
  switch (kind) {
    case UnitKind::kEmbedding:
      return {A::kTokens};
    case UnitKind::kBlock:
      return {A::kInput};
    case UnitKind::kHead:
      return {A::kInput, A::kTargets};
  }
  return {};
}

template <size_t n>
std::vector<A> List(const A (&ids)[n]) {
  return std::vector<A>(ids, ids + n);
}

std::vector<A> ForwardTensors(UnitKind kind) {
  if (kind == UnitKind::kBlock) return List(kBlockForward);
  if (kind == UnitKind::kHead) return List(kHeadForward);
  return {};
}

bool Contains(const std::vector<A>& ids, A id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

void Append(std::vector<ActivationEvent>& out, const std::vector<ActivationEvent>& more) {
  out.insert(out.end(), more.begin(), more.end());
}

// The units' forward from the stage's inputs: each unit's output, which the next unit saves as its
// input, just before the unit runs, then what the unit saves itself.
std::vector<ActivationEvent> Compute(const ActivationTable& t, const StageUnits& s,
                                     Recompute mode) {
  std::vector<ActivationEvent> out;
  const int n = s.units();
  for (int u = 0; u < n; ++u) {
    if (u + 1 < n) out.push_back({u + 1, +1, t[A::kInput]});
    Append(out, t.ForwardEvents(s.kind(u), mode, u));
  }
  return out;
}

// Full recomputation after the forward: frees of everything `events` left live but the stage's
// inputs (tokens, targets, the first unit's input copy).
std::vector<ActivationEvent> DropToInputs(const std::vector<ActivationEvent>& events) {
  std::vector<ActivationEvent> live;
  for (const ActivationEvent& e : events) {
    if (e.sign > 0) {
      live.push_back(e);
      continue;
    }
    auto same = [&](const ActivationEvent& l) {
      return l.unit == e.unit && l.tensor.id == e.tensor.id;
    };
    live.erase(std::find_if(live.begin(), live.end(), same));
  }
  std::vector<ActivationEvent> out;
  for (const ActivationEvent& e : live) {
    const A id = e.tensor.id;
    const bool input = id == A::kTokens || id == A::kTargets || (id == A::kInput && e.unit == 0);
    if (!input) out.push_back({e.unit, -1, e.tensor});
  }
  return out;
}

}  // namespace

UnitKind StageUnits::kind(int unit) const {
  if (embedding && unit == 0) return UnitKind::kEmbedding;
  if (head && unit == units() - 1) return UnitKind::kHead;
  return UnitKind::kBlock;
}

absl::StatusOr<ActivationTable> ActivationTable::Make(const ActivationDims& d) {
  for (int64_t dim : {d.B, d.T, d.C, d.n_heads, d.vocab}) {
    if (dim < 0) return absl::InvalidArgumentError(absl::StrCat("activation table: size ", dim));
  }
  if (d.tp < 1) return absl::InvalidArgumentError(absl::StrCat("activation table: tp ", d.tp));
  // Activations are fp32 under every precision (precision.h), tokens int32: 4 bytes both.
  constexpr int64_t kElementBytes = 4;
  const int64_t Cl = d.C / d.tp, NHl = d.n_heads / d.tp;
  const std::optional<int64_t> N = CheckedProduct({d.B, d.T});
  if (!N) return absl::InvalidArgumentError("activation table: B x T does not fit int64");
  ActivationTable table;
  int64_t total = 0;
  for (const Row& row : kRows) {
    std::optional<int64_t> elements;
    switch (row.shape) {
      case Row::kN:
        elements = *N;
        break;
      case Row::kNC:
        elements = CheckedProduct({*N, d.C});
        break;
      case Row::kN3Cl:
        elements = CheckedProduct({*N, 3, Cl});
        break;
      case Row::kNCl:
        elements = CheckedProduct({*N, Cl});
        break;
      case Row::kNNHl2:
        elements = CheckedProduct({*N, NHl, 2});
        break;
      case Row::kN4Cl:
        elements = CheckedProduct({*N, 4, Cl});
        break;
      case Row::kNV:
        elements = CheckedProduct({*N, d.vocab});
        break;
    }
    const std::optional<int64_t> bytes =
        elements ? CheckedProduct({*elements, kElementBytes}) : std::nullopt;
    if (!bytes || __builtin_add_overflow(total, *bytes, &total)) {
      return absl::InvalidArgumentError(
          absl::StrCat("activation table: the bytes of ", row.name, " do not fit int64"));
    }
    table.tensors_[static_cast<int>(row.id)] = {row.id, row.name, *elements, kElementBytes, *bytes};
  }
  return table;
}

std::vector<SavedTensor> ActivationTable::SavedByForward(UnitKind kind, Recompute mode,
                                                         bool stage_first) const {
  std::vector<SavedTensor> out;
  for (A id : Inputs(kind)) {
    // Full keeps the stage's inputs only: tokens, targets, the first unit's input copy.
    if (mode == Recompute::kFull && id == A::kInput && !stage_first) continue;
    out.push_back((*this)[id]);
  }
  if (mode == Recompute::kFull) return out;
  for (A id : ForwardTensors(kind)) {
    if (mode == Recompute::kSelective && id == A::kAttStats) continue;
    out.push_back((*this)[id]);
  }
  return out;
}

std::vector<SavedTensor> ActivationTable::HeldAfterInputGradient(UnitKind kind) const {
  std::vector<A> ids = Inputs(kind);
  for (A id : ForwardTensors(kind)) {
    if (!Contains(List(kBlockInputGradFrees), id) && !Contains(List(kHeadInputGradFrees), id)) {
      ids.push_back(id);
    }
  }
  if (kind != UnitKind::kHead) ids.push_back(A::kDout);
  if (kind == UnitKind::kBlock)
    ids.insert(ids.end(), std::begin(kBlockInputGrad), std::end(kBlockInputGrad));
  if (kind == UnitKind::kHead)
    ids.insert(ids.end(), std::begin(kHeadInputGrad), std::end(kHeadInputGrad));
  std::vector<SavedTensor> out;
  for (A id : ids) out.push_back((*this)[id]);
  return out;
}

std::vector<ActivationEvent> ActivationTable::ForwardEvents(UnitKind kind, Recompute mode,
                                                            int unit) const {
  std::vector<ActivationEvent> out;
  for (A id : ForwardTensors(kind)) {
    out.push_back({unit, +1, (*this)[id]});
    // Selective: the attention stats die as soon as the attention has used them.
    if (mode == Recompute::kSelective && id == A::kAttStats) out.push_back({unit, -1, (*this)[id]});
  }
  return out;
}

std::vector<ActivationEvent> ActivationTable::InputGradientEvents(UnitKind kind, Recompute mode,
                                                                  int unit) const {
  std::vector<ActivationEvent> out;
  if (kind == UnitKind::kBlock) {
    if (mode == Recompute::kSelective) out.push_back({unit, +1, (*this)[A::kAttStats]});
    for (A id : kBlockInputGrad) out.push_back({unit, +1, (*this)[id]});
    for (A id : kBlockInputGradFrees) out.push_back({unit, -1, (*this)[id]});
  } else if (kind == UnitKind::kHead) {
    for (A id : kHeadInputGrad) out.push_back({unit, +1, (*this)[id]});
    for (A id : kHeadInputGradFrees) out.push_back({unit, -1, (*this)[id]});
  }
  return out;
}

std::vector<ActivationEvent> ActivationTable::StageForward(const StageUnits& s,
                                                           Recompute mode) const {
  const int n = s.units();
  // The inputs first (model.cc LoadInputs): tokens or the copy of the received activation, then
  // the targets.
  std::vector<ActivationEvent> out = {{0, +1, (*this)[s.embedding ? A::kTokens : A::kInput]}};
  if (s.head) out.push_back({n - 1, +1, (*this)[A::kTargets]});
  Append(out, Compute(*this, s, mode));
  if (mode == Recompute::kFull) Append(out, DropToInputs(out));
  return out;
}

std::vector<ActivationEvent> ActivationTable::StageInputGradient(const StageUnits& s,
                                                                 Recompute mode) const {
  std::vector<ActivationEvent> out;
  const int n = s.units();
  // Full: the forward again from the kept inputs (an embedding alone needs nothing but them).
  if (mode == Recompute::kFull && (s.blocks > 0 || s.head)) {
    if (!s.head) out.push_back({n - 1, +1, (*this)[A::kDiscard]});
    Append(out, Compute(*this, s, Recompute::kNone));
    if (!s.head) out.push_back({n - 1, -1, (*this)[A::kDiscard]});
  }
  if (!s.head) out.push_back({n - 1, +1, (*this)[A::kDout]});  // the received gradient, copied
  for (int u = n; u-- > 0 && s.kind(u) != UnitKind::kEmbedding;) {
    // The gradient of u's input: the previous unit's kDout, or the caller's grad_in.
    if (u > 0) out.push_back({u - 1, +1, (*this)[A::kDout]});
    Append(out, InputGradientEvents(s.kind(u), mode, u));
  }
  return out;
}

int64_t TotalBytes(const std::vector<SavedTensor>& tensors) {
  int64_t sum = 0;
  for (const SavedTensor& t : tensors) sum += t.bytes;
  return sum;
}

}  // namespace pp::common
