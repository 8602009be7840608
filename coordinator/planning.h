// From a submitted JobSpec to what the coordinator runs (internal): defaults, validation, the
// compiled schedule and the partition of units into stages.
#ifndef PP_COORDINATOR_PLANNING_H_
#define PP_COORDINATOR_PLANNING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/plan/plan.h"
#include "pp/v1/job.pb.h"
#include "pp/v1/schedule.pb.h"

namespace pp::coordinator {

struct PlannedJob {
  pp::v1::JobSpec spec;          // defaults applied; parallel.recompute never "auto"
  pp::v1::Schedule schedule;     // compiled and simulated under `costs`
  pp::v1::CostModel costs;       // PlanningCosts with the job's recomputation shares
  std::vector<int> stage_units;  // partition units per stage
  std::vector<pp::plan::RankMemory> memory;  // every global rank's estimate, in rank order
  std::string recompute_reason;  // recompute "auto": what it chose and why; else empty
  int64_t train_windows = 0;     // K (common/epoch.h), counted by PlanClientSpec; else 0
};

// Uniform per-stage costs for the planned bubble: F = 1, B = 2 (I = W = 1 when split), free comms,
// and the recomputation shares of the job (coordinator/plan/recompute.h).
pp::v1::CostModel PlanningCosts(const pp::plan::RecomputeShares& shares = {});

// ApplyDefaults + ValidateJobSpecFields (common/job_spec.h) + planner + memory estimate. Reads no
// file, so JobManager may call it under its lock (reloading a stored job, deciding a calibrated
// one): a spec's files are checked once, by PlanClientSpec, when it comes in. A spec with
// parallel.schedule "auto" is planned as plan::ProvisionalSpec (placement and admission need a layout
// before calibration chooses one) and returned with "auto" kept. Every error is
// InvalidArgument naming the offending field(s). parallel.recompute "auto" is resolved with
// `fits` (ChooseRecompute; its refusal is returned as it is); a null `fits` accepts anything, so
// auto then means none.
absl::StatusOr<PlannedJob> PlanJobSpec(pp::v1::JobSpec spec,
                                       const pp::plan::MemoryFits& fits = nullptr);

// A spec as a client sends it (SubmitJob, PlanJob, ResumeJob), the same checks for each: every
// path it names under `data_roots` (common/path_roots.h), before any file is opened, so that the
// answer for a path outside is the same whether it exists or not (a glob as written); then its
// fields; then its data globs become the explicit list of their matches (common/data_spec.h
// ResolveDataGlobs: the returned spec, which ppcoord stores, names every file the job reads in
// data.paths, so the job's stream never changes); then its files (ValidateSpecFiles under
// `data_roots`), counting K; then data.end_of_text is resolved with documents "mask"
// (common/data_spec.h ResolveEndOfText: stored, so workers never read the tokenizer); then
// train.epochs becomes train.steps (common/epoch.h ResolveEpochs); then PlanJobSpec. Reads every
// data file through: call it without JobManager's lock. Empty `data_roots`: files may lie
// anywhere.
absl::StatusOr<PlannedJob> PlanClientSpec(const pp::v1::JobSpec& spec,
                                          const std::vector<std::string>& data_roots,
                                          const pp::plan::MemoryFits& fits);

// The estimated peak bytes of each rank (RankMemory total), in rank order.
std::vector<int64_t> RankBytes(const std::vector<pp::plan::RankMemory>& memory);

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_PLANNING_H_
