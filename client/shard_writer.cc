#include "client/shard_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_io.h"
#include "common/llmc_shard.h"

namespace pp::client {
namespace {

// Ids are buffered and written in pieces of about this size.
constexpr size_t kWriteBytes = 1 << 20;

absl::Status Errno(const std::string& path, absl::string_view what) {
  return absl::InternalError(absl::StrCat(path, ": ", what, ": ", std::strerror(errno)));
}

absl::Status WriteAll(int fd, const std::string& path, const char* data, size_t n, off_t offset) {
  while (n > 0) {
    ssize_t done = pwrite(fd, data, n, offset);
    if (done < 0 && errno == EINTR) continue;
    if (done <= 0) return Errno(path, "write");
    data += done;
    n -= static_cast<size_t>(done);
    offset += done;
  }
  return absl::OkStatus();
}

std::string Folder(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

ShardWriter::ShardWriter(std::string prefix, int64_t shard_tokens)
    : prefix_(std::move(prefix)), shard_tokens_(shard_tokens) {}

ShardWriter::~ShardWriter() {
  if (fd_ >= 0) {
    close(fd_);
    unlink(temp_.c_str());
  }
}

std::string ShardWriter::ShardName(int index) const {
  return absl::StrFormat("%s_%06d.bin", prefix_, index);
}

absl::Status ShardWriter::Open() {
  temp_ = ShardName(shards_) + ".tmp.XXXXXX";
  fd_ = mkstemp(temp_.data());
  if (fd_ < 0) return Errno(temp_, "create");
  // mkstemp makes the file 0600; a shard is data like any other.
  if (fchmod(fd_, 0644) != 0) return Errno(temp_, "chmod");
  in_shard_ = 0;
  return absl::OkStatus();
}

absl::Status ShardWriter::Flush() {
  // The body starts after the header, which Close writes once the count is known.
  off_t offset = common::kLlmcHeaderBytes + 2 * in_shard_ - static_cast<off_t>(buffer_.size());
  absl::Status s = WriteAll(fd_, temp_, buffer_.data(), buffer_.size(), offset);
  buffer_.clear();
  return s;
}

absl::Status ShardWriter::Close() {
  if (absl::Status s = Flush(); !s.ok()) return s;
  std::string header = common::LlmcHeader(in_shard_);
  if (absl::Status s = WriteAll(fd_, temp_, header.data(), header.size(), 0); !s.ok()) return s;
  if (fsync(fd_) != 0) return Errno(temp_, "fsync");
  int fd = fd_;
  fd_ = -1;
  if (close(fd) != 0) {
    unlink(temp_.c_str());
    return Errno(temp_, "close");
  }
  std::string name = ShardName(shards_);
  if (rename(temp_.c_str(), name.c_str()) != 0) {
    absl::Status s = Errno(name, "rename");
    unlink(temp_.c_str());
    return s;
  }
  ++shards_;
  return common::SyncDir(Folder(name));
}

absl::Status ShardWriter::Add(absl::Span<const int32_t> ids) {
  while (!ids.empty()) {
    if (fd_ < 0) {
      if (absl::Status s = Open(); !s.ok()) return s;
    }
    size_t n = static_cast<size_t>(
        std::min<int64_t>(static_cast<int64_t>(ids.size()), shard_tokens_ - in_shard_));
    for (size_t i = 0; i < n; ++i) {
      // llm.c's body: little-endian uint16.
      buffer_.push_back(static_cast<char>(ids[i] & 0xFF));
      buffer_.push_back(static_cast<char>((ids[i] >> 8) & 0xFF));
    }
    in_shard_ += static_cast<int64_t>(n);
    tokens_ += static_cast<int64_t>(n);
    ids.remove_prefix(n);
    if (in_shard_ == shard_tokens_) {
      if (absl::Status s = Close(); !s.ok()) return s;
    } else if (buffer_.size() >= kWriteBytes) {
      if (absl::Status s = Flush(); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

absl::Status ShardWriter::Finish() {
  return fd_ >= 0 && in_shard_ > 0 ? Close() : absl::OkStatus();
}

}  // namespace pp::client
