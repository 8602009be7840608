#include "client/work_dir.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/file_io.h"

namespace pp::client {

std::string TempRoot() {
  const char* tmp = std::getenv("TMPDIR");
  return tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
}

absl::StatusOr<WorkDir> WorkDir::Open(const std::string& keep) {
  if (!keep.empty()) {
    if (absl::Status made = pp::common::MakeDirs(keep); !made.ok()) return made;
    return WorkDir(std::filesystem::absolute(keep).string(), false);
  }
  std::string pattern = TempRoot() + "/ppctl-up-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::InternalError(
        absl::StrCat("cannot create a temporary folder ", pattern, ": ", strerror(errno)));
  }
  return WorkDir(pattern, true);
}

WorkDir::WorkDir(WorkDir&& other) noexcept : path_(other.path_), remove_(other.remove_) {
  other.remove_ = false;
}

WorkDir::~WorkDir() {
  std::error_code ignored;
  if (remove_) std::filesystem::remove_all(path_, ignored);
}

}  // namespace pp::client
