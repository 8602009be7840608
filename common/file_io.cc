#include "common/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace pp::common {
namespace {

absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  int err = errno;
  std::string message = absl::StrCat(what, " ", path, ": ", std::strerror(err));
  return err == ENOENT ? absl::NotFoundError(message) : absl::InternalError(message);
}

std::string ParentDir(const std::string& path) {
  std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

absl::Status WriteAll(int fd, absl::string_view bytes, const std::string& path) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("cannot write", path);
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SyncDir(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("cannot open folder", path);
  int rc = ::fsync(fd);
  absl::Status status = rc == 0 ? absl::OkStatus() : ErrnoError("cannot fsync folder", path);
  ::close(fd);
  return status;
}

absl::Status MakeDirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec)
    return absl::InternalError(absl::StrCat("cannot create folder ", path, ": ", ec.message()));
  return absl::OkStatus();
}

absl::Status WriteFileAtomic(const std::string& path, absl::string_view bytes, unsigned mode) {
  // A unique temporary name per process and call, so concurrent writers never share one.
  static std::atomic<uint64_t> counter{0};
  std::string tmp = absl::StrCat(path, ".tmp.", ::getpid(), ".", counter.fetch_add(1));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, static_cast<mode_t>(mode));
  if (fd < 0) return ErrnoError("cannot create", tmp);
  absl::Status status = WriteAll(fd, bytes, tmp);
  if (status.ok() && ::fsync(fd) != 0) status = ErrnoError("cannot fsync", tmp);
  if (::close(fd) != 0 && status.ok()) status = ErrnoError("cannot close", tmp);
  if (status.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    status = ErrnoError(absl::StrCat("cannot rename ", tmp, " to"), path);
  }
  if (!status.ok()) {
    ::unlink(tmp.c_str());
    return status;
  }
  return SyncDir(ParentDir(path));
}

absl::StatusOr<std::string> ReadFile(const std::string& path, uint64_t max_bytes) {
  absl::StatusOr<RegularFile> file = RegularFile::Open(path);
  if (!file.ok()) return file.status();
  return ReadWhole(*file, max_bytes);
}

absl::StatusOr<std::string> ReadWhole(const RegularFile& file, uint64_t max_bytes) {
  if (file.size() > max_bytes) {
    return absl::DataLossError(absl::StrCat(file.path(), ": ", file.size(),
                                            " bytes exceeds the limit of ", max_bytes, " bytes"));
  }
  std::string bytes(static_cast<size_t>(file.size()), '\0');
  absl::Status status = file.ReadAt(0, bytes.size(), reinterpret_cast<uint8_t*>(bytes.data()));
  if (!status.ok()) return status;
  return bytes;
}

namespace {

const char* FileKind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a file";
}

// O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever.
constexpr int kReadFlags = O_RDONLY | O_NONBLOCK | O_CLOEXEC;

}  // namespace

absl::StatusOr<RegularFile> RegularFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), kReadFlags);
  if (fd < 0) return ErrnoError("cannot open", path);
  return Adopt(fd, path);
}

absl::StatusOr<RegularFile> RegularFile::OpenResolved(const std::string& resolved,
                                                      const std::string& path) {
  std::vector<std::string> parts = absl::StrSplit(resolved, '/', absl::SkipEmpty());
  if (resolved.empty() || resolved.front() != '/' || parts.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a file (resolved to \"",
                                                   resolved, "\")"));
  }
  // O_PATH: a folder is only walked through, it need not be readable.
  int dir = ::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  for (size_t i = 0; dir >= 0 && i + 1 < parts.size(); ++i) {
    const int next =
        ::openat(dir, parts[i].c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    ::close(dir);
    dir = next;
  }
  const int fd =
      dir < 0 ? -1 : ::openat(dir, parts.back().c_str(), kReadFlags | O_NOFOLLOW);
  const int err = errno;
  if (dir >= 0) ::close(dir);
  if (fd >= 0) return Adopt(fd, path);
  // A symlink: ELOOP as the last component, ENOTDIR before it (O_DIRECTORY | O_NOFOLLOW).
  if (err == ELOOP || err == ENOTDIR) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": a symbolic link or not a folder on the way to ", resolved,
        " (changed since it was resolved?)"));
  }
  errno = err;
  return ErrnoError("cannot open", path);
}

absl::StatusOr<RegularFile> RegularFile::Adopt(int fd, const std::string& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    absl::Status status = ErrnoError("cannot stat", path);
    ::close(fd);
    return status;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a regular file (", FileKind(st.st_mode), ")"));
  }
  return RegularFile(fd, path, static_cast<uint64_t>(st.st_size));
}

RegularFile::RegularFile(RegularFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)), size_(other.size_) {}

RegularFile& RegularFile::operator=(RegularFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
    size_ = other.size_;
  }
  return *this;
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status RegularFile::ReadAt(uint64_t offset, size_t n, uint8_t* out) const {
  size_t done = 0;
  while (done < n) {
    ssize_t got = ::pread(fd_, out + done, n - done, static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("cannot read", path_);
    }
    if (got == 0) {
      return absl::DataLossError(absl::StrCat(path_, ": file ended at byte ", offset + done,
                                              ", need ", offset + n, " (was ", size_,
                                              " bytes at open: truncated?)"));
    }
    done += static_cast<size_t>(got);
  }
  return absl::OkStatus();
}

}  // namespace pp::common
