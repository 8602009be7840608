#include "common/manifest.h"

#include <algorithm>
#include <cstdint>

#include "common/epoch.h"
#include "common/job_spec.h"
#include "common/step_math.h"

namespace pp::common {

pp::v1::CheckpointLayout MeshLayout(const pp::v1::JobSpec& spec,
                                    const std::vector<int>& stage_units) {
  const pp::v1::ParallelSpec& p = spec.parallel();
  pp::v1::CheckpointLayout layout;
  layout.set_pipeline(p.pipeline());
  layout.set_chunks(p.chunks());
  layout.set_tensor(p.tensor());
  layout.set_data(p.data());
  layout.set_schedule(ScheduleLabel(p));
  layout.mutable_stage_layers()->Assign(stage_units.begin(), stage_units.end());
  return layout;
}

pp::v1::CheckpointManifest BuildManifest(const std::string& job_id, int step,
                                         const pp::v1::JobSpec& spec,
                                         const pp::v1::CheckpointLayout& layout,
                                         const std::vector<pp::v1::CheckpointShard>& shards,
                                         double created_unix, int64_t train_windows) {
  pp::v1::CheckpointManifest manifest;
  manifest.set_job_id(job_id);
  manifest.set_step(step);
  // Every replica's microbatches count.
  const int64_t microbatches =
      static_cast<int64_t>(spec.train().microbatches()) * std::max(1, layout.data());
  manifest.set_data_position(
      DataPositionAtStep(step, microbatches, spec.train().microbatch_size()));
  if (train_windows > 0) {
    *manifest.mutable_epoch() = EpochAt(manifest.data_position(), train_windows);
  }
  manifest.mutable_rng()->set_seed(spec.train().seed());
  *manifest.mutable_spec() = spec;
  *manifest.mutable_layout() = layout;
  for (const pp::v1::CheckpointShard& shard : shards) *manifest.add_shards() = shard;
  manifest.set_created_unix(created_unix);
  return manifest;
}

}  // namespace pp::common
