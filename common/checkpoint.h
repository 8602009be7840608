// Checkpoint files: <root>/<job>/step-<N>/ holds one or more *.safetensors shards and
// manifest.json (proto3 JSON of pp.v1.CheckpointManifest, proto/pp/v1/checkpoint.proto). N counts
// completed optimizer steps, so a resume runs step N next.
// Contract: shards are written first (each atomically); CommitManifest writes manifest.json last,
// atomically (tmp, fsync, rename, fsync the folder) after checking every listed shard's size: a
// step folder without manifest.json is not a checkpoint. Loading verifies the manifest and every
// shard's bytes and sha256; a missing, torn or tampered shard is an error naming the file.
// Tensor names: the model's (worker/model: model::UnitTensors); AdamW moments under ExpAvgName /
// ExpAvgSqName.
// Layout independence: a tensor-parallel rank writes the slice it holds under the tensor's own
// name and says which slice in its shard's metadata (SliceKey); the manifest lists the same slices
// per shard (CheckpointShard.slices). Loading checks that both agree and assembles the slices of
// every shard into the whole named tensor, so any layout can load any checkpoint.
#ifndef PP_COMMON_CHECKPOINT_H_
#define PP_COMMON_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/safetensors.h"
#include "common/tensor_slice.h"
#include "pp/v1/checkpoint.pb.h"
#include "pp/v1/coordinator.pb.h"

namespace pp::common {

inline constexpr char kManifestFile[] = "manifest.json";
// A manifest lists shards and tensors: a few MiB even for large models. Anything larger is refused
// with DataLoss before it is read, so a corrupt or hostile file cannot exhaust memory.
inline constexpr uint64_t kMaxManifestBytes = uint64_t{64} << 20;

// "<root>/<job>/step-<step>".
std::string StepDir(const std::string& root, const std::string& job, int step);
// "rank-00003.safetensors": the conventional shard name of a rank.
std::string ShardFileName(int rank);
// "optim.exp_avg.<name>" and "optim.exp_avg_sq.<name>".
std::string ExpAvgName(const std::string& name);
std::string ExpAvgSqName(const std::string& name);

// Writes `tensors` as <step_dir>/<file> (creating step_dir) and returns its file, bytes, sha256
// and the slices its metadata declares (rank left 0 for the caller to fill). `file` must be a
// plain "*.safetensors" name; a slice entry that is malformed, does not fit its whole shape or
// names a tensor not in `tensors` is InvalidArgument; a tensor holding NaN or Inf is OutOfRange
// (naming it), and nothing is written.
absl::StatusOr<pp::v1::CheckpointShard> WriteShard(
    const std::string& step_dir, const std::string& file, const std::vector<Tensor>& tensors,
    const std::map<std::string, std::string>& metadata = {});

// The manifest entry of a shard as its rank reported it to the coordinator.
pp::v1::CheckpointShard ManifestShard(const pp::v1::CheckpointReport& report);

// Commits the checkpoint in `step_dir`: checks that every shard in `manifest` exists with the
// reported size (sha256 is checked on load), that shard names are distinct, then writes
// manifest.json atomically. Sets format_version to 1 when unset.
absl::Status CommitManifest(const std::string& step_dir,
                            const pp::v1::CheckpointManifest& manifest);

// Committed steps of a job (folders step-<N> holding manifest.json), newest first. A job without a
// folder has none (empty list, not an error).
absl::StatusOr<std::vector<int>> ListCommittedSteps(const std::string& root,
                                                    const std::string& job);

// A slice a shard holds: which part (TensorSlice) of a whole named tensor of full_shape. In the
// manifest it is a pp.v1.TensorSlice; in the shard's metadata, EncodeSlice's text (the file
// format: "dim parts offset length full_shape...").
struct ShardSlice {
  TensorSlice slice;
  std::vector<int64_t> full_shape;  // of the named tensor
};
// The shard metadata entry that marks tensor `name` as a slice: SliceKey(name) -> EncodeSlice.
std::string SliceKey(const std::string& name);
std::string EncodeSlice(const ShardSlice& slice);

struct Checkpoint {
  pp::v1::CheckpointManifest manifest;
  std::map<std::string, Tensor> tensors;  // every tensor of every shard, by name, whole
};

// Which tensors (by name) a reader wants; null: all.
using TensorFilter = std::function<bool(const std::string&)>;

// Reads and verifies one step folder (manifest, each shard's bytes + sha256, safetensors parse,
// no whole tensor in two shards, the manifest's tensor names and slices equal to the shard's).
// Slices of a tensor are assembled into the whole tensor; slices that overlap, leave gaps or
// disagree on the whole shape are an error naming the tensor. With `wanted`, only the wanted
// tensors are returned, and a shard whose manifest entry lists none of them is neither read nor
// hashed (its size is still checked): a rank reads only the shards that hold its tensors.
absl::StatusOr<Checkpoint> LoadCheckpoint(const std::string& step_dir,
                                          const TensorFilter& wanted = nullptr);

// The manifest of one step folder once every shard's bytes and sha256 match it; reads each shard
// once without keeping its tensors (the coordinator's check before it resumes from a step).
absl::StatusOr<pp::v1::CheckpointManifest> VerifyCheckpoint(const std::string& step_dir);

struct LatestManifest {
  pp::v1::CheckpointManifest manifest;
  std::vector<std::string> skipped;  // why each newer committed step was refused
};
// The newest committed step <= max_step (0: no bound) that verifies (VerifyCheckpoint); older
// ones are tried when a newer one is damaged. NotFound when there is none.
absl::StatusOr<LatestManifest> LatestVerifiedCheckpoint(const std::string& root,
                                                        const std::string& job, int max_step = 0);

// Keeps the newest `keep` committed steps and deletes older step folders (committed or torn).
// Uncommitted folders newer than the oldest kept step are left alone: they may be in progress.
absl::Status PruneCheckpoints(const std::string& root, const std::string& job, int keep);

}  // namespace pp::common

#endif  // PP_COMMON_CHECKPOINT_H_
