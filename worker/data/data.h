// Token streams for training (DataSpec in proto/pp/v1/job.proto) and the fixed window each sequence
// reads, so that every layout and every restart sees the same tokens.
//
// Sources: "bytes" (any file, token = byte, vocab 256), "uint16" (little-endian uint16 tokens; odd
// file size is an error), "generated" (deterministic text-like bytes from a seed, for tests). Files
// must be regular files (common::RegularFile) and are neither mapped nor copied: each window is
// read with pread, so a file truncated while a job trains fails that read with DataLoss naming the
// file, never with a SIGBUS. Token ids are checked against the vocabulary once, by
// common/job_spec.h ValidateJobSpec, not here.
//
// Window formula. N tokens, T = seq_len, W = N - T valid starts (a window reads T+1 tokens). A
// stream of sequences draws from a range of K starts [first, first + K):
//   P        = smallest p >= max(1, floor(K * 40503 / 2^16)) with gcd(p, K) = 1   (40503/2^16 ~
//              golden ratio 0.618: consecutive sequences land far apart and never in lock-step
//              with T)
//   start(s) = first + (s * P) mod K                 (exact integer arithmetic)
//   sequence s: inputs = tokens[start, start+T), targets = tokens[start+1, start+T+1)
// Since gcd(P, K) = 1, every start of the range is used once per K sequences.
// Ranges: training reads [0, W) unless eval.holdout_fraction f > 0; then (common::SplitWindows)
// the last H = floor(W f) starts [W - H, W) are held out for evaluation and training reads
// [0, W - H - T), so no trained window shares a token with a held-out one. Evaluation on a
// separate file (eval.data) reads all of its starts.
// Sequence numbering: the data position is the number of sequences consumed before a step; row b of
// microbatch j reads sequence s = position + j*B + b, and a step advances the position by M*B. A
// fresh run is at position step*M*B (common::DataPositionAtStep), so microbatch j of step k reads
// s = (k*M + j)*B + b. With data parallelism, replica r's microbatch j is j' = r*M + j of M' = R*M.
// Evaluation numbers its batches like steps, from 0 at every evaluation: every evaluation of a job
// reads the same held-out sequences.
#ifndef PP_WORKER_DATA_DATA_H_
#define PP_WORKER_DATA_DATA_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/file_io.h"
#include "pp/v1/job.pb.h"

namespace pp::data {

class TokenSource {
 public:
  // Errors name the file: missing, unreadable, not a regular file, odd-sized uint16 file, unknown
  // format.
  static absl::StatusOr<TokenSource> Open(const pp::v1::DataSpec& spec);
  static TokenSource Generated(uint64_t seed, int64_t n_tokens);

  // Token count at Open.
  int64_t size() const { return size_; }
  // Tokens [start, start + count) into out[0, count). REQUIRES 0 <= start, start + count <= size().
  // DataLoss naming the file when the file shrank since Open. Thread-safe.
  absl::Status Read(int64_t start, int64_t count, int32_t* out) const;

 private:
  TokenSource() = default;
  std::optional<pp::common::RegularFile> file_;
  std::vector<uint8_t> owned_;  // generated corpus
  int64_t size_ = 0;
  bool uint16_ = false;
};

// Deterministic text-like bytes (words, punctuation, lines) for tests; same seed, same bytes.
std::string GenerateCorpus(uint64_t seed, int64_t n_bytes);

// A range of window starts; count >= 1 for reading.
struct WindowRange {
  int64_t first = 0;
  int64_t count = 0;
};
// The ranges of the formula above. REQUIRES n_tokens >= seq_len + 1, seq_len >= 1.
WindowRange AllWindows(int64_t n_tokens, int64_t seq_len);
WindowRange TrainWindows(int64_t n_tokens, int64_t seq_len, double holdout_fraction);
WindowRange HeldOutWindows(int64_t n_tokens, int64_t seq_len, double holdout_fraction);

// P and start(s) of the formula above. REQUIRES range.count >= 1.
int64_t WindowStride(const WindowRange& range);
int64_t WindowStart(int64_t sequence, const WindowRange& range);
// Of AllWindows(n_tokens, seq_len).
int64_t WindowStride(int64_t n_tokens, int64_t seq_len);
int64_t WindowStart(int64_t sequence, int64_t n_tokens, int64_t seq_len);

// What evaluation reads (REQUIRES common::EvalEnabled(spec), a validated spec): eval.data with
// every start, or the training data with its held-out starts.
struct EvalSource {
  TokenSource source;
  WindowRange windows;
};
absl::StatusOr<EvalSource> OpenEvalSource(const pp::v1::JobSpec& spec);

// inputs (B,T) and targets (B,T), int32, row-major.
struct Microbatch {
  int64_t batch = 0;
  int64_t seq_len = 0;
  std::vector<int32_t> inputs;
  std::vector<int32_t> targets;
};

// Microbatch `microbatch` of the step that starts at `data_position`, its windows drawn from
// `range` (default: every start of the source). InvalidArgument when the source holds fewer
// than seq_len+1 tokens, the range is empty or past the source's windows, or a size is not
// positive.
absl::StatusOr<Microbatch> ReadMicrobatch(const TokenSource& source, const WindowRange& range,
                                          int64_t data_position, int64_t microbatch,
                                          int64_t batch, int64_t seq_len);
absl::StatusOr<Microbatch> ReadMicrobatch(const TokenSource& source, int64_t data_position,
                                          int64_t microbatch, int64_t batch, int64_t seq_len);

}  // namespace pp::data

#endif  // PP_WORKER_DATA_DATA_H_
