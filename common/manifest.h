// Building the manifest of a checkpoint (pp.v1.CheckpointManifest, proto/pp/v1/checkpoint.proto),
// the one way for every writer: the coordinator when all ranks reported their shards, the
// single-process trainer after its one shard. Committing it is common/checkpoint.h CommitManifest.
// Pure: the caller passes the time.
#ifndef PP_COMMON_MANIFEST_H_
#define PP_COMMON_MANIFEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "pp/v1/checkpoint.pb.h"
#include "pp/v1/job.pb.h"

namespace pp::common {

// The layout of a run on spec.parallel's mesh whose stages hold `stage_units` partition units
// each (stage order).
pp::v1::CheckpointLayout MeshLayout(const pp::v1::JobSpec& spec,
                                    const std::vector<int>& stage_units);

// The manifest of checkpoint `step` (completed steps) of job `job_id`, trained under `spec` and
// written by `layout` into `shards`. The data position is where step `step` starts: each step
// consumes layout.data x train.microbatches x train.microbatch_size sequences. Randomness is only
// drawn at initialisation, so the rng state is the seed alone. `train_windows` is K
// (common/epoch.h): the manifest's epoch is that of its data position; 0 (K unknown) leaves it out.
pp::v1::CheckpointManifest BuildManifest(const std::string& job_id, int step,
                                         const pp::v1::JobSpec& spec,
                                         const pp::v1::CheckpointLayout& layout,
                                         const std::vector<pp::v1::CheckpointShard>& shards,
                                         double created_unix, int64_t train_windows);

}  // namespace pp::common

#endif  // PP_COMMON_MANIFEST_H_
