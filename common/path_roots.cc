#include "common/path_roots.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pp::common {
namespace {

namespace fs = std::filesystem;

// The absolute, symlink-free form of `path`; empty when it cannot be resolved.
fs::path Resolve(const std::string& path) {
  std::error_code error;
  fs::path resolved = fs::weakly_canonical(fs::absolute(path, error), error);
  if (error) return {};
  return resolved.lexically_normal();
}

bool Inside(const fs::path& path, const fs::path& root) {
  auto p = path.begin();
  for (auto r = root.begin(); r != root.end(); ++r, ++p) {
    if (r->empty()) continue;  // the trailing "" of "/a/b/"
    if (p == path.end() || *p != *r) return false;
  }
  return true;
}

// CheckUnderRoots of `path`, already resolved.
absl::Status CheckResolved(absl::string_view field, const std::string& path,
                           const fs::path& resolved, const std::vector<std::string>& roots,
                           absl::string_view roots_flag) {
  if (roots.empty()) return absl::OkStatus();
  if (!resolved.empty()) {
    for (const std::string& root : roots) {
      const fs::path r = Resolve(root);
      if (!r.empty() && Inside(resolved, r)) return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(field, " \"", path, "\" is outside the allowed --",
                                                 roots_flag, " (", absl::StrJoin(roots, ", "),
                                                 ")"));
}

}  // namespace

absl::Status CheckUnderRoots(absl::string_view field, const std::string& path,
                             const std::vector<std::string>& roots, absl::string_view roots_flag) {
  if (roots.empty()) return absl::OkStatus();
  return CheckResolved(field, path, path.empty() ? fs::path() : Resolve(path), roots, roots_flag);
}

absl::StatusOr<RegularFile> OpenUnderRoots(absl::string_view field, const std::string& path,
                                           const std::vector<std::string>& roots,
                                           absl::string_view roots_flag) {
  const fs::path resolved = path.empty() ? fs::path() : Resolve(path);
  if (absl::Status inside = CheckResolved(field, path, resolved, roots, roots_flag);
      !inside.ok()) {
    return inside;
  }
  absl::StatusOr<RegularFile> file = RegularFile::OpenResolved(resolved.string(), path);
  if (file.ok()) return file;
  return absl::Status(file.status().code(), absl::StrCat(field, ": ", file.status().message()));
}

}  // namespace pp::common
