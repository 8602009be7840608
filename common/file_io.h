// File helpers shared by checkpoints, safetensors and data.
// Contract: WriteFileAtomic either leaves `path` holding exactly `bytes` (written to a temporary
// name in the same folder, fsynced, renamed over `path`, folder fsynced) or leaves any previous
// `path` untouched and returns an error naming the file. Every read of a file named by a spec, a
// plan or a manifest goes through RegularFile (Open, or OpenResolved for a file under a root:
// common/path_roots.h OpenUnderRoots), which never blocks (a FIFO or a device opens at once) and
// refuses anything but a regular file. Nothing maps files: every read is a pread
// (RegularFile::ReadAt), so a file truncated under the reader is a DataLoss error, never a SIGBUS.
// Errors name the file and the errno text, never the file's bytes.
#ifndef PP_COMMON_FILE_IO_H_
#define PP_COMMON_FILE_IO_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pp::common {

// `mode`: the new file's permission bits (before the umask); 0600 for a secret, which is then
// never readable by others, not even for a moment.
absl::Status WriteFileAtomic(const std::string& path, absl::string_view bytes,
                             unsigned mode = 0644);
// The whole file, read (not mapped); DataLoss before any read when it holds over `max_bytes`.
absl::StatusOr<std::string> ReadFile(const std::string& path,
                                     uint64_t max_bytes = UINT64_MAX);
class RegularFile;
// ReadFile of a file already open.
absl::StatusOr<std::string> ReadWhole(const RegularFile& file, uint64_t max_bytes = UINT64_MAX);
// mkdir -p.
absl::Status MakeDirs(const std::string& path);
// fsync of a folder, so that a rename inside it survives a power cut.
absl::Status SyncDir(const std::string& path);

// A regular file open for reading (O_RDONLY | O_NONBLOCK | O_CLOEXEC), checked with fstat before
// any read. Open: NotFound when missing, InvalidArgument "PATH: not a regular file (a FIFO)" for a
// FIFO, folder, device or socket. Thread-safe: ReadAt is a pread, so readers share one object.
class RegularFile {
 public:
  static absl::StatusOr<RegularFile> Open(const std::string& path);
  // Opens `resolved`, an absolute path without symlinks or ".." (`path` as path_roots.h resolved
  // it), one component at a time with O_NOFOLLOW: a symlink put in after the resolution is
  // refused (InvalidArgument), not followed. Errors and path() name `path`.
  static absl::StatusOr<RegularFile> OpenResolved(const std::string& resolved,
                                                  const std::string& path);
  RegularFile(RegularFile&& other) noexcept;
  RegularFile& operator=(RegularFile&& other) noexcept;
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;
  ~RegularFile();

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  // The size at Open.
  uint64_t size() const { return size_; }
  // Exactly `n` bytes at `offset` into `out`; DataLoss naming the file when it ends early (it
  // shrank after Open).
  absl::Status ReadAt(uint64_t offset, size_t n, uint8_t* out) const;

 private:
  RegularFile(int fd, std::string path, uint64_t size)
      : fd_(fd), path_(std::move(path)), size_(size) {}
  // Takes `fd`: a RegularFile when fstat says it is one; closed otherwise.
  static absl::StatusOr<RegularFile> Adopt(int fd, const std::string& path);
  int fd_ = -1;
  std::string path_;
  uint64_t size_ = 0;
};

}  // namespace pp::common

#endif  // PP_COMMON_FILE_IO_H_
