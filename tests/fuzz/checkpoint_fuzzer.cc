// libFuzzer harness, structure-aware: common/checkpoint.h LoadCheckpoint and VerifyCheckpoint of
// a step folder built from the input, so that the fuzzer gets past the size and sha256 checks
// into the safetensors, slice-agreement and slice-assembly code.
//
// Input: one flags byte, then sections separated by kSeparator: the manifest (proto3 JSON of
// pp.v1.CheckpointManifest), then the bytes of its shards in manifest order. The harness writes
// manifest.json and the shards into <tmp>/step-3 and, before that, fixes up the manifest:
//   every shard: bytes and sha256 of its section (unless kKeepHashes);
//   kSyncSlices: the shard's slices from the slice.<name> entries of the section's safetensors
//     metadata (int64 values cast to int32 the way a writer's proto would hold them), so that the
//     manifest and the shard agree and loading reaches AssembleShardSlices;
//   kSyncTensors: the shard's tensor list from the section's tensors;
//   kFixHeader: format_version 1 and step 3;
//   kFilter: loads with a filter that wants only some tensors.
// Shard names that are not plain file names are kept in the manifest but never written.
#include <unistd.h>

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/checkpoint.h"
#include "common/proto_io.h"
#include "common/sha256.h"

namespace {

namespace fs = std::filesystem;
using namespace pp::common;

constexpr char kSeparator[] = "\n@@shard@@\n";
constexpr size_t kMaxShards = 4;
enum Flags : uint8_t {
  kSyncSlices = 1,
  kSyncTensors = 2,
  kFixHeader = 4,
  kFilter = 8,
  kKeepHashes = 16,
};

void Check(bool ok) {
  if (!ok) std::abort();
}

const std::string& StepFolder() {
  static const std::string* dir = [] {
    auto* d = new std::string(
        (fs::temp_directory_path() / ("pp-fuzz-checkpoint-" + std::to_string(getpid())) / "step-3")
            .string());
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(fs::path(StepFolder()).parent_path(), ec);
    });
    return d;
  }();
  return *dir;
}

bool PlainName(const std::string& name) {
  if (name.empty() || name.size() > 64 || name[0] == '.') return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) {
      return false;
    }
  }
  return true;
}

// The manifest's slices of one shard, from its safetensors metadata.
void SyncSlices(const SafetensorsFile& parsed, pp::v1::CheckpointShard* shard) {
  shard->clear_slices();
  const std::string prefix = SliceKey("");
  for (const auto& [key, value] : parsed.metadata) {
    if (!absl::StartsWith(key, prefix)) continue;
    std::vector<int64_t> n;
    for (absl::string_view word : absl::StrSplit(value, ' ', absl::SkipEmpty())) {
      int64_t v = 0;
      if (!absl::SimpleAtoi(word, &v)) return;
      n.push_back(v);
    }
    if (n.size() < 5) continue;
    pp::v1::TensorSlice* slice = shard->add_slices();
    slice->set_tensor(key.substr(prefix.size()));
    slice->set_dim(static_cast<int32_t>(n[0]));
    slice->set_parts(static_cast<int32_t>(n[1]));
    slice->set_offset(static_cast<int32_t>(n[2]));
    slice->set_length(static_cast<int32_t>(n[3]));
    for (size_t i = 4; i < n.size(); ++i) slice->add_full_shape(n[i]);
  }
}

// Plain, not atomic: no fsync per execution.
absl::Status WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return out ? absl::OkStatus() : absl::InternalError("cannot write " + path);
}

void CheckLoaded(const Checkpoint& checkpoint) {
  for (const auto& [name, tensor] : checkpoint.tensors) {
    absl::StatusOr<int64_t> n = NumElements(tensor.shape);
    Check(name == tensor.name && n.ok() && static_cast<size_t>(*n) == tensor.data.size());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t flags = data[0];
  std::vector<std::string> sections = absl::StrSplit(
      absl::string_view(reinterpret_cast<const char*>(data) + 1, size - 1), kSeparator);
  if (sections.size() > kMaxShards + 1) sections.resize(kMaxShards + 1);
  const std::string& dir = StepFolder();
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);

  std::string manifest_text = sections[0];
  pp::v1::CheckpointManifest manifest;
  if (JsonToMessage(sections[0], &manifest).ok()) {
    if (flags & kFixHeader) {
      manifest.set_format_version(1);
      manifest.set_step(3);
    }
    for (int i = 0; i < manifest.shards_size() && i + 1 < static_cast<int>(sections.size()); ++i) {
      pp::v1::CheckpointShard* shard = manifest.mutable_shards(i);
      const std::string& bytes = sections[i + 1];
      if (!(flags & kKeepHashes)) {
        shard->set_bytes(static_cast<int64_t>(bytes.size()));
        shard->set_sha256(Sha256Hex(bytes));
      }
      if (flags & (kSyncSlices | kSyncTensors)) {
        absl::StatusOr<SafetensorsFile> parsed = ParseSafetensors(bytes);
        if (parsed.ok() && (flags & kSyncSlices)) SyncSlices(*parsed, shard);
        if (parsed.ok() && (flags & kSyncTensors)) {
          shard->clear_tensors();
          for (const Tensor& t : parsed->tensors) shard->add_tensors(t.name);
        }
      }
      if (PlainName(shard->file())) {
        Check(WriteFile((fs::path(dir) / shard->file()).string(), bytes).ok());
      }
    }
    absl::StatusOr<std::string> json = MessageToJson(manifest, /*pretty=*/false);
    Check(json.ok());
    manifest_text = *json;
  }
  Check(WriteFile((fs::path(dir) / kManifestFile).string(), manifest_text).ok());

  TensorFilter wanted = nullptr;
  if (flags & kFilter) {
    wanted = [](const std::string& name) { return !name.empty() && name.back() % 2 == 0; };
  }
  absl::StatusOr<Checkpoint> loaded = LoadCheckpoint(dir, wanted);
  if (loaded.ok()) CheckLoaded(*loaded);
  absl::StatusOr<pp::v1::CheckpointManifest> verified = VerifyCheckpoint(dir);
  if (std::getenv("PP_FUZZ_VERBOSE") != nullptr) {  // seeds: how far does this input get?
    std::fprintf(stderr, "load: %s (%zu tensors); verify: %s\n", loaded.status().ToString().c_str(),
                 loaded.ok() ? loaded->tensors.size() : 0, verified.status().ToString().c_str());
  }
  if (loaded.ok() && !wanted) Check(verified.ok());
  return 0;
}
