#include "coordinator/plan/generate.h"

#include <algorithm>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pp::plan {
namespace {

Schedule Empty(const std::string& name, int D, int V, int M, std::vector<int> stage_to_rank) {
  Schedule schedule;
  schedule.name = name;
  schedule.pipeline = D;
  schedule.chunks = V;
  schedule.microbatches = M;
  schedule.stage_to_rank = std::move(stage_to_rank);
  schedule.programs.resize(D);
  return schedule;
}

Schedule GPipe(int D, int M) {
  Schedule schedule = Empty("gpipe", D, 1, M, LoopedStageToRank(D, 1));
  for (int r = 0; r < D; ++r) {
    for (int m = 0; m < M; ++m) schedule.programs[r].push_back({Kind::kForward, r, m});
    for (int m = 0; m < M; ++m) schedule.programs[r].push_back({Kind::kBackward, r, m});
  }
  return schedule;
}

// Narayanan et al. 2021 (PipeDream-Flush as used by Megatron-LM): rank r runs D-1-r warm-up
// forwards, then alternates one forward and one backward, then drains the remaining backwards.
// At most D-r microbatches are live on rank r.
Schedule OneFOneB(int D, int M) {
  Schedule schedule = Empty("1f1b", D, 1, M, LoopedStageToRank(D, 1));
  for (int r = 0; r < D; ++r) {
    std::vector<Action>& program = schedule.programs[r];
    const int warmup = std::min(D - 1 - r, M);
    for (int m = 0; m < warmup; ++m) program.push_back({Kind::kForward, r, m});
    for (int k = 0; k < M - warmup; ++k) {
      program.push_back({Kind::kForward, r, warmup + k});
      program.push_back({Kind::kBackward, r, k});
    }
    for (int k = M - warmup; k < M; ++k) program.push_back({Kind::kBackward, r, k});
  }
  return schedule;
}

struct Unit {
  int microbatch;
  int chunk;
};

// Megatron-LM's get_schedule_table (core/pipeline_parallel/schedules.py): microbatches are taken
// in groups of G; within a group every chunk runs the whole group before the next chunk starts
// (depth-first). The last group holds whatever is left, which is how M need not be a multiple of D.
std::vector<Unit> MegatronTable(int M, int V, int G) {
  std::vector<Unit> table;
  for (int first = 0; first < M; first += G) {
    const int last = first + G >= M ? M : first + G;
    for (int chunk = 0; chunk < V; ++chunk) {
      for (int m = first; m < last; ++m) table.push_back({m, chunk});
    }
  }
  return table;
}

// Megatron-LM's forward_backward_pipelining_with_interleaving with the default microbatch group
// size G = D: rank r runs (D-r-1)*2 + (V-1)*G warm-up forwards (all of them if that covers the
// V*M units), then one forward / one backward. Backward unit k is table entry k with the chunk
// order reversed (the last chunk's gradient comes first).
Schedule Interleaved(int D, int V, int M) {
  Schedule schedule = Empty("interleaved-1f1b", D, V, M, LoopedStageToRank(D, V));
  const int G = D;
  const std::vector<Unit> table = MegatronTable(M, V, G);
  const int total = V * M;
  for (int r = 0; r < D; ++r) {
    std::vector<Action>& program = schedule.programs[r];
    auto forward = [&](int k) {
      program.push_back({Kind::kForward, table[k].chunk * D + r, table[k].microbatch});
    };
    auto backward = [&](int k) {
      program.push_back({Kind::kBackward, (V - 1 - table[k].chunk) * D + r, table[k].microbatch});
    };
    const int warmup = std::min((D - r - 1) * 2 + (V - 1) * G, total);
    for (int k = 0; k < warmup; ++k) forward(k);
    for (int k = 0; k < total - warmup; ++k) {
      forward(warmup + k);
      backward(k);
    }
    for (int k = total - warmup; k < total; ++k) backward(k);
  }
  return schedule;
}

// ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", figure 3): 1F1B with each
// backward split into I and W, where rank r defers its W passes by r microbatches. Rank r runs
// D-r warm-up forwards, then for k = 0..M-1: I_k, W_{k-r} (once k >= r), the next forward if any;
// then the r deferred W passes. At most D microbatches are live on any rank (from F to W), as
// on 1F1B's rank 0, and with T_F = T_I = T_W the W passes exactly fill the cool-down: the step
// takes M(f+b) + (D-1)(f+b-2w), a third of 1F1B's bubble.
Schedule ZbH1(int D, int M) {
  Schedule schedule = Empty("zb-h1", D, 1, M, LoopedStageToRank(D, 1));
  for (int r = 0; r < D; ++r) {
    std::vector<Action>& program = schedule.programs[r];
    int next_forward = std::min(D - r, M);
    for (int m = 0; m < next_forward; ++m) program.push_back({Kind::kForward, r, m});
    for (int k = 0; k < M; ++k) {
      program.push_back({Kind::kBackwardInput, r, k});
      if (k >= r) program.push_back({Kind::kBackwardWeight, r, k - r});
      if (next_forward < M) program.push_back({Kind::kForward, r, next_forward++});
    }
    for (int k = std::max(M - r, 0); k < M; ++k) program.push_back({Kind::kBackwardWeight, r, k});
  }
  return schedule;
}

// ZB-V (Qi et al. 2023, section 6): rank r holds stages r and 2D-1-r, so the forward goes down
// the ranks and back up and the loss is on rank 0, next to the first stage. The order comes from
// list scheduling in the spirit of the paper's heuristic scheduler: every action takes one time
// unit (the paper's T_F = T_B = T_W), and whenever a rank is free it runs, in this priority:
//   1. a ready F if fewer than 2D stage-microbatches are live on it (live from F to W: a chunk is
//      half a 1F1B stage, so this is 1F1B's peak of D microbatches), the stage nearer the loss
//      first;
//   2. a ready I (its gradient is awaited upstream), chunk 0's first: when both are ready it
//      belongs to the older microbatch;
//   3. the oldest pending W (no one waits for a W, so it fills what would be a bubble).
// The order in which each rank ran its actions is its program. Of the 120 priority orders of
// {F near, F far, I near, I far, W} this one reaches the lower bound 6M + D - 1 (f=I=W=1 per
// chunk) for the most M; see tests/plan/simulate_test.cc for the exact figures.
absl::StatusOr<Schedule> ZbV(int D, int M) {
  Schedule schedule = Empty("zb-v", D, 2, M, VShapeStageToRank(D));
  const int S = 2 * D, cap = 2 * D;
  constexpr int kNever = std::numeric_limits<int>::max();
  std::vector<int> next_f(S, 0), next_i(S, 0);
  std::vector<int> f_end(S * M, kNever), i_end(S * M, kNever);
  struct Pending {
    int stage;
    int microbatch;
  };
  std::vector<std::vector<Pending>> pending_w(D);  // in I order
  std::vector<size_t> w_head(D, 0);
  std::vector<int> live(D, 0), free_at(D, 0);
  int remaining = 3 * S * M;
  for (int t = 0; remaining > 0;) {
    for (int r = 0; r < D; ++r) {
      if (free_at[r] > t) continue;
      const int stages[2] = {S - 1 - r, r};  // nearer the loss first
      std::vector<Action>& program = schedule.programs[r];
      auto forward_ready = [&](int s) {
        const int m = next_f[s];
        return live[r] < cap && m < M && (s == 0 || f_end[(s - 1) * M + m] <= t);
      };
      auto input_grad_ready = [&](int s) {
        const int m = next_i[s];
        return m < M && f_end[s * M + m] <= t && (s + 1 == S || i_end[(s + 1) * M + m] <= t);
      };
      if (forward_ready(stages[0]) || forward_ready(stages[1])) {
        const int s = forward_ready(stages[0]) ? stages[0] : stages[1];
        const int m = next_f[s]++;
        program.push_back({Kind::kForward, s, m});
        f_end[s * M + m] = t + 1;
        ++live[r];
      } else if (input_grad_ready(stages[1]) || input_grad_ready(stages[0])) {
        const int s = input_grad_ready(stages[1]) ? stages[1] : stages[0];
        const int m = next_i[s]++;
        program.push_back({Kind::kBackwardInput, s, m});
        i_end[s * M + m] = t + 1;
        pending_w[r].push_back({s, m});
      } else if (w_head[r] < pending_w[r].size()) {
        const Pending w = pending_w[r][w_head[r]++];
        program.push_back({Kind::kBackwardWeight, w.stage, w.microbatch});
        --live[r];
      } else {
        continue;  // idle until something it waits for finishes
      }
      free_at[r] = t + 1;
      --remaining;
    }
    int next = kNever;
    for (int r = 0; r < D; ++r) {
      if (free_at[r] > t) next = std::min(next, free_at[r]);
    }
    if (next == kNever && remaining > 0) {
      return absl::InternalError(
          absl::StrCat("zb-v list scheduler stalled at time ", t, " (D=", D, " M=", M, ")"));
    }
    t = next;
  }
  return schedule;
}

absl::Status CheckChunks(const std::string& name, int V, int want) {
  if (V == want) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(name, " runs exactly ", want, " chunk(s) per rank, got V=", V));
}

}  // namespace

const std::vector<std::string>& ScheduleNames() {
  static const auto* names =
      new std::vector<std::string>{"gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-v"};
  return *names;
}

int DefaultChunks(const std::string& name) {
  return name == "interleaved-1f1b" || name == "zb-v" ? 2 : 1;
}

absl::StatusOr<Schedule> Generate(const std::string& name, int D, int V, int M) {
  if (V <= 0) V = DefaultChunks(name);
  if (D < 1) return absl::InvalidArgumentError(absl::StrCat("pipeline depth D=", D, " < 1"));
  if (M < 1) return absl::InvalidArgumentError(absl::StrCat("microbatches M=", M, " < 1"));
  // Bounds what one request may allocate (the bench's D=64, V=4, M=1024 is 2^18).
  constexpr double kMaxStageMicrobatches = 1 << 22;
  if (static_cast<double>(D) * V * M > kMaxStageMicrobatches) {
    return absl::InvalidArgumentError(absl::StrCat("D*V*M = ", static_cast<double>(D) * V * M,
                                                   " stage-microbatches is more than the ",
                                                   kMaxStageMicrobatches, " the planner handles"));
  }
  if (name == "gpipe") {
    if (auto status = CheckChunks(name, V, 1); !status.ok()) return status;
    return GPipe(D, M);
  }
  if (name == "1f1b") {
    if (auto status = CheckChunks(name, V, 1); !status.ok()) return status;
    return OneFOneB(D, M);
  }
  if (name == "interleaved-1f1b") {
    if (V < 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("interleaved-1f1b needs V >= 2 chunks per rank (got V=", V,
                       "; with one chunk use 1f1b)"));
    }
    if (M < D) {
      return absl::InvalidArgumentError(absl::StrCat(
          "interleaved-1f1b needs M >= D: Megatron-LM requires its microbatch group size (D=", D,
          ") to lie in [D, M], got M=", M));
    }
    // A last group of r = M mod D microbatches with 1 <= r <= D-3 (2 <= r when V = 2) makes
    // Megatron's order cyclic: rank 0's warm-up runs a forward of the last group whose input
    // rank D-1 produces only after a backward that waits for rank 0's first backward. The
    // validator finds that deadlock; this closed form matches it for every D <= 16, V <= 6.
    const int r = M % D;
    if (r >= (V == 2 ? 2 : 1) && r <= D - 3) {
      return absl::InvalidArgumentError(absl::StrCat(
          "interleaved-1f1b with D=", D, " V=", V, " M=", M,
          ": Megatron-LM's order deadlocks when its last microbatch group is that "
          "short (M mod D = ",
          r, "); use M with M mod D in {0, ", V == 2 ? "1, " : "", D - 2, ", ", D - 1, "}"));
    }
    return Interleaved(D, V, M);
  }
  if (name == "zb-h1") {
    if (auto status = CheckChunks(name, V, 1); !status.ok()) return status;
    return ZbH1(D, M);
  }
  if (name == "zb-v") {
    if (auto status = CheckChunks(name, V, 2); !status.ok()) return status;
    return ZbV(D, M);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown schedule '", name, "' (known: ", absl::StrJoin(ScheduleNames(), ", "), ")"));
}

}  // namespace pp::plan
