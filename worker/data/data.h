// Token streams for training (DataSpec in proto/pp/v1/job.proto) and the fixed window each sequence
// reads, so that every layout and every restart sees the same tokens.
//
// Sources: "bytes" (any file, token = byte, vocab 256), "uint16" (little-endian uint16 tokens; odd
// file size is an error), "llmc" (llm.c shards, common/llmc_shard.h: the tokens are the uint16 ids
// after the 1024-byte header, whose count must match the file's size), "generated" (deterministic
// text-like bytes from a seed, for tests). Files must be regular files (common::RegularFile) and
// are neither mapped nor copied: each window is read with pread, so a file truncated while a job
// trains fails that read with DataLoss naming the file, never with a SIGBUS. Token ids are checked
// against the vocabulary once, by common/data_spec.h CheckDataFiles, not here.
//
// Streams. A stream's files (data.path, or data.paths, globs expanded in byte order by
// common/data_spec.h StreamFiles; ppcoord stores them resolved) are ONE sequence of N tokens,
// their concatenation in order: token n of the stream is token n - N_0 - ... - N_{k-1} of file k.
// A window may straddle a file boundary: it reads the end of one file and the start of the next,
// as if the files were one (no document separator is added; an llm.c shard starts with one).
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
// Mix (data.mix: streams i = 0..n-1 with weights w_i, L = sum w_i): stream i is its own N_i tokens
// with its own range of K_i = N_i - T starts (no holdout with a mix), and training sequence s is
// sequence s_i of stream i, read by the formula above on stream i's range, where
//   r = s mod L,  i = source(r),  s_i = (s div L) * w_i + rank(r)
// source(r) and rank(r) (the slots of source(r) before slot r) form MixPattern, a fixed pattern of
// L slots computed once from the weights: source i's k-th slot (k = 0..w_i-1) has the ideal time
// (2k + 1) / (2 w_i) of a period, and the L slots are sorted by it (ties: the lower i first). So
// every L consecutive sequences hold exactly w_i of source i, spread evenly, and s_i runs through
// 0, 1, 2, ... as s does: a pure O(1) function of the spec and s, the same on every layout,
// restart and resume. K of a mix is sum K_i (common/epoch.h).
// Sequence numbering: the data position is the number of sequences consumed before a step; row b of
// microbatch j reads sequence s = position + j*B + b, and a step advances the position by M*B. A
// fresh run is at position step*M*B (common::DataPositionAtStep), so microbatch j of step k reads
// s = (k*M + j)*B + b. With data parallelism, replica r's microbatch j is j' = r*M + j of M' = R*M.
// Evaluation numbers its batches like steps, from 0 at every evaluation: every evaluation of a job
// reads the same held-out sequences.
//
// Documents (data.documents "mask"; common/data_spec.h EndOfTextId gives the id). A window's
// documents are a pure function of its T input tokens, so every rank that holds a stage reads the
// window (every stage's attention needs them, not only the first and last stage's tokens) and
// derives the same boundaries, with nothing sent between ranks:
//   doc_start[b,t] = the largest t' <= t with t' == 0 or inputs[b, t'-1] == end_of_text
// (DocumentStarts). So:
// - the end-of-text token belongs to the document it ends: it is that document's last input, and
//   its target (the next document's first token) stays in the loss, as in unmasked training;
// - a window's first token starts a document: a document cut by the window start is a document
//   of the window, and one longer than the window is simply cut by it;
// - two end-of-text tokens in a row make a one-token document (the second one), so an empty
//   document between them is harmless; an end-of-text at t = T-1 ends the window's last document.
// Attention is block-causal within each document (kernels/ops.h AttentionForward); with
// model.positions "document" position ids restart at 0 at each document start.
//
// Packed rows (train.tokens_per_microbatch; common/packing.h has the rule): instead of windows,
// a stream's tokens are cut into pieces of whole documents packed into rows of at most K tokens,
// indexed once at open (PackedStream). A data position then counts rows (microbatch_size is 1):
// microbatch j of the step at position p reads sequence p + j, row WindowStart(p + j, {0, G}).
// Training packs the tokens before the held-out part; evaluation the held-out tokens (or
// eval.data).
#ifndef PP_WORKER_DATA_DATA_H_
#define PP_WORKER_DATA_DATA_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/file_io.h"
#include "common/packing.h"
#include "pp/v1/job.pb.h"

namespace pp::data {

// One stream (above): generated, or the files of a DataSpec that is not a mix, concatenated.
class TokenSource {
 public:
  // Errors start with `field` (the spec's field of the stream) and name the file: missing,
  // unreadable, not a regular file, odd-sized uint16 file, not an llm.c shard, a glob matching
  // nothing; or an unknown format or a mix.
  static absl::StatusOr<TokenSource> Open(const pp::v1::DataSpec& spec,
                                          absl::string_view field = "data");
  static TokenSource Generated(uint64_t seed, int64_t n_tokens);

  // Token count at Open (all files).
  int64_t size() const { return size_; }
  // Tokens [start, start + count) of the stream into out[0, count), across files as needed.
  // REQUIRES 0 <= start, start + count <= size(). DataLoss naming the file when a file shrank
  // since Open. Thread-safe.
  absl::Status Read(int64_t start, int64_t count, int32_t* out) const;

 private:
  // One file of the stream: its tokens are the stream's [first, first + tokens), from byte
  // `offset` of the file on (the llm.c header's size, else 0).
  struct Part {
    pp::common::RegularFile file;
    int64_t first = 0;
    int64_t tokens = 0;
    uint64_t offset = 0;
  };
  TokenSource() = default;
  // `file` as a part of `format`, its tokens counted (first still 0).
  static absl::StatusOr<Part> OpenPart(pp::common::RegularFile file, absl::string_view format,
                                       absl::string_view field);
  absl::Status ReadPart(const Part& part, int64_t start, int64_t count, int32_t* out) const;
  std::vector<Part> parts_;      // in stream order
  std::vector<uint8_t> owned_;  // generated corpus
  int64_t size_ = 0;
  bool uint16_ = false;  // uint16 and llmc
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

// inputs (B,T) and targets (B,T), int32, row-major.
struct Microbatch {
  int64_t batch = 0;
  int64_t seq_len = 0;
  std::vector<int32_t> inputs;
  std::vector<int32_t> targets;
  // A packed row (B = 1, T = its tokens): its sequences as cu_seqlens offsets
  // (common/packing.h RowSequences). Empty for fixed windows.
  std::vector<int32_t> sequences;
};

// Packed rows (train.tokens_per_microbatch; common/packing.h) over a stream's tokens
// [first, first + tokens): training's (the stream up to its held-out part) or evaluation's.
// Sequence s reads row WindowStart(s, {0, G}) of the G rows. Immutable; thread-safe.
class PackedStream {
 public:
  // Scans the tokens once. REQUIRES tokens >= 2, within the source.
  static absl::StatusOr<PackedStream> Index(const TokenSource& source, int64_t first,
                                            int64_t tokens, const pp::v1::JobSpec& spec);
  const common::PackedRows& rows() const { return rows_; }
  int64_t RowOf(int64_t sequence) const;
  // The tokens of sequence `sequence`'s row (1..tokens_per_microbatch), without reading it.
  int64_t RowTokens(int64_t sequence) const { return rows_.length(RowOf(sequence)); }
  // That row as a (1, n) microbatch with its sequences (Microbatch::sequences).
  absl::StatusOr<Microbatch> ReadRow(const TokenSource& source, int64_t sequence) const;

 private:
  common::PackedRows rows_;
  int64_t first_ = 0;
  int32_t end_of_text_ = 0;
  int64_t piece_limit_ = 0;
};

// A stream and the range of window starts it is read from, or its packed rows.
struct Stream {
  TokenSource source;
  WindowRange windows;
  std::optional<PackedStream> packed;  // train.tokens_per_microbatch
};
// What evaluation reads (REQUIRES common::EvalEnabled(spec), a validated spec): eval.data with
// every start, or the training data with its held-out starts; packed, the rows of eval.data or
// of the held-out tokens [held_out_first, N) (common::SplitWindows).
using EvalSource = Stream;
absl::StatusOr<EvalSource> OpenEvalSource(const pp::v1::JobSpec& spec);
// Microbatch `microbatch` of eval batch position `data_position`: B windows of T, or a packed row.
absl::StatusOr<Microbatch> ReadEvalMicrobatch(const EvalSource& eval, int64_t data_position,
                                              int64_t microbatch, int64_t batch, int64_t seq_len);

// The fixed pattern of a mix (above): slot r of the period L belongs to source(r), the rank(r)-th
// of that source's slots. Immutable, thread-safe.
class MixPattern {
 public:
  // REQUIRES every weight >= 1, their sum <= common::kMaxMixWeight. O(W log W), once.
  explicit MixPattern(const std::vector<int32_t>& weights);
  struct Draw {
    int source = 0;
    int64_t sequence = 0;  // s_i: the sequence of that source's own stream
  };
  // Of training sequence `sequence` >= 0: O(1).
  Draw At(int64_t sequence) const;
  int64_t period() const { return static_cast<int64_t>(source_.size()); }

 private:
  std::vector<int32_t> weights_;
  std::vector<int32_t> source_;  // per slot
  std::vector<int32_t> rank_;    // per slot
};

// What training reads of spec.data: one stream's training windows, or a mix of streams each
// read over all its windows. Immutable after Open; ReadWindow is thread-safe.
class TrainData {
 public:
  // Opens every file (TokenSource::Open) and checks each stream holds seq_len + 1 tokens.
  // REQUIRES a validated spec (common/job_spec.h).
  static absl::StatusOr<TrainData> Open(const pp::v1::JobSpec& spec);
  // K: the training windows of an epoch (common/epoch.h); of a mix, the sum over its streams.
  int64_t windows() const { return windows_; }
  // The T + 1 = `seq_len` + 1 tokens of training sequence `sequence` >= 0 into `out`.
  absl::Status ReadWindow(int64_t sequence, int64_t seq_len, int32_t* out) const;
  // The stream and the window start of training sequence `sequence` (what ReadWindow reads).
  struct Window {
    int stream = 0;
    int64_t start = 0;
  };
  Window WindowOf(int64_t sequence) const;

  // Packed microbatches (train.tokens_per_microbatch): the one stream's training rows, each one
  // microbatch (windows() is then their count G). Null for fixed windows.
  const PackedStream* packed() const {
    return streams_.size() == 1 && streams_[0].packed ? &*streams_[0].packed : nullptr;
  }
  // Training sequence `sequence`'s row. REQUIRES packed().
  int64_t RowTokens(int64_t sequence) const { return packed()->RowTokens(sequence); }
  absl::StatusOr<Microbatch> ReadRow(int64_t sequence) const {
    return packed()->ReadRow(streams_[0].source, sequence);
  }

 private:
  TrainData() = default;
  std::vector<Stream> streams_;
  std::optional<MixPattern> mix_;  // with data.mix
  int64_t windows_ = 0;
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
// Microbatch `microbatch` of the step at `data_position` from the training data: B windows of T,
// or with packed rows row ReadRow(data_position + microbatch) (batch must then be 1; seq_len is
// not used). InvalidArgument when a size is not positive.
absl::StatusOr<Microbatch> ReadMicrobatch(const TrainData& data, int64_t data_position,
                                          int64_t microbatch, int64_t batch, int64_t seq_len);

// The document starts (above) of `batch` rows of `seq_len` input tokens into doc_start, the same
// (batch, seq_len) shape. O(batch x seq_len); doc_start may not alias inputs.
void DocumentStarts(const int32_t* inputs, int64_t batch, int64_t seq_len, int32_t end_of_text,
                    int32_t* doc_start);
// Of a microbatch's inputs: the document starts when `end_of_text` is set (documents "mask"),
// else empty (plain causal attention: model::StageInput::doc_start null).
std::vector<int32_t> DocumentStarts(const Microbatch& batch, std::optional<int32_t> end_of_text);
// The end-of-text id when `spec` masks documents (common/data_spec.h EndOfTextId), else nullopt.
std::optional<int32_t> DocumentEndOfText(const pp::v1::JobSpec& spec);

}  // namespace pp::data

#endif  // PP_WORKER_DATA_DATA_H_
