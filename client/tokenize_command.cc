// `ppctl tokenize --tokenizer=DIR OUT_PREFIX FILES...`: text files to llm.c token shards
// (docs/cli.md). Each file is one document, preceded by <|endoftext|> as llm.c's fineweb.py does.
// The main thread reads the files in chunks cut on line boundaries, --threads workers encode them,
// and the main thread writes the results in input order: the shards are the same bytes for any
// thread count.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/command.h"
#include "client/shard_writer.h"
#include "common/exit_code.h"
#include "common/file_io.h"
#include "common/llmc_shard.h"
#include "common/tokenizer.h"

ABSL_DECLARE_FLAG(std::string, tokenizer);  // client/tokenizer_arg.cc
ABSL_DECLARE_FLAG(int32_t, threads);        // client/train_command.cc
ABSL_FLAG(int64_t, shard_tokens, 100'000'000,
          "tokenize: tokens per output shard (llm.c's fineweb.py shard size)");

namespace pp::client {
namespace {

// A document is cut into chunks of about this size to be encoded in parallel.
constexpr size_t kChunkBytes = 1 << 20;
constexpr size_t kReadBytes = 1 << 20;

struct Chunk {
  int64_t seq = 0;
  size_t file = 0;
  bool first = false;  // the document's first chunk: <|endoftext|> goes before it
  bool last = false;   // the document's last chunk
  std::string text;
};

struct Result {
  std::vector<int32_t> ids;
  size_t file = 0;
  bool last = false;
  size_t bytes = 0;
};

// A byte that ends and starts a pre-token around a newline (tokenizer.h SplitsAfterNewlines).
bool Plain(char c) { return c > ' ' && c < 0x7F; }

// Where `text` may be cut, at or after `from`: just after a "\n" between two plain bytes; npos
// when no such place is in the text yet.
size_t CutPoint(const std::string& text, size_t from) {
  for (size_t i = std::max<size_t>(from, 1); i + 1 < text.size(); ++i) {
    i = text.find('\n', i);
    if (i == std::string::npos || i + 1 >= text.size()) return std::string::npos;
    if (Plain(text[i - 1]) && Plain(text[i + 1])) return i + 1;
  }
  return std::string::npos;
}

// One input: a regular file or stdin ("-"), read in pieces.
class Source {
 public:
  static absl::StatusOr<Source> Open(const std::string& path) {
    if (path == "-") return Source(path, std::nullopt);
    absl::StatusOr<common::RegularFile> file = common::RegularFile::Open(path);
    if (!file.ok()) return file.status();
    return Source(path, std::move(*file));
  }
  // Appends up to kReadBytes to `out`; false at the end.
  absl::StatusOr<bool> Read(std::string* out) {
    size_t old = out->size();
    // Sized to what a file has left: most documents are far below kReadBytes, and the bytes
    // resize zeroes are not free.
    size_t got = file_.has_value()
                     ? static_cast<size_t>(std::min<uint64_t>(kReadBytes, file_->size() - offset_))
                     : kReadBytes;
    out->resize(old + got);
    if (file_.has_value()) {
      absl::Status s = file_->ReadAt(offset_, got, reinterpret_cast<uint8_t*>(&(*out)[old]));
      if (!s.ok()) return s;
    } else {
      ssize_t n;
      do n = read(0, &(*out)[old], kReadBytes);
      while (n < 0 && errno == EINTR);
      if (n < 0) return absl::InternalError(absl::StrCat(path_, ": read: ", strerror(errno)));
      got = static_cast<size_t>(n);
    }
    out->resize(old + got);
    offset_ += got;
    return got > 0;
  }

 private:
  Source(std::string path, std::optional<common::RegularFile> file)
      : path_(std::move(path)), file_(std::move(file)) {}
  std::string path_;
  std::optional<common::RegularFile> file_;
  uint64_t offset_ = 0;
};

// Chunks in, results out in any order; Take hands them back in sequence order.
class EncodePool {
 public:
  EncodePool(const common::Tokenizer& tokenizer, int threads) : tokenizer_(tokenizer) {
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { Work(); });
  }
  ~EncodePool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = true;
      queue_.clear();  // after an error: nobody takes the results
    }
    ready_.notify_all();
    for (std::thread& t : workers_) t.join();
  }
  void Submit(Chunk chunk) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(chunk));
    }
    ready_.notify_one();
  }
  // The result of chunk `seq`, waiting for it when `wait`.
  std::optional<Result> Take(int64_t seq, bool wait) {
    std::unique_lock<std::mutex> lock(mu_);
    if (wait) done_.wait(lock, [&] { return results_.count(seq) > 0; });
    auto it = results_.find(seq);
    if (it == results_.end()) return std::nullopt;
    Result r = std::move(it->second);
    results_.erase(it);
    return r;
  }

 private:
  void Work() {
    for (;;) {
      Chunk chunk;
      {
        std::unique_lock<std::mutex> lock(mu_);
        ready_.wait(lock, [&] { return closed_ || !queue_.empty(); });
        if (queue_.empty()) return;
        chunk = std::move(queue_.front());
        queue_.pop_front();
      }
      Result r{{}, chunk.file, chunk.last, chunk.text.size()};
      if (chunk.first) r.ids.push_back(*tokenizer_.end_of_text());
      std::vector<int32_t> ids = tokenizer_.Encode(chunk.text);
      r.ids.insert(r.ids.end(), ids.begin(), ids.end());
      {
        std::lock_guard<std::mutex> lock(mu_);
        results_.emplace(chunk.seq, std::move(r));
      }
      done_.notify_all();
    }
  }

  const common::Tokenizer& tokenizer_;
  std::mutex mu_;
  std::condition_variable ready_, done_;
  std::deque<Chunk> queue_;
  std::map<int64_t, Result> results_;
  bool closed_ = false;
  std::vector<std::thread> workers_;
};

// The stderr progress line: rewritten in place on a terminal (at most 4 times a second), a
// line every 10 s otherwise (a log).
class Progress {
 public:
  explicit Progress(size_t files) : files_(files), tty_(isatty(STDERR_FILENO) != 0) {}
  void Update(size_t files_done, uint64_t bytes, int64_t tokens, bool force) {
    auto now = std::chrono::steady_clock::now();
    if (!force && now - last_ < std::chrono::milliseconds(tty_ ? 250 : 10'000)) return;
    last_ = now;
    std::cerr << absl::StrFormat(
        "%stokenize: %d/%d files, %.1f MB, %.1f MB/s, %d tokens%s", tty_ ? "\r" : "", files_done,
        files_, bytes / 1e6, bytes / 1e6 / std::max(1e-9, Seconds()), tokens, tty_ ? "   " : "\n");
  }
  // The last figures; on a terminal only (a log gets the summary on stdout).
  void End(size_t files_done, uint64_t bytes, int64_t tokens) {
    if (!tty_) return;
    Update(files_done, bytes, tokens, true);
    std::cerr << "\n";
  }
  double Seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  const size_t files_;
  const bool tty_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_ = start_;
};

struct Totals {
  size_t files_done = 0;
  uint64_t bytes = 0;
};

// Writes the results of chunks up to `submitted` that are ready (all of them, waiting, when
// `all`; else enough that at most `max_pending` stay in flight).
absl::Status Drain(EncodePool& pool, ShardWriter& writer, Progress& progress, int64_t submitted,
                   int64_t max_pending, int64_t* written, Totals* totals) {
  while (*written < submitted) {
    bool wait = submitted - *written > max_pending;
    std::optional<Result> r = pool.Take(*written, wait);
    if (!r.has_value()) break;
    ++*written;
    if (absl::Status s = writer.Add(r->ids); !s.ok()) return s;
    totals->bytes += r->bytes;
    totals->files_done += r->last ? 1 : 0;
    progress.Update(totals->files_done, totals->bytes, writer.tokens(), false);
  }
  return absl::OkStatus();
}

// Reads the inputs into chunks and submits them, writing results as they come back.
absl::Status Run(const common::Tokenizer& tokenizer, const std::vector<std::string>& inputs,
                 ShardWriter& writer, int threads) {
  Progress progress(inputs.size());
  EncodePool pool(tokenizer, threads);
  const int64_t max_pending = 2 * static_cast<int64_t>(threads) + 2;
  const bool cut = tokenizer.SplitsAfterNewlines();
  int64_t submitted = 0, written = 0;
  Totals totals;
  for (size_t f = 0; f < inputs.size(); ++f) {
    absl::StatusOr<Source> source = Source::Open(inputs[f]);
    if (!source.ok()) return source.status();
    std::string pending;
    bool first = true, more = true;
    while (more) {
      absl::StatusOr<bool> read = source->Read(&pending);
      if (!read.ok()) return read.status();
      more = *read;
      size_t at =
          cut && pending.size() > kChunkBytes ? CutPoint(pending, kChunkBytes) : std::string::npos;
      if (at == std::string::npos && more) continue;
      if (at == std::string::npos) at = pending.size();
      Chunk chunk{submitted++, f, first, !more && at == pending.size(), {}};
      if (at == pending.size()) {
        chunk.text = std::move(pending);
        pending.clear();
      } else {
        chunk.text = pending.substr(0, at);
        pending.erase(0, at);
      }
      first = false;
      more = more || !pending.empty();
      pool.Submit(std::move(chunk));
      absl::Status s = Drain(pool, writer, progress, submitted, max_pending, &written, &totals);
      if (!s.ok()) return s;
    }
  }
  absl::Status s = Drain(pool, writer, progress, submitted, 0, &written, &totals);
  if (s.ok()) s = writer.Finish();
  if (!s.ok()) return s;
  progress.End(totals.files_done, totals.bytes, writer.tokens());
  std::string names = writer.ShardName(0);
  if (writer.shards() > 1) absl::StrAppend(&names, " .. ", writer.ShardName(writer.shards() - 1));
  std::cout << absl::StrFormat(
      "wrote %d tokens to %d shard%s: %s (%d file%s, %d bytes, %.1f s, "
      "%.1f MB/s)\n",
      writer.tokens(), writer.shards(), writer.shards() == 1 ? "" : "s", names, inputs.size(),
      inputs.size() == 1 ? "" : "s", totals.bytes, progress.Seconds(), totals.bytes / 1e6 / std::max(1e-9, progress.Seconds()));
  return absl::OkStatus();
}

absl::Status Tokenize(const std::string& prefix, const std::vector<std::string>& inputs) {
  const std::string dir = absl::GetFlag(FLAGS_tokenizer);
  const int64_t shard_tokens = absl::GetFlag(FLAGS_shard_tokens);
  if (dir.empty()) return absl::InvalidArgumentError("--tokenizer=DIR is required");
  if (shard_tokens < 1 || shard_tokens > common::kLlmcMaxTokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("--shard_tokens must be in [1, ", common::kLlmcMaxTokens, "]"));
  }
  int threads = absl::GetFlag(FLAGS_threads);
  if (threads < 0) return absl::InvalidArgumentError("--threads must be >= 0");
  if (threads == 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  absl::StatusOr<common::Tokenizer> tokenizer = common::Tokenizer::Load(dir);
  if (!tokenizer.ok()) return tokenizer.status();
  if (tokenizer->vocab_size() > 65536) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, ": ", tokenizer->vocab_size(),
                     " ids do not fit llm.c's uint16 shards (at most 65536; GPT-2 has 50257)"));
  }
  if (!tokenizer->end_of_text().has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, ": no <|endoftext|> token to separate documents with"));
  }
  // Every input is checked before any work, so a typo in the last name costs nothing.
  if (std::count(inputs.begin(), inputs.end(), "-") > 1) {
    return absl::InvalidArgumentError("stdin (-) given more than once");
  }
  for (const std::string& input : inputs) {
    if (input == "-") continue;
    if (absl::StatusOr<common::RegularFile> f = common::RegularFile::Open(input); !f.ok()) {
      return f.status();
    }
  }
  size_t slash = prefix.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    if (absl::Status s = common::MakeDirs(prefix.substr(0, slash)); !s.ok()) return s;
  }
  ShardWriter writer(prefix, shard_tokens);
  return Run(*tokenizer, inputs, writer, threads);
}

}  // namespace

Command TokenizeCommand() {
  Command c{"tokenize",
            "OUT_PREFIX FILES...",
            "encode text FILES (- for stdin; each one document, preceded by <|endoftext|>) with "
            "--tokenizer into llm.c token shards OUT_PREFIX_000000.bin, _000001.bin, ... of "
            "--shard_tokens tokens each",
            {"tokenizer", "shard_tokens", "threads"},
            [](const std::vector<std::string>& args) {
              if (args.size() < 2) {
                std::cerr << "ppctl tokenize: expected OUT_PREFIX and at least one file (see "
                             "ppctl tokenize --help)\n";
                return common::kExitUsage;
              }
              std::vector<std::string> inputs(args.begin() + 1, args.end());
              return ExitCode("tokenize", Tokenize(args[0], inputs));
            }};
  c.flag_help["tokenizer"] =
      "the Hugging Face tokenizer folder (tokenizer.json, or vocab.json + merges.txt); required";
  c.flag_help["threads"] = "encoding threads (default 0: every core)";
  return c;
}

}  // namespace pp::client
