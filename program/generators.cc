#include "program/generators.h"

#include <algorithm>

#include "program/schedules.h"

namespace pp::prog {
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

}  // namespace

namespace internal {

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

}  // namespace internal

Schedule ForwardOnly(const std::vector<int>& stage_to_rank, int D, int V, int M) {
  Schedule schedule = Empty(kForwardOnly, D, V, M, stage_to_rank);
  for (int s = 0; s < static_cast<int>(stage_to_rank.size()); ++s) {
    for (int m = 0; m < M; ++m)
      schedule.programs[stage_to_rank[s]].push_back({Kind::kForward, s, m});
  }
  return schedule;
}

}  // namespace pp::prog
