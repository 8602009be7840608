#include "client/checkpoint_arg.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/checkpoint.h"

namespace pp::client {

absl::StatusOr<std::string> ResolveCheckpointDir(const std::string& dir) {
  std::error_code ec;
  if (std::filesystem::exists(std::filesystem::path(dir) / common::kManifestFile, ec)) return dir;
  const std::filesystem::path job = std::filesystem::path(dir).lexically_normal();
  const std::filesystem::path named = job.filename().empty() ? job.parent_path() : job;
  absl::StatusOr<common::LatestManifest> latest =
      common::LatestVerifiedCheckpoint(named.parent_path().string(), named.filename().string());
  if (!latest.ok()) {
    return absl::NotFoundError(absl::StrCat(dir, ": not a checkpoint (no ", common::kManifestFile,
                                            ") nor a job folder with a committed step (",
                                            latest.status().message(), ")"));
  }
  return common::StepDir(named.parent_path().string(), named.filename().string(),
                         latest->manifest.step());
}

}  // namespace pp::client
