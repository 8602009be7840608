// Elastic jobs (spec.elastic; docs/recovery.md "Elastic jobs"), the pure part: the bounds with
// their defaults, the layout resizes start from, and the layouts a job can take on a number of
// workers, best first. No locks, no RPC, no clock: JobManager (elastic_jobs.cc) plans the
// candidates (PlanJobSpec) and applies the first that plans and places.
//
// Every layout keeps the global batch: train.microbatches x parallel.data stays the base's, and
// the microbatch size and sequence length do not change. Any layout loads any checkpoint
// (docs/recovery.md "Resume"), and one with the base's parallel.data trains on bitwise.
#ifndef PP_COORDINATOR_ELASTIC_H_
#define PP_COORDINATOR_ELASTIC_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "pp/v1/job.pb.h"

namespace pp::coordinator {

struct ElasticBounds {
  int min_workers = 1;
  int max_workers = 1;
  absl::Duration grace;       // a job short of workers waits this long before it shrinks
  absl::Duration grow_after;  // idle workers must stay idle this long before a job grows
};

// Whether the job may be resized (spec.elastic is set).
bool IsElastic(const pp::v1::JobSpec& spec);

// The workers a layout uses: pipeline x data x tensor (0 counts as 1).
int LayoutWorkers(const pp::v1::ParallelSpec& parallel);

// The job's spec with the layout resizes start from: its base layout (Job.base_parallel and
// base_microbatches) once it was resized, else its spec as it is.
pp::v1::JobSpec BaseSpec(const pp::v1::Job& job);

// spec.elastic with defaults: max_workers 0 = the base layout's workers, grace 30 s, grow_after
// 60 s. REQUIRES: IsElastic(base).
ElasticBounds BoundsOf(const pp::v1::JobSpec& base);

// The layouts of `base` that use at most `workers` workers and at least one, best first: those
// that keep the base's data replicas (the pipeline's depth, V and schedule change no bit of
// training; the replica count changes the order gradients are summed in, so another one trains
// close to the base's run, not bitwise); then the most workers used; then the pipeline depth
// nearest the base's (each worker keeps about the share of the model it had); then more data
// replicas. Each keeps parallel.tensor and the global
// batch (parallel.data divides it); a layout whose depth differs from the base's drops an
// explicit partition (parallel.stage_layers) for the uniform one. A candidate may still be
// refused by the planner (a schedule's own rules, memory): after each candidate whose schedule
// is not 1f1b comes the same layout under 1f1b with one chunk, its fallback.
std::vector<pp::v1::JobSpec> LayoutsFor(const pp::v1::JobSpec& base, int workers);

// "1f1b D=3 V=1 T=1 R=1 M=8 (3 workers)": a layout as events and logs print it.
std::string LayoutLabel(const pp::v1::JobSpec& spec);

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_ELASTIC_H_
