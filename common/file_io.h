// File helpers shared by checkpoints, safetensors and data.
// Contract: WriteFileAtomic either leaves `path` holding exactly `bytes` (written to a temporary
// name in the same folder, fsynced, renamed over `path`, folder fsynced) or leaves any previous
// `path` untouched and returns an error naming the file. MappedFile maps a file read-only so large
// token files and shards are never copied into memory. Errors name the file and the errno text.
#ifndef PP_COMMON_FILE_IO_H_
#define PP_COMMON_FILE_IO_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pp::common {

absl::Status WriteFileAtomic(const std::string& path, absl::string_view bytes);
absl::StatusOr<std::string> ReadFile(const std::string& path);
// mkdir -p.
absl::Status MakeDirs(const std::string& path);
// fsync of a folder, so that a rename inside it survives a power cut.
absl::Status SyncDir(const std::string& path);

// A read-only memory map of a whole file (an empty file maps to an empty view).
class MappedFile {
 public:
  static absl::StatusOr<MappedFile> Open(const std::string& path);
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  absl::string_view view() const {
    return absl::string_view(reinterpret_cast<const char*>(data_), size_);
  }

 private:
  MappedFile(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace pp::common

#endif  // PP_COMMON_FILE_IO_H_
