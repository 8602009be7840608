// Private to the planner: the schedules whose order comes from list scheduling under a memory cap
// (zb-v, zb-h2, v-half, v-min), and the list scheduler they share.
//
// The scheduler is in the spirit of the heuristic scheduler of Qi et al. 2023 ("Zero Bubble
// Pipeline Parallelism", sec. 3): every action takes one time unit (their T_F = T_I = T_W) and
// whenever a rank is free it runs the first ready action of its policy's priority list; the
// order in which each rank ran its actions is its program. An action is ready when its inputs
// have finished (F after the previous stage's F, I after its F and the next stage's I, W after
// its I). A stage-microbatch activation is live on its rank from its F to its W, and a forward
// may start only while the rank's live count stays within the policy's cap:
//   - one chunk per rank (V = 1): live + 1 <= cap;
//   - two chunks in a V (rank r holds stages r and 2D-1-r): the chunk nearer the loss may fill
//     the cap, but a new microbatch (the chunk farther from the loss) only while it leaves a
//     slot free, live + 2 <= cap. The nearer chunk's forwards run in microbatch order, so the
//     oldest microbatch on a rank always has the slot it needs: the schedule never stalls for
//     memory. zb-v, whose cap of 2D never binds that way, keeps the one-chunk rule.
// Programs are compute-only (see lower.h). Pure functions; thread-safe.
#ifndef PP_PROGRAM_LIST_SCHEDULE_H_
#define PP_PROGRAM_LIST_SCHEDULE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "program/ir.h"

namespace pp::prog::internal {

// What a free rank may run, for the priority list. With one chunk per rank near and far are the
// same stage.
enum class Pick { kForwardNear, kForwardFar, kInputNear, kInputFar, kWeight };

struct ListPolicy {
  std::string name;
  int chunks = 1;              // V: 1 (looped, stage r on rank r) or 2 (the V shape)
  int cap = 0;                 // live stage-microbatch activations per rank, F to W
  bool keep_slot = false;      // V = 2: a new microbatch must leave one slot free
  std::vector<Pick> priority;  // first ready pick wins; W in I order
};

// The programs of `policy` for D ranks and M microbatches. InternalError if the policy stalls
// (a cap too small for the shape); the tests cover every D <= 8 and M <= 32 of the four users.
// REQUIRES: D, M >= 1, policy.chunks in {1, 2}, policy.cap >= 2 when chunks = 2.
absl::StatusOr<Schedule> ListSchedule(const ListPolicy& policy, int D, int M);

// ZB-V (Qi et al. 2023, sec. 6): V shape, cap 2D (1F1B's peak of D full-stage activations, a
// chunk being half a stage); priority F near, F far, I far, I near, W. Of the 120 orders of those
// five this one reaches the bound 6M + D - 1 (f = I = W = 1 per chunk) for the most M.
absl::StatusOr<Schedule> ZbV(int D, int M);

// ZB-H2 (Qi et al. 2023, sec. 3.2 and fig. 3): one chunk, up to 2D-1 live activations (their
// "2p-1" of memory, 1F1B's peak is D) so that the warm-up runs enough forwards to keep every
// rank busy until its first gradient arrives; priority I, F, W: the gradient chain is never
// held up, W fills every gap. With T_F = T_I = T_W it reaches the bound M(f+b) + (D-1)f.
absl::StatusOr<Schedule> ZbH2(int D, int M);

// V-Half and V-Min (Qi et al. 2024, "Pipeline Parallelism with Controllable Memory"): the V
// shape and split backward of ZB-V at a half and a third of 1F1B's activation memory: a cap of
// D + 1 and ceil(2D/3) + 1 chunk activations (1F1B holds 2D chunk's worth), the one above the
// fraction being the chunk in flight. Priority F near, I near, I far, F far, W: finish what is
// admitted before admitting more. The paper builds its orders from repeated hand-made blocks;
// these come from the list scheduler, so their bubbles are this scheduler's (docs/planner.md).
absl::StatusOr<Schedule> VHalf(int D, int M);
absl::StatusOr<Schedule> VMin(int D, int M);

}  // namespace pp::prog::internal

#endif  // PP_PROGRAM_LIST_SCHEDULE_H_
