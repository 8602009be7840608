// The pipeline schedules the service runs: the one table of their names, chunk rules, default
// chunks and constraints on D (pipeline ranks), V (chunks per rank) and M (microbatches). It lives
// here, below both users: job-spec validation (job_spec.h) checks a spec's schedule and chunks
// against it, and the planner (coordinator/plan/generate.h) adds a generator to each entry.
//
//   gpipe             V=1                    zb-h1, zb-h2          V=1
//   1f1b              V=1                    zb-v, v-half, v-min   V=2 (default 2)
//   interleaved-1f1b  V>=2 (default 2), M >= D and no last microbatch group short enough to make
//                     Megatron-LM's order cyclic
//   dualpipe-v        V=2 (default 2), M >= 2D
//   forward-only      any V (default 1): forwards only, for evaluation; no job trains with it
//
// Contract: the table is built on first use and never changes; every function is thread-safe.
#ifndef PP_COMMON_SCHEDULES_H_
#define PP_COMMON_SCHEDULES_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace pp::common {

struct ScheduleRule {
  std::string name;
  // Chunk rule: V in [min_chunks, max_chunks]; max_chunks 0 = no upper bound.
  int min_chunks = 1;
  int max_chunks = 1;
  // V when a caller of the planner passes none.
  int default_chunks = 1;
  // Appended to the planner's refusal of a V below min_chunks, e.g. "; with one chunk use 1f1b".
  std::string fewer_chunks_hint;
  // Constraints on D, V, M beyond the chunk rule (OK or InvalidArgument saying why); null: none.
  // REQUIRES: D, M >= 1 and V within the chunk rule.
  absl::Status (*constraints)(int D, int V, int M) = nullptr;
  // False for forward-only: it computes a loss but no gradient, so a job's parallel.schedule may
  // not name it and the auto-planner never picks it.
  bool trains = true;
};

// Every schedule, in the order they are documented.
const std::vector<ScheduleRule>& ScheduleRules();

// The entry named `name`, or null.
const ScheduleRule* FindScheduleRule(absl::string_view name);

// The names, in the order they are documented.
const std::vector<std::string>& ScheduleNames();
// Those of them that train (ScheduleRule::trains): what a job spec and the auto-planner choose from.
const std::vector<std::string>& TrainingScheduleNames();

// The schedule evaluation runs: forwards of every stage and microbatch, on the layout of the
// job's training schedule.
inline constexpr const char kForwardOnly[] = "forward-only";

// The name of a schedule a job carries as torch.distributed.pipelining CSV (parallel.schedule_file
// or parallel.program) instead of naming one of the table's.
inline constexpr const char kScheduleFileName[] = "schedule-file";

// parallel.schedule "auto": ppcoord calibrates the placed workers and chooses the schedule, V, M
// and partition itself (coordinator/plan/calibrated.h).
inline constexpr const char kAutoSchedule[] = "auto";

// OK when V obeys `rule`'s chunk rule, else InvalidArgument in the planner's words: "zb-v runs
// exactly 2 chunk(s) per rank, got V=3", "interleaved-1f1b needs V >= 2 chunks per rank (got V=1;
// with one chunk use 1f1b)", "NAME needs V <= N chunks per rank, got V=...".
absl::Status CheckChunkRule(const ScheduleRule& rule, int V);

}  // namespace pp::common

#endif  // PP_COMMON_SCHEDULES_H_
