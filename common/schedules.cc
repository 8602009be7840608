#include "common/schedules.h"

#include "absl/strings/str_cat.h"

namespace pp::common {
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
  return absl::InvalidArgumentError(absl::StrCat(
      "dualpipe-v needs M >= 2D microbatches (DeepSeek's DualPipeV: D=", D, " needs M >= ",
      2 * D, "), got M=", M));
}

}  // namespace

const std::vector<ScheduleRule>& ScheduleRules() {
  static const auto* table = new std::vector<ScheduleRule>{
      {"gpipe", 1, 1, 1, "", nullptr},
      {"1f1b", 1, 1, 1, "", nullptr},
      {"interleaved-1f1b", 2, 0, 2, "; with one chunk use 1f1b", InterleavedConstraints},
      {"zb-h1", 1, 1, 1, "", nullptr},
      {"zb-h2", 1, 1, 1, "", nullptr},
      {"zb-v", 2, 2, 2, "", nullptr},
      {"v-half", 2, 2, 2, "", nullptr},
      {"v-min", 2, 2, 2, "", nullptr},
      {"dualpipe-v", 2, 2, 2, "", DualPipeVConstraints},
      {kForwardOnly, 1, 0, 1, "", nullptr, /*trains=*/false},
  };
  return *table;
}

const ScheduleRule* FindScheduleRule(absl::string_view name) {
  for (const ScheduleRule& rule : ScheduleRules()) {
    if (rule.name == name) return &rule;
  }
  return nullptr;
}

const std::vector<std::string>& ScheduleNames() {
  static const auto* names = [] {
    auto* list = new std::vector<std::string>;
    for (const ScheduleRule& rule : ScheduleRules()) list->push_back(rule.name);
    return list;
  }();
  return *names;
}

const std::vector<std::string>& TrainingScheduleNames() {
  static const auto* names = [] {
    auto* list = new std::vector<std::string>;
    for (const ScheduleRule& rule : ScheduleRules()) {
      if (rule.trains) list->push_back(rule.name);
    }
    return list;
  }();
  return *names;
}

absl::Status CheckChunkRule(const ScheduleRule& rule, int V) {
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
    return absl::InvalidArgumentError(absl::StrCat(rule.name, " needs V <= ", rule.max_chunks,
                                                   " chunks per rank, got V=", V));
  }
  return absl::OkStatus();
}

}  // namespace pp::common
