// Placement and task building of ppcoord (internal), pure functions.
// Global rank layout: rank = (dp * pipeline + pp) * tensor + tp, so with tensor = data = 1 the
// global rank is the pipeline rank of the compiled schedule. Workers are taken in name order.
#ifndef PP_COORDINATOR_PLACEMENT_H_
#define PP_COORDINATOR_PLACEMENT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/mesh.h"
#include "pp/v1/coordinator.pb.h"
#include "pp/v1/job.pb.h"
#include "pp/v1/schedule.pb.h"
#include "pp/v1/worker.pb.h"

namespace pp::coordinator {

// Every global rank's (dp, pp, tp) coordinates on `mesh` and the stages that `stage_to_rank` gives
// its pipeline rank, in rank order; no worker yet.
std::vector<pp::v1::RankPlacement> MeshRanks(const common::Mesh& mesh,
                                             const std::vector<int>& stage_to_rank);

// MeshRanks, each rank put on one of `idle` (sorted by name; the first common::WorldSize are
// used), TP groups on one host where hosts are known. `rank_bytes` (empty, or one estimate per
// global rank) keeps a rank off a worker whose memory_bytes is known (> 0) and below its
// estimate: when the first workers do not all fit, the largest estimates go to the largest
// workers (hosts no longer considered). FailedPrecondition when too few workers, or too few with
// enough memory (the message says which rank and how much).
absl::StatusOr<std::vector<pp::v1::RankPlacement>> PlaceRanks(
    const pp::v1::JobSpec& spec, const std::vector<int>& stage_to_rank,
    const std::vector<pp::v1::WorkerInfo>& idle, const std::vector<int64_t>& rank_bytes = {});

// Admission: FailedPrecondition naming the rank, its estimate and the largest worker (name and
// bytes) when some rank's estimate exceeds the memory_bytes of every worker in `workers` that is
// not DOWN. OK when no worker is registered or one reports memory_bytes = 0 (unknown), so the
// job may still fit.
absl::Status CheckMemoryFits(const std::vector<int64_t>& rank_bytes,
                             const std::vector<pp::v1::WorkerInfo>& workers);

// The TaskPlan of every placed rank of `job`: its stages' unit ranges from `stage_units` (units
// per stage, in stage order), its pipeline rank's program with peers and stage_to_rank mapped to
// the global ranks of the rank's own pipeline (same dp and tp coordinates), the rendezvous prefix
// "<job>/<job.attempt>/", `checkpoint_dir`, and job.start_step with, when it is > 0, resume_from
// = that step's folder under checkpoint_dir. With spec.eval, also its program of the forward-only
// schedule on the same layout (eval_program), mapped the same way.
std::vector<pp::v1::TaskPlan> BuildTaskPlans(const pp::v1::Job& job,
                                             const pp::v1::Schedule& schedule,
                                             const std::vector<int>& stage_units,
                                             const std::string& checkpoint_dir);

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_PLACEMENT_H_
