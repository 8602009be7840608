#include "common/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <set>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/file_io.h"
#include "common/proto_io.h"
#include "common/sha256.h"

namespace pp::common {
namespace {

namespace fs = std::filesystem;

constexpr char kStepPrefix[] = "step-";

// A shard name must stay inside its step folder.
absl::Status CheckShardName(const std::string& file) {
  if (file.empty() || file.find('/') != std::string::npos || file[0] == '.' ||
      !absl::EndsWith(file, ".safetensors")) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard file name \"", file, "\" must be a plain *.safetensors name"));
  }
  return absl::OkStatus();
}

// The step of a folder named step-<N>, or -1.
int ParseStepName(const std::string& name) {
  int step;
  if (!absl::StartsWith(name, kStepPrefix) ||
      !absl::SimpleAtoi(absl::string_view(name).substr(sizeof(kStepPrefix) - 1), &step) ||
      absl::StrCat(kStepPrefix, step) != name) {  // refuses "step-007", "step-+7"
    return -1;
  }
  return step;
}

// Every step-<N> folder of a job with whether it is committed.
absl::StatusOr<std::vector<std::pair<int, bool>>> ListStepDirs(const std::string& root,
                                                               const std::string& job) {
  std::vector<std::pair<int, bool>> steps;
  fs::path job_dir = fs::path(root) / job;
  std::error_code ec;
  if (!fs::exists(job_dir, ec)) return steps;
  for (fs::directory_iterator it(job_dir, ec), end; !ec && it != end; it.increment(ec)) {
    // Per-entry checks have their own error code: a missing manifest is an answer, not an error.
    std::error_code entry_ec;
    int step = ParseStepName(it->path().filename().string());
    if (step < 0 || !it->is_directory(entry_ec)) continue;
    steps.emplace_back(step, fs::is_regular_file(it->path() / kManifestFile, entry_ec));
  }
  if (ec) {
    return absl::InternalError(absl::StrCat("cannot list ", job_dir.string(), ": ", ec.message()));
  }
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

absl::StatusOr<pp::v1::CheckpointManifest> ReadManifest(const std::string& step_dir) {
  std::string path = (fs::path(step_dir) / kManifestFile).string();
  absl::StatusOr<std::string> text = ReadFile(path, kMaxManifestBytes);
  if (!text.ok()) return text.status();
  pp::v1::CheckpointManifest manifest;
  absl::Status parsed = JsonToMessage(*text, &manifest);
  if (!parsed.ok()) {
    return absl::DataLossError(absl::StrCat(path, ": bad manifest: ", parsed.message()));
  }
  if (manifest.format_version() != 1) {
    return absl::DataLossError(
        absl::StrCat(path, ": unsupported format_version ", manifest.format_version()));
  }
  if (manifest.shards().empty()) return absl::DataLossError(absl::StrCat(path, ": no shards"));
  int folder_step = ParseStepName(fs::path(step_dir).filename().string());
  if (folder_step >= 0 && folder_step != manifest.step()) {
    return absl::DataLossError(
        absl::StrCat(path, ": manifest is for step ", manifest.step(), ", not ", folder_step));
  }
  return manifest;
}

absl::Status CheckShard(const std::string& step_dir, const pp::v1::CheckpointShard& shard) {
  if (absl::Status name = CheckShardName(shard.file()); !name.ok()) return name;
  std::string path = (fs::path(step_dir) / shard.file()).string();
  std::error_code ec;
  uintmax_t size = fs::file_size(path, ec);
  if (ec) return absl::NotFoundError(absl::StrCat("shard ", path, " is missing: ", ec.message()));
  if (static_cast<int64_t>(size) != shard.bytes()) {
    return absl::DataLossError(
        absl::StrCat("shard ", path, " has ", size, " bytes, the manifest says ", shard.bytes()));
  }
  return absl::OkStatus();
}

std::string ShardPath(const std::string& step_dir, const pp::v1::CheckpointShard& shard) {
  return (fs::path(step_dir) / shard.file()).string();
}

absl::Status CheckDigest(const std::string& path, const std::string& sha,
                         const pp::v1::CheckpointShard& shard) {
  if (sha == shard.sha256()) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat("shard ", path, " is corrupt: sha256 ", sha,
                                          ", the manifest says ", shard.sha256()));
}

// The shard's bytes, read with pread (never mapped: a shard truncated under the reader is DataLoss,
// not a SIGBUS), once its size and sha256 match the manifest.
absl::StatusOr<std::string> ReadVerifiedShard(const std::string& step_dir,
                                              const pp::v1::CheckpointShard& shard) {
  if (absl::Status checked = CheckShard(step_dir, shard); !checked.ok()) return checked;
  const std::string path = ShardPath(step_dir, shard);
  absl::StatusOr<std::string> bytes = ReadFile(path, static_cast<uint64_t>(shard.bytes()));
  if (!bytes.ok()) return bytes.status();
  if (absl::Status s = CheckDigest(path, Sha256Hex(*bytes), shard); !s.ok()) return s;
  return bytes;
}

// The same checks, streaming: constant memory, for verification without loading.
absl::Status VerifyShard(const std::string& step_dir, const pp::v1::CheckpointShard& shard) {
  if (absl::Status checked = CheckShard(step_dir, shard); !checked.ok()) return checked;
  const std::string path = ShardPath(step_dir, shard);
  absl::StatusOr<std::string> sha = Sha256File(path);
  if (!sha.ok()) return sha.status();
  return CheckDigest(path, *sha, shard);
}

}  // namespace

std::string StepDir(const std::string& root, const std::string& job, int step) {
  return absl::StrCat(root, "/", job, "/", kStepPrefix, step);
}

std::string ShardFileName(int rank) { return absl::StrFormat("rank-%05d.safetensors", rank); }

std::string ExpAvgName(const std::string& name) { return absl::StrCat("optim.exp_avg.", name); }

std::string ExpAvgSqName(const std::string& name) {
  return absl::StrCat("optim.exp_avg_sq.", name);
}

std::string SliceKey(const std::string& name) { return absl::StrCat("slice.", name); }

std::string EncodeSlice(const ShardSlice& shard_slice) {
  const TensorSlice& slice = shard_slice.slice;
  return absl::StrCat(slice.dim, " ", slice.parts, " ", slice.offset, " ", slice.length, " ",
                      absl::StrJoin(shard_slice.full_shape, " "));
}

namespace {

absl::StatusOr<ShardSlice> DecodeSlice(const std::string& text, const std::string& where) {
  auto malformed = [&] {
    return absl::DataLossError(absl::StrCat(where, ": malformed slice \"", text, "\""));
  };
  std::vector<int64_t> numbers;  // dim parts offset length full_shape...
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(word, &n) || n < 0) return malformed();
    numbers.push_back(n);
  }
  if (numbers.size() < 5) return malformed();
  // Every number is checked in int64 before the int casts (the slice type and the assembler work
  // in int), and offset + length is summed in int64, so no value can wrap around.
  const bool dims_fit_int = std::all_of(numbers.begin(), numbers.end(), [](int64_t n) {
    return n <= std::numeric_limits<int>::max();
  });
  const int64_t dim = numbers[0], parts = numbers[1], offset = numbers[2], length = numbers[3];
  const int64_t rank = static_cast<int64_t>(numbers.size()) - 4;
  const int64_t extent = dim < rank ? numbers[4 + dim] : 0;
  if (!dims_fit_int || parts < 1 || extent % parts != 0 || length < 1 ||
      offset + length > extent / parts) {
    return absl::DataLossError(absl::StrCat(where, ": slice \"", text, "\" does not fit"));
  }
  ShardSlice shard_slice;
  shard_slice.full_shape.assign(numbers.begin() + 4, numbers.end());
  shard_slice.slice = TensorSlice{.dim = static_cast<int>(dim),
                                  .parts = static_cast<int>(parts),
                                  .offset = static_cast<int>(offset),
                                  .length = static_cast<int>(length)};
  return shard_slice;
}

// The manifest's form of a slice.
pp::v1::TensorSlice SliceProto(const std::string& tensor, const ShardSlice& shard_slice) {
  pp::v1::TensorSlice proto;
  proto.set_tensor(tensor);
  proto.set_dim(shard_slice.slice.dim);
  proto.set_parts(shard_slice.slice.parts);
  proto.set_offset(shard_slice.slice.offset);
  proto.set_length(shard_slice.slice.length);
  proto.mutable_full_shape()->Assign(shard_slice.full_shape.begin(), shard_slice.full_shape.end());
  return proto;
}

// The slices a shard's metadata declares, by tensor name, each checked to fit its whole shape.
absl::StatusOr<std::map<std::string, ShardSlice>> MetadataSlices(
    const std::map<std::string, std::string>& metadata, const std::string& where) {
  std::map<std::string, ShardSlice> slices;
  const std::string prefix = SliceKey("");
  for (const auto& [key, value] : metadata) {
    if (!absl::StartsWith(key, prefix)) continue;
    absl::StatusOr<ShardSlice> slice = DecodeSlice(value, where);
    if (!slice.ok()) return slice.status();
    slices.emplace(key.substr(prefix.size()), *std::move(slice));
  }
  return slices;
}

// The slices of a shard's metadata, once the manifest lists exactly the same ones.
absl::StatusOr<std::map<std::string, ShardSlice>> ManifestAgreedSlices(
    const pp::v1::CheckpointShard& shard, const std::map<std::string, std::string>& metadata,
    const std::string& where) {
  absl::StatusOr<std::map<std::string, ShardSlice>> slices = MetadataSlices(metadata, where);
  if (!slices.ok()) return slices.status();
  std::map<std::string, std::string> in_metadata, in_manifest;  // tensor -> slice, serialized
  for (const auto& [name, slice] : *slices) {
    in_metadata[name] = SliceProto(name, slice).SerializeAsString();
  }
  for (const pp::v1::TensorSlice& slice : shard.slices()) {
    in_manifest[slice.tensor()] = slice.SerializeAsString();
  }
  if (in_metadata != in_manifest) {
    return absl::DataLossError(absl::StrCat(where, ": the manifest lists ", in_manifest.size(),
                                            " tensor slices that differ from the ",
                                            in_metadata.size(), " of the shard's metadata"));
  }
  return slices;
}

// A checkpoint is what a job resumes from: one holding NaN or Inf would only resume into the
// same failure, and would replace a good one when the older are pruned.
absl::Status CheckFinite(const std::string& path, const std::vector<Tensor>& tensors) {
  for (const Tensor& tensor : tensors) {
    for (size_t i = 0; i < tensor.data.size(); ++i) {
      if (!std::isfinite(tensor.data[i])) {
        return absl::OutOfRangeError(absl::StrCat(path, ": tensor \"", tensor.name,
                                                  "\" holds a non-finite value ", tensor.data[i],
                                                  " at element ", i, "; shard not written"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<pp::v1::CheckpointShard> WriteShard(
    const std::string& step_dir, const std::string& file, const std::vector<Tensor>& tensors,
    const std::map<std::string, std::string>& metadata) {
  if (absl::Status name = CheckShardName(file); !name.ok()) return name;
  std::string path = (fs::path(step_dir) / file).string();
  absl::StatusOr<std::map<std::string, ShardSlice>> slices = MetadataSlices(metadata, path);
  if (!slices.ok()) return absl::InvalidArgumentError(slices.status().message());
  std::set<std::string> names;
  for (const Tensor& tensor : tensors) names.insert(tensor.name);
  for (const auto& [name, slice] : *slices) {
    if (names.count(name) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": metadata names a slice of \"", name,
                       "\", a tensor not in the shard"));
    }
  }
  if (absl::Status finite = CheckFinite(path, tensors); !finite.ok()) return finite;
  absl::StatusOr<std::string> bytes = SerializeSafetensors(tensors, metadata);
  if (!bytes.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", bytes.status().message()));
  }
  if (absl::Status made = MakeDirs(step_dir); !made.ok()) return made;
  if (absl::Status written = WriteFileAtomic(path, *bytes); !written.ok()) return written;
  pp::v1::CheckpointShard shard;
  shard.set_file(file);
  shard.set_bytes(static_cast<int64_t>(bytes->size()));
  shard.set_sha256(Sha256Hex(*bytes));
  for (const auto& [name, slice] : *slices) *shard.add_slices() = SliceProto(name, slice);
  for (const Tensor& tensor : tensors) shard.add_tensors(tensor.name);
  return shard;
}

pp::v1::CheckpointShard ManifestShard(const pp::v1::CheckpointReport& report) {
  pp::v1::CheckpointShard shard;
  shard.set_file(report.shard());
  shard.set_bytes(report.bytes());
  shard.set_sha256(report.sha256());
  shard.set_rank(report.rank());
  *shard.mutable_slices() = report.slices();
  *shard.mutable_tensors() = report.tensors();
  return shard;
}

absl::Status CommitManifest(const std::string& step_dir,
                            const pp::v1::CheckpointManifest& manifest) {
  if (manifest.shards().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(step_dir, ": a manifest needs shards"));
  }
  std::set<std::string> files;
  for (const pp::v1::CheckpointShard& shard : manifest.shards()) {
    if (!files.insert(shard.file()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(step_dir, ": shard ", shard.file(), " is listed twice"));
    }
    if (absl::Status checked = CheckShard(step_dir, shard); !checked.ok()) return checked;
  }
  pp::v1::CheckpointManifest committed = manifest;
  if (committed.format_version() == 0) committed.set_format_version(1);
  absl::StatusOr<std::string> json = MessageToJson(committed, /*pretty=*/true);
  if (!json.ok()) return json.status();
  return WriteFileAtomic((fs::path(step_dir) / kManifestFile).string(), *json);
}

absl::StatusOr<std::vector<int>> ListCommittedSteps(const std::string& root,
                                                    const std::string& job) {
  absl::StatusOr<std::vector<std::pair<int, bool>>> dirs = ListStepDirs(root, job);
  if (!dirs.ok()) return dirs.status();
  std::vector<int> steps;
  for (const auto& [step, committed] : *dirs) {
    if (committed) steps.push_back(step);
  }
  return steps;
}

namespace {

struct SlicePiece {
  ShardSlice slice;
  Tensor tensor;  // the held part
  std::string file;
};

// The slices of one tensor -> the whole tensor (AssembleSlices); every element covered exactly
// once, every piece the same whole shape and sliced dimension.
absl::StatusOr<Tensor> AssembleShardSlices(const std::string& step_dir, const std::string& name,
                                           std::vector<SlicePiece>& pieces) {
  auto bad = [&](const std::string& why) {
    return absl::DataLossError(absl::StrCat(step_dir, ": slices of tensor \"", name, "\" ", why));
  };
  const std::vector<int64_t>& full = pieces.front().slice.full_shape;
  const int dim = pieces.front().slice.slice.dim;
  // Before the whole is allocated: the pieces' rows along `dim` add up to exactly the whole's
  // extent, so the whole is no larger than the shards that hold it (a manifest cannot make this
  // allocate more than was read).
  int64_t rows = 0;
  std::vector<SliceValues> values;
  for (SlicePiece& piece : pieces) {
    const TensorSlice& s = piece.slice.slice;
    std::vector<int64_t> held = full;
    held[dim] = static_cast<int64_t>(s.parts) * s.length;
    if (piece.slice.full_shape != full || s.dim != dim || piece.tensor.shape != held) {
      return bad(absl::StrCat("disagree on their shapes (", piece.file, ")"));
    }
    rows += held[dim];
    values.push_back({s, std::move(piece.tensor.data)});
  }
  if (rows != full[dim]) return bad("overlap or leave gaps");
  if (std::find(full.begin(), full.end(), 0) != full.end()) {
    return bad("have an empty or too large whole shape");
  }
  absl::StatusOr<std::vector<float>> data =
      AssembleSlices(name, std::vector<int>(full.begin(), full.end()), values, Overlap::kRefused);
  if (!data.ok()) return absl::DataLossError(absl::StrCat(step_dir, ": ", data.status().message()));
  Tensor whole;
  whole.name = name;
  whole.shape = full;
  whole.data = *std::move(data);
  return whole;
}

// A manifest entry that lists its shard's tensors must list exactly those the file holds.
absl::Status CheckListedTensors(const pp::v1::CheckpointShard& shard,
                                const SafetensorsFile& parsed, const std::string& path) {
  if (shard.tensors().empty()) return absl::OkStatus();
  std::set<std::string> listed(shard.tensors().begin(), shard.tensors().end()), held;
  for (const Tensor& tensor : parsed.tensors) held.insert(tensor.name);
  if (listed == held) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(path, ": holds ", held.size(),
                                          " tensors, the manifest lists ", listed.size(),
                                          " others"));
}

}  // namespace

absl::StatusOr<Checkpoint> LoadCheckpoint(const std::string& step_dir,
                                          const TensorFilter& wanted) {
  absl::StatusOr<pp::v1::CheckpointManifest> manifest = ReadManifest(step_dir);
  if (!manifest.ok()) return manifest.status();
  Checkpoint checkpoint;
  std::map<std::string, std::string> owner;  // tensor name -> shard file
  std::map<std::string, std::vector<SlicePiece>> sliced;
  for (const pp::v1::CheckpointShard& shard : manifest->shards()) {
    if (wanted && !shard.tensors().empty() &&
        std::none_of(shard.tensors().begin(), shard.tensors().end(), wanted)) {
      if (absl::Status checked = CheckShard(step_dir, shard); !checked.ok()) return checked;
      continue;  // holds nothing wanted: not read
    }
    absl::StatusOr<std::string> bytes = ReadVerifiedShard(step_dir, shard);
    if (!bytes.ok()) return bytes.status();
    absl::StatusOr<SafetensorsFile> parsed = ParseSafetensors(*bytes, ShardPath(step_dir, shard));
    if (!parsed.ok()) return parsed.status();
    absl::StatusOr<std::map<std::string, ShardSlice>> slices =
        ManifestAgreedSlices(shard, parsed->metadata, ShardPath(step_dir, shard));
    if (!slices.ok()) return slices.status();
    if (absl::Status s = CheckListedTensors(shard, *parsed, ShardPath(step_dir, shard)); !s.ok()) {
      return s;
    }
    for (Tensor& tensor : parsed->tensors) {
      if (wanted && !wanted(tensor.name)) continue;
      if (auto it = slices->find(tensor.name); it != slices->end()) {
        const std::string name = tensor.name;
        sliced[name].push_back({it->second, std::move(tensor), shard.file()});
        continue;
      }
      auto [it, inserted] = owner.emplace(tensor.name, shard.file());
      if (!inserted) {
        return absl::DataLossError(absl::StrCat(step_dir, ": tensor \"", tensor.name,
                                                "\" is in both ", it->second, " and ",
                                                shard.file()));
      }
      std::string name = tensor.name;
      checkpoint.tensors.emplace(std::move(name), std::move(tensor));
    }
  }
  for (auto& [name, pieces] : sliced) {
    if (auto it = owner.find(name); it != owner.end()) {
      return absl::DataLossError(absl::StrCat(step_dir, ": tensor \"", name, "\" is whole in ",
                                              it->second, " and sliced in ", pieces[0].file));
    }
    absl::StatusOr<Tensor> whole = AssembleShardSlices(step_dir, name, pieces);
    if (!whole.ok()) return whole.status();
    checkpoint.tensors.emplace(name, *std::move(whole));
  }
  checkpoint.manifest = *std::move(manifest);
  return checkpoint;
}

absl::StatusOr<pp::v1::CheckpointManifest> VerifyCheckpoint(const std::string& step_dir) {
  absl::StatusOr<pp::v1::CheckpointManifest> manifest = ReadManifest(step_dir);
  if (!manifest.ok()) return manifest.status();
  for (const pp::v1::CheckpointShard& shard : manifest->shards()) {
    if (absl::Status verified = VerifyShard(step_dir, shard); !verified.ok()) return verified;
  }
  return manifest;
}

namespace {

// The newest committed step <= max_step (0: no bound) for which `try_step` succeeds.
template <typename T>
absl::StatusOr<T> NewestUsable(
    const std::string& root, const std::string& job, int max_step,
    std::vector<std::string>& skipped,
    const std::function<absl::StatusOr<T>(const std::string&)>& try_step) {
  absl::StatusOr<std::vector<int>> steps = ListCommittedSteps(root, job);
  if (!steps.ok()) return steps.status();
  for (int step : *steps) {
    if (max_step > 0 && step > max_step) continue;
    absl::StatusOr<T> usable = try_step(StepDir(root, job, step));
    if (usable.ok()) return usable;
    skipped.push_back(std::string(usable.status().message()));
  }
  std::string where = absl::StrCat(root, "/", job);
  if (max_step > 0) absl::StrAppend(&where, " at or before step ", max_step);
  return absl::NotFoundError(absl::StrCat("no loadable committed checkpoint in ", where,
                                          skipped.empty() ? "" : ": ",
                                          absl::StrJoin(skipped, "; ")));
}

}  // namespace

absl::StatusOr<LatestManifest> LatestVerifiedCheckpoint(const std::string& root,
                                                        const std::string& job, int max_step) {
  LatestManifest latest;
  absl::StatusOr<pp::v1::CheckpointManifest> manifest = NewestUsable<pp::v1::CheckpointManifest>(
      root, job, max_step, latest.skipped,
      [](const std::string& dir) { return VerifyCheckpoint(dir); });
  if (!manifest.ok()) return manifest.status();
  latest.manifest = *std::move(manifest);
  return latest;
}

absl::Status PruneCheckpoints(const std::string& root, const std::string& job, int keep) {
  if (keep < 1) {
    return absl::InvalidArgumentError(absl::StrCat("keep must be >= 1, got ", keep));
  }
  absl::StatusOr<std::vector<std::pair<int, bool>>> dirs = ListStepDirs(root, job);
  if (!dirs.ok()) return dirs.status();
  int kept = 0;
  int oldest_kept = -1;
  for (const auto& [step, committed] : *dirs) {
    if (committed && kept < keep) {
      ++kept;
      oldest_kept = step;
    }
  }
  if (kept < keep) return absl::OkStatus();  // nothing old enough to delete
  for (const auto& [step, committed] : *dirs) {
    if (step >= oldest_kept) continue;
    std::error_code ec;
    std::string dir = StepDir(root, job, step);
    // The manifest goes first: a half-deleted folder must never look committed.
    fs::remove(fs::path(dir) / kManifestFile, ec);
    if (!ec) fs::remove_all(dir, ec);
    if (ec) return absl::InternalError(absl::StrCat("cannot delete ", dir, ": ", ec.message()));
  }
  return SyncDir((fs::path(root) / job).string());
}

}  // namespace pp::common
