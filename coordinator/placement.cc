#include "coordinator/placement.h"

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/checkpoint.h"
#include "common/step_math.h"
#include "coordinator/plan/plan.h"

namespace pp::coordinator {
namespace {

// Evaluation runs the forward-only schedule on the training schedule's layout. Planned from a
// schedule that compiled, it is never refused; a worker fails a task that lacks it. NotFound
// without spec.eval.
absl::StatusOr<pp::v1::Schedule> EvalSchedule(const pp::v1::JobSpec& spec,
                                              const pp::v1::Schedule& schedule) {
  if (!common::EvalEnabled(spec)) return absl::NotFoundError("the spec has no eval");
  return plan::PlanForwardOnly(
      std::vector<int>(schedule.stage_to_rank().begin(), schedule.stage_to_rank().end()),
      schedule.pipeline(), schedule.chunks(), schedule.microbatches());
}

}  // namespace

std::vector<pp::v1::RankPlacement> MeshRanks(const common::Mesh& mesh,
                                             const std::vector<int>& stage_to_rank) {
  std::vector<pp::v1::RankPlacement> ranks;
  for (int rank = 0; rank < mesh.size(); ++rank) {
    const common::MeshCoord coord = *mesh.Coord(rank);  // in range
    pp::v1::RankPlacement& p = ranks.emplace_back();
    p.set_rank(rank);
    p.set_tp(coord.tp);
    p.set_pp(coord.pp);
    p.set_dp(coord.dp);
    for (int s = 0; s < static_cast<int>(stage_to_rank.size()); ++s) {
      if (stage_to_rank[s] == p.pp()) p.add_stages(s);
    }
  }
  return ranks;
}

namespace {

bool Fits(const pp::v1::WorkerInfo& worker, int64_t bytes) {
  return worker.memory_bytes() <= 0 || worker.memory_bytes() >= bytes;
}

// Rank -> index into `idle` with every rank on a worker that fits it: the largest estimates on
// the largest workers (unknown memory first, then by name order), which fits whenever any
// assignment does. FailedPrecondition naming the first rank that no worker left can take.
absl::StatusOr<std::vector<int>> PlaceByMemory(const std::vector<int64_t>& rank_bytes,
                                               const std::vector<pp::v1::WorkerInfo>& idle) {
  std::vector<int> ranks(rank_bytes.size()), workers(idle.size());
  for (size_t i = 0; i < ranks.size(); ++i) ranks[i] = static_cast<int>(i);
  for (size_t i = 0; i < workers.size(); ++i) workers[i] = static_cast<int>(i);
  std::stable_sort(ranks.begin(), ranks.end(),
                   [&](int a, int b) { return rank_bytes[a] > rank_bytes[b]; });
  auto room = [&](int w) {
    const int64_t m = idle[w].memory_bytes();
    return m <= 0 ? INT64_MAX : m;
  };
  std::stable_sort(workers.begin(), workers.end(), [&](int a, int b) { return room(a) > room(b); });
  std::vector<int> worker_of_rank(ranks.size());
  for (size_t k = 0; k < ranks.size(); ++k) {
    const int rank = ranks[k];
    const int64_t bytes = rank_bytes[rank];
    if (k >= workers.size() || !Fits(idle[workers[k]], bytes)) {
      const auto fitting = std::count_if(idle.begin(), idle.end(),
                                         [&](const pp::v1::WorkerInfo& w) { return Fits(w, bytes); });
      return absl::FailedPreconditionError(absl::StrCat(
          "needs ", ranks.size(), " workers with enough memory: rank ", rank, " needs an estimated ",
          plan::FormatBytes(bytes), " (", bytes, " bytes) and ", k + 1,
          " ranks need at least that; ", fitting, " of ", idle.size(),
          " idle workers have that much"));
    }
    worker_of_rank[rank] = workers[k];
  }
  return worker_of_rank;
}

}  // namespace

absl::StatusOr<std::vector<pp::v1::RankPlacement>> PlaceRanks(
    const pp::v1::JobSpec& spec, const std::vector<int>& stage_to_rank,
    const std::vector<pp::v1::WorkerInfo>& idle, const std::vector<int64_t>& rank_bytes) {
  const int world = common::WorldSize(spec);
  if (static_cast<int>(idle.size()) < world) {
    return absl::FailedPreconditionError(
        absl::StrCat("job needs ", world, " idle workers, ", idle.size(), " available"));
  }
  // The first `world` idle workers (in name order), arranged so that a TP group shares a host
  // where hosts are known: the chattiest group gets the fastest links.
  absl::StatusOr<common::Mesh> mesh = common::MeshOf(spec);
  if (!mesh.ok()) return mesh.status();
  std::vector<std::string> hosts;
  for (int w = 0; w < world; ++w) hosts.push_back(idle[w].host());
  absl::StatusOr<std::vector<int>> worker_of_rank = common::PlaceRanks(*mesh, hosts);
  if (!worker_of_rank.ok()) return worker_of_rank.status();
  if (!rank_bytes.empty()) {
    if (static_cast<int>(rank_bytes.size()) != world) {
      return absl::InvalidArgumentError(
          absl::StrCat(rank_bytes.size(), " memory estimates for ", world, " ranks"));
    }
    bool all_fit = true;
    for (int r = 0; r < world; ++r) all_fit = all_fit && Fits(idle[(*worker_of_rank)[r]], rank_bytes[r]);
    // Memory before links: a rank on a worker too small fails inside it.
    if (!all_fit) worker_of_rank = PlaceByMemory(rank_bytes, idle);
    if (!worker_of_rank.ok()) return worker_of_rank.status();
  }
  std::vector<pp::v1::RankPlacement> placement = MeshRanks(*mesh, stage_to_rank);
  for (pp::v1::RankPlacement& p : placement) {
    const pp::v1::WorkerInfo& worker = idle[(*worker_of_rank)[p.rank()]];
    p.set_worker(worker.name());
    p.set_address(worker.address());
  }
  return placement;
}

absl::Status CheckMemoryFits(const std::vector<int64_t>& rank_bytes,
                             const std::vector<pp::v1::WorkerInfo>& workers) {
  const pp::v1::WorkerInfo* largest = nullptr;
  for (const pp::v1::WorkerInfo& w : workers) {
    if (w.state() == pp::v1::DOWN) continue;
    if (w.memory_bytes() <= 0) return absl::OkStatus();  // unknown: it may fit
    if (largest == nullptr || w.memory_bytes() > largest->memory_bytes()) largest = &w;
  }
  if (largest == nullptr) return absl::OkStatus();  // nothing registered: it waits, QUEUED
  for (size_t rank = 0; rank < rank_bytes.size(); ++rank) {
    if (rank_bytes[rank] <= largest->memory_bytes()) continue;
    return absl::FailedPreconditionError(absl::StrCat(
        "the job does not fit any worker: rank ", rank, " needs an estimated ",
        plan::FormatBytes(rank_bytes[rank]), " (", rank_bytes[rank],
        " bytes), the largest registered worker ", largest->name(), " has ",
        plan::FormatBytes(largest->memory_bytes()), " (", largest->memory_bytes(),
        " bytes); see `ppctl plan --spec` for the breakdown"));
  }
  return absl::OkStatus();
}

std::vector<pp::v1::TaskPlan> BuildTaskPlans(const pp::v1::Job& job,
                                             const pp::v1::Schedule& schedule,
                                             const std::vector<int>& stage_units,
                                             const std::string& checkpoint_dir) {
  const int attempt = job.attempt();
  const int pipeline = job.spec().parallel().pipeline();
  const int tensor = std::max(1, job.spec().parallel().tensor());
  std::vector<int> first_unit(stage_units.size() + 1, 0);
  for (size_t s = 0; s < stage_units.size(); ++s)
    first_unit[s + 1] = first_unit[s] + stage_units[s];

  const absl::StatusOr<pp::v1::Schedule> eval = EvalSchedule(job.spec(), schedule);
  std::vector<pp::v1::TaskPlan> plans;
  for (const pp::v1::RankPlacement& p : job.placement()) {
    pp::v1::TaskPlan& plan = plans.emplace_back();
    plan.set_job_id(job.id());
    plan.set_attempt(attempt);
    plan.set_rank(p.rank());
    plan.set_world_size(job.placement_size());
    plan.set_pp_rank(p.pp());
    plan.set_dp_rank(p.dp());
    plan.set_tp_rank(p.tp());
    *plan.mutable_spec() = job.spec();
    for (int s : p.stages()) {
      pp::v1::StageLayers* layers = plan.add_stages();
      layers->set_stage(s);
      layers->set_first_unit(first_unit[s]);
      layers->set_last_unit(first_unit[s + 1] - 1);
    }
    // The schedule speaks of pipeline ranks; this rank's pipeline is the one of its dp and tp.
    auto global = [&](int pipeline_rank) {
      return (p.dp() * pipeline + pipeline_rank) * tensor + p.tp();
    };
    auto this_rank = [&](const pp::v1::Schedule& from, pp::v1::RankProgram& into) {
      for (const pp::v1::RankProgram& program : from.ranks()) {
        if (program.rank() != p.pp()) continue;
        into = program;
        into.set_rank(p.rank());
        for (pp::v1::Action& action : *into.mutable_actions()) {
          if (action.has_peer()) action.set_peer(global(action.peer()));
        }
      }
    };
    this_rank(schedule, *plan.mutable_program());
    if (eval.ok()) this_rank(*eval, *plan.mutable_eval_program());
    for (int pipeline_rank : schedule.stage_to_rank()) {
      plan.add_stage_to_rank(global(pipeline_rank));
    }
    plan.set_start_step(job.start_step());
    plan.set_checkpoint_dir(checkpoint_dir);
    if (job.start_step() > 0) {
      plan.set_resume_from(pp::common::StepDir(checkpoint_dir, job.id(), job.start_step()));
    }
    plan.set_rendezvous_prefix(absl::StrCat(job.id(), "/", attempt, "/"));
  }
  return plans;
}

}  // namespace pp::coordinator
