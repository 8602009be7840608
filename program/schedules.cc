#include "program/schedules.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "program/dualpipe_v.h"
#include "program/generators.h"
#include "program/list_schedule.h"

namespace pp::prog {
namespace {

// Megatron-LM's constraints on interleaved-1f1b: its microbatch group size (D) must lie in [D, M],
// and a short last group makes its order cyclic.
absl::Status InterleavedConstraints(int D, int V, int M) {
  if (M < D) {
    return absl::InvalidArgumentError(absl::StrCat(
        "interleaved-1f1b needs M >= D: Megatron-LM requires its microbatch group size (D=", D,
        ") to lie in [D, M], got M=", M));
  }
  // A last group of r = M mod D microbatches with 1 <= r <= D-3 (2 <= r when V = 2) makes
  // Megatron's order cyclic: rank 0's warm-up runs a forward of the last group whose input
  // rank D-1 produces only after a backward that waits for rank 0's first backward. The
  // planner's validator finds that deadlock; this closed form matches it for every D <= 16,
  // V <= 6.
  const int r = M % D;
  if (r >= (V == 2 ? 2 : 1) && r <= D - 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "interleaved-1f1b with D=", D, " V=", V, " M=", M,
        ": Megatron-LM's order deadlocks when its last microbatch group is that "
        "short (M mod D = ",
        r, "); use M with M mod D in {0, ", V == 2 ? "1, " : "", D - 2, ", ", D - 1, "}"));
  }
  return absl::OkStatus();
}

// DualPipe's phases (coordinator/plan/dualpipe_v.h) run the steady state M - 2D + r + 1 times on
// rank r: rank 0 needs M >= 2D, as DeepSeek's dualpipev.py asserts.
absl::Status DualPipeVConstraints(int D, int, int M) {
  if (M >= 2 * D) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("dualpipe-v needs M >= 2D microbatches (DeepSeek's DualPipeV: D=", D,
                   " needs M >= ", 2 * D, "), got M=", M));
}

// D, M >= 1 and a bound on what one request may allocate (the bench's D=64, V=4, M=1024 is 2^18).
absl::Status CheckSize(int D, int V, int M) {
  if (D < 1) return absl::InvalidArgumentError(absl::StrCat("pipeline depth D=", D, " < 1"));
  if (M < 1) return absl::InvalidArgumentError(absl::StrCat("microbatches M=", M, " < 1"));
  constexpr double kMaxStageMicrobatches = 1 << 22;
  if (static_cast<double>(D) * V * M > kMaxStageMicrobatches) {
    return absl::InvalidArgumentError(absl::StrCat("D*V*M = ", static_cast<double>(D) * V * M,
                                                   " stage-microbatches is more than the ",
                                                   kMaxStageMicrobatches, " the planner handles"));
  }
  return absl::OkStatus();
}

using Result = absl::StatusOr<Schedule>;

// "V=1", "V=2", "V>=2", "any V".
std::string VRule(const ScheduleKind& kind) {
  if (kind.min_chunks == kind.max_chunks) return absl::StrCat("V=", kind.min_chunks);
  if (kind.max_chunks == 0) {
    return kind.min_chunks <= 1 ? "any V" : absl::StrCat("V>=", kind.min_chunks);
  }
  return absl::StrCat(kind.min_chunks, "<=V<=", kind.max_chunks);
}

}  // namespace

const std::vector<ScheduleKind>& Schedules() {
  // Rows: name, doc, generator, splits_backward, min/max/default V, hint, M rule, its check,
  // trains. The docs name each schedule's source; docs/planner.md#the-schedules says more.
  static const auto* table = new std::vector<ScheduleKind>{
      {"gpipe", "all forwards, then all backwards (Huang et al. 2019)",
       [](int D, int, int M) -> Result { return internal::GPipe(D, M); }, false, 1, 1, 1, ""},
      {"1f1b",
       "warm-up forwards, then one forward / one backward (PipeDream-Flush, Megatron-LM's "
       "non-interleaved schedule)",
       [](int D, int, int M) -> Result { return internal::OneFOneB(D, M); }, false, 1, 1, 1, ""},
      {"interleaved-1f1b",
       "V looped chunks per rank in Megatron-LM's depth-first order with its microbatch groups",
       [](int D, int V, int M) -> Result { return internal::Interleaved(D, V, M); }, false, 2, 0, 2,
       "; with one chunk use 1f1b", "M >= D, last group not too short", InterleavedConstraints},
      {"zb-h1", "1F1B with the backward split into I and W, W filling the bubbles (Qi et al. 2023)",
       [](int D, int, int M) -> Result { return internal::ZbH1(D, M); }, true, 1, 1, 1, ""},
      {"zb-h2", "split backward, up to 2D-1 live activations: no warm-up bubble (Qi et al. 2023)",
       [](int D, int, int M) { return internal::ZbH2(D, M); }, true, 1, 1, 1, ""},
      {"zb-v",
       "two chunks in a V (rank r holds stages r and 2D-1-r), split backward (Qi et al. 2024)",
       [](int D, int, int M) { return internal::ZbV(D, M); }, true, 2, 2, 2, ""},
      {"v-half", "zb-v's V at half of 1F1B's activation memory (Qi et al. 2024)",
       [](int D, int, int M) { return internal::VHalf(D, M); }, true, 2, 2, 2, ""},
      {"v-min", "zb-v's V at a third of 1F1B's activation memory (Qi et al. 2024)",
       [](int D, int, int M) { return internal::VMin(D, M); }, true, 2, 2, 2, ""},
      {"dualpipe-v",
       "DeepSeek's DualPipe cut in half: a V with overlapped F&B run as F then B (DeepSeek-V3)",
       [](int D, int, int M) -> Result { return internal::DualPipeV(D, M); }, true, 2, 2, 2, "",
       "M >= 2D", DualPipeVConstraints},
      {kForwardOnly,
       "forwards only, stage by stage: evaluation, on the layout of the job's training schedule",
       [](int D, int V, int M) -> Result { return ForwardOnly(LoopedStageToRank(D, V), D, V, M); },
       false, 1, 0, 1, "", "any", nullptr, /*trains=*/false},
  };
  return *table;
}

const ScheduleKind* FindSchedule(absl::string_view name) {
  for (const ScheduleKind& kind : Schedules()) {
    if (kind.name == name) return &kind;
  }
  return nullptr;
}

const std::vector<std::string>& ScheduleNames() {
  static const auto* names = [] {
    auto* list = new std::vector<std::string>;
    for (const ScheduleKind& kind : Schedules()) list->push_back(kind.name);
    return list;
  }();
  return *names;
}

const std::vector<std::string>& TrainingScheduleNames() {
  static const auto* names = [] {
    auto* list = new std::vector<std::string>;
    for (const ScheduleKind& kind : Schedules()) {
      if (kind.trains) list->push_back(kind.name);
    }
    return list;
  }();
  return *names;
}

absl::Status CheckChunkRule(const ScheduleKind& rule, int V) {
  if (rule.min_chunks == rule.max_chunks && V != rule.min_chunks) {
    return absl::InvalidArgumentError(absl::StrCat(rule.name, " runs exactly ", rule.min_chunks,
                                                   " chunk(s) per rank, got V=", V));
  }
  if (V < rule.min_chunks) {
    return absl::InvalidArgumentError(absl::StrCat(rule.name, " needs V >= ", rule.min_chunks,
                                                   " chunks per rank (got V=", V,
                                                   rule.fewer_chunks_hint, ")"));
  }
  if (rule.max_chunks > 0 && V > rule.max_chunks) {
    return absl::InvalidArgumentError(
        absl::StrCat(rule.name, " needs V <= ", rule.max_chunks, " chunks per rank, got V=", V));
  }
  return absl::OkStatus();
}

int DefaultChunks(absl::string_view name) {
  const ScheduleKind* kind = FindSchedule(name);
  return kind == nullptr ? 1 : kind->default_chunks;
}

std::vector<int> ChunkChoices(const ScheduleKind& kind, int max_chunks) {
  if (kind.min_chunks == kind.max_chunks) return {kind.min_chunks};
  std::vector<int> choices;
  const int last = kind.max_chunks > 0 ? std::min(kind.max_chunks, max_chunks) : max_chunks;
  for (int V = kind.min_chunks; V <= last; ++V) choices.push_back(V);
  return choices;
}

absl::Status CheckScheduleNames(const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    if (FindSchedule(name) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown schedule '", name, "' (known: ", absl::StrJoin(ScheduleNames(), ", "), ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Schedule> Generate(const std::string& name, int D, int V, int M) {
  const ScheduleKind* kind = FindSchedule(name);
  if (V <= 0) V = DefaultChunks(name);
  if (absl::Status status = CheckSize(D, V, M); !status.ok()) return status;
  if (kind == nullptr) return CheckScheduleNames({name});
  if (absl::Status status = CheckChunkRule(*kind, V); !status.ok()) return status;
  if (kind->constraints != nullptr) {
    if (absl::Status status = kind->constraints(D, V, M); !status.ok()) return status;
  }
  return kind->generate(D, V, M);
}

std::string ScheduleTableMarkdown() {
  std::string table =
      "| schedule | V | M | split backward | what it does |\n|---|---|---|---|---|\n";
  for (const ScheduleKind& kind : Schedules()) {
    absl::StrAppend(&table, "| `", kind.name, "` | ", VRule(kind), " | ", kind.m_rule, " | ",
                    kind.splits_backward ? "yes" : "no", " | ", kind.doc, " |\n");
  }
  return table;
}

}  // namespace pp::prog
