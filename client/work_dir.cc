#include "client/work_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_io.h"

namespace pp::client {
namespace {

absl::Status ErrnoError(absl::string_view what, const std::filesystem::path& path) {
  const int error = errno;  // before anything else may change it
  return absl::InternalError(absl::StrCat(what, " ", path.string(), ": ", std::strerror(error)));
}

// Creates `dir` 0700 unless something is there already; missing parents as MakeDirs makes them.
absl::Status MakePrivateDir(const std::filesystem::path& dir) {
  if (::mkdir(dir.c_str(), 0700) == 0 || errno == EEXIST) return absl::OkStatus();
  if (errno != ENOENT || !dir.has_parent_path()) return ErrnoError("cannot create folder", dir);
  if (absl::Status made = common::MakeDirs(dir.parent_path()); !made.ok()) return made;
  if (::mkdir(dir.c_str(), 0700) == 0 || errno == EEXIST) return absl::OkStatus();
  return ErrnoError("cannot create folder", dir);
}

// Whoever may write into the folder may swap the store, a checkpoint or a key of the run.
absl::Status CheckPrivate(const std::string& flag, const std::string& dir) {
  struct stat info;
  if (::stat(dir.c_str(), &info) != 0) return ErrnoError("cannot stat", dir);
  if (!S_ISDIR(info.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(flag, " is not a folder"));
  }
  if (info.st_uid != ::geteuid()) {
    return absl::FailedPreconditionError(absl::StrCat(
        flag, " is owned by uid ", info.st_uid, ", not by this user (uid ", ::geteuid(),
        "): its owner could read or swap the run's store, checkpoints and keys; give a folder "
        "of your own (a missing one is created with mode 0700)"));
  }
  if ((info.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s has mode %04o: other users may write into it and swap the run's store, checkpoints "
        "and keys; run chmod go-w %s, or give a folder of your own (a missing one is created "
        "with mode 0700)",
        flag, info.st_mode & 07777, dir));
  }
  return absl::OkStatus();
}

// `keep` created or checked; its real path.
absl::StatusOr<std::string> OpenKept(const std::string& keep) {
  std::filesystem::path dir = std::filesystem::path(keep).lexically_normal();
  if (!dir.has_filename()) dir = dir.parent_path();  // "a/b/" names folder "a/b"
  if (absl::Status made = MakePrivateDir(dir); !made.ok()) return made;
  // Checked at its real path, which the run then uses: a symlink swapped later changes nothing.
  std::error_code error;
  const std::string real = std::filesystem::canonical(dir, error).string();
  if (error) {
    return absl::InternalError(absl::StrCat("cannot resolve ", keep, ": ", error.message()));
  }
  const std::string flag = real == dir.string()
                               ? absl::StrCat("--data_dir=", keep)
                               : absl::StrCat("--data_dir=", keep, " (", real, ")");
  if (absl::Status safe = CheckPrivate(flag, real); !safe.ok()) return safe;
  return real;
}

}  // namespace

std::string TempRoot() {
  const char* tmp = std::getenv("TMPDIR");
  return tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
}

absl::StatusOr<WorkDir> WorkDir::Open(const std::string& keep) {
  if (!keep.empty()) {
    absl::StatusOr<std::string> real = OpenKept(keep);
    if (!real.ok()) return real.status();
    return WorkDir(*std::move(real), false);
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
