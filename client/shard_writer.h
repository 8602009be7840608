// The llm.c token shards `ppctl tokenize` writes (common/llmc_shard.h): PREFIX_000000.bin,
// PREFIX_000001.bin, ..., each exactly `shard_tokens` ids but the last.
// Contract: a shard appears under its final name only whole: it is written to a temporary name
// in the same folder (PREFIX_NNNNNN.bin.tmp.XXXXXX), fsynced, renamed, and the folder fsynced. An
// error or an interrupted run leaves at most that temporary file, never a short shard under a
// final name. Not thread-safe: one writer thread.
#ifndef PP_CLIENT_SHARD_WRITER_H_
#define PP_CLIENT_SHARD_WRITER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace pp::client {

class ShardWriter {
 public:
  // REQUIRES 1 <= shard_tokens <= common::kLlmcMaxTokens.
  ShardWriter(std::string prefix, int64_t shard_tokens);
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;
  // Removes the temporary file of an unfinished shard.
  ~ShardWriter();

  // Appends ids, closing each shard that fills. REQUIRES every id in [0, 65535].
  absl::Status Add(absl::Span<const int32_t> ids);
  // Closes the last shard (when it holds any id).
  absl::Status Finish();

  int shards() const { return shards_; }
  int64_t tokens() const { return tokens_; }
  // The name of shard `index`.
  std::string ShardName(int index) const;

 private:
  absl::Status Open();
  absl::Status Flush();
  absl::Status Close();

  const std::string prefix_;
  const int64_t shard_tokens_;
  int fd_ = -1;
  std::string temp_;
  std::string buffer_;
  int64_t in_shard_ = 0;
  int shards_ = 0;
  int64_t tokens_ = 0;
};

}  // namespace pp::client

#endif  // PP_CLIENT_SHARD_WRITER_H_
