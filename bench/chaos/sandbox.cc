#include "bench/chaos/sandbox.h"

#include <fcntl.h>
#include <sched.h>
#include <sqlite3.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace pp::chaos {
namespace {

absl::Status Errno(const std::string& what) {
  return absl::FailedPreconditionError(absl::StrCat(what, ": ", std::strerror(errno)));
}

bool WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  return static_cast<bool>(out.flush());
}

// Unprivileged: a user namespace mapping this uid and gid to root, and a mount namespace in it.
absl::Status EnterUserNamespace() {
  const uid_t uid = getuid();
  const gid_t gid = getgid();
  if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return Errno("unshare(user, mount)");
  if (!WriteFile("/proc/self/setgroups", "deny") ||
      !WriteFile("/proc/self/uid_map", absl::StrCat("0 ", uid, " 1")) ||
      !WriteFile("/proc/self/gid_map", absl::StrCat("0 ", gid, " 1"))) {
    return absl::FailedPreconditionError("cannot write the user namespace's id maps");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status EnterPrivateMounts() {
  if (unshare(CLONE_NEWNS) != 0) {
    const std::string as_is = std::strerror(errno);
    if (absl::Status user = EnterUserNamespace(); !user.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("no mount namespace of its own (", as_is, ") nor ", user.message()));
    }
  }
  // Mounts made here must not propagate back to the machine's namespace.
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return Errno("making / private");
  }
  return absl::OkStatus();
}

void ReexecUnderUnshare(char** argv) {
  constexpr char kMarker[] = "PP_CHAOS_UNDER_UNSHARE";
  if (std::getenv(kMarker) != nullptr) return;
  // The path, not /proc/self/exe: unshare would read that link as its own.
  std::error_code ec;
  std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) return;
  setenv(kMarker, "1", 1);
  std::vector<char*> args = {const_cast<char*>("unshare"), const_cast<char*>("-rm"),
                             const_cast<char*>("--"), self.data()};
  for (char** arg = argv + 1; *arg != nullptr; ++arg) args.push_back(*arg);
  args.push_back(nullptr);
  execvp("unshare", args.data());
}

absl::Status MountTmpfs(const std::string& dir, int64_t bytes) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  const std::string options = absl::StrCat("size=", bytes);
  if (mount("tmpfs", dir.c_str(), "tmpfs", 0, options.c_str()) != 0) {
    return Errno(absl::StrCat("mount -t tmpfs -o ", options, " ", dir));
  }
  return absl::OkStatus();
}

void Unmount(const std::string& dir) { umount2(dir.c_str(), MNT_DETACH); }

absl::StatusOr<int64_t> FillDisk(const std::string& dir) {
  const std::string path = dir + "/ballast";
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("open " + path);
  const std::vector<char> block(1 << 20, 'x');
  int64_t written = 0;
  while (true) {
    const ssize_t n = write(fd, block.data(), block.size());
    if (n > 0) {
      written += n;
      continue;
    }
    const int error = errno;
    close(fd);
    if (n < 0 && error == ENOSPC) return written;
    errno = error;
    return Errno("write " + path);
  }
}

void FreeDisk(const std::string& dir) {
  std::error_code ec;
  std::filesystem::remove(dir + "/ballast", ec);
}

absl::Status HoldSqliteLock(const std::string& db, absl::Duration hold) {
  sqlite3* handle = nullptr;
  if (sqlite3_open_v2(db.c_str(), &handle, SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK) {
    const std::string error = handle ? sqlite3_errmsg(handle) : "out of memory";
    sqlite3_close(handle);
    return absl::UnavailableError(absl::StrCat("open ", db, ": ", error));
  }
  sqlite3_busy_timeout(handle, 10000);
  absl::Status result;
  if (sqlite3_exec(handle, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr) != SQLITE_OK) {
    result = absl::UnavailableError(absl::StrCat("BEGIN EXCLUSIVE on ", db, ": ",
                                                 sqlite3_errmsg(handle)));
  } else {
    absl::SleepFor(hold);
    sqlite3_exec(handle, "COMMIT", nullptr, nullptr, nullptr);
  }
  sqlite3_close(handle);
  return result;
}

}  // namespace pp::chaos
