// Packed variable-length microbatches (train.tokens_per_microbatch; docs/jobs.md "Packed
// microbatches"): how a token stream becomes rows of whole documents, each row one microbatch.
//
// Let N be the stream's tokens, E its end-of-text id, L = PieceLimit (min(model.seq_len, budget))
// and K = the budget (tokens_per_microbatch).
// - Documents: the input positions [0, N-1) of the stream (the last token is only a target) cut
//   after every end-of-text token: a document ends with its end-of-text (which it owns, as in
//   worker/data/data.h "Documents") or at position N-2. Two end-of-text tokens in a row make a
//   one-token document: no document is empty.
// - Pieces: each document cut from its first token into pieces of L tokens (the last shorter).
//   So a document longer than a window is trained on, piece by piece, and never dropped.
// - Rows: pieces in stream order, greedily: a row takes the next piece while its tokens stay
//   <= K, so every row holds 1..K tokens. Row g is the contiguous input positions
//   [starts[g], starts[g+1]) of the stream; its targets are the tokens one position on.
// - Sequences of a row: its pieces. A row starts at a piece start, so they are a pure function of
//   the row's tokens (RowSequences): a piece starts at 0, after an end-of-text token, and L tokens
//   after the previous piece start. Each attends only to itself, positions from 0.
// - Order: training sequence s (a data position counts rows: microbatch_size is 1) reads row
//   worker/data/data.h WindowStart(s, {0, G}) of the G rows: every row once per G sequences.
// The index costs one scan of the stream at open and 8 bytes a row.
// Pure functions, thread-safe.
#ifndef PP_COMMON_PACKING_H_
#define PP_COMMON_PACKING_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pp/v1/job.pb.h"

namespace pp::common {

// At most this many tokens in one packed microbatch (its activations are (K, 4C) and more).
inline constexpr int64_t kMaxTokensPerMicrobatch = int64_t{1} << 20;

// Whether `spec` packs variable-length microbatches (train.tokens_per_microbatch > 0).
bool PacksMicrobatches(const pp::v1::JobSpec& spec);
// The rules of train.tokens_per_microbatch (0: off, nothing to check): 1..kMaxTokensPerMicrobatch;
// microbatch_size 1 (ApplyDefaults sets an unset one); data.documents "mask" and model.positions
// "document"; one stream (no data.mix) and no train.epochs (not supported with packing).
// InvalidArgument starting with the field. Reads no file.
absl::Status ValidatePacking(const pp::v1::JobSpec& spec);
// L: min(model.seq_len, train.tokens_per_microbatch). REQUIRES PacksMicrobatches.
int64_t PieceLimit(const pp::v1::JobSpec& spec);
// The most tokens one microbatch holds: tokens_per_microbatch when packing, else
// microbatch_size x seq_len. What activation memory and boundary buffers are sized for.
int64_t MaxMicrobatchTokens(const pp::v1::JobSpec& spec);

// The rows above. starts has G + 1 entries: starts[0] = 0, starts[G] = N - 1.
struct PackedRows {
  std::vector<int64_t> starts;
  int64_t count() const { return static_cast<int64_t>(starts.size()) - 1; }
  int64_t length(int64_t row) const { return starts[row + 1] - starts[row]; }
};

// Reads tokens [start, start + count) of the stream into out.
using TokenReader = std::function<absl::Status(int64_t start, int64_t count, int32_t* out)>;
// The rows of a stream of `n_tokens` >= 2 tokens, read once in chunks through `read`.
// REQUIRES piece_limit >= 1, budget >= piece_limit. Errors: those of `read`.
absl::StatusOr<PackedRows> PackRows(int64_t n_tokens, const TokenReader& read, int32_t end_of_text,
                                    int64_t piece_limit, int64_t budget);

// The sequences of a row of `n` >= 1 input tokens (above) as cu_seqlens offsets: pieces + 1
// entries, the first 0, the last n, strictly increasing.
std::vector<int32_t> RowSequences(const int32_t* inputs, int64_t n, int32_t end_of_text,
                                  int64_t piece_limit);

// sum over the sequences of length^2: the attention pairs a row computes per head (its work).
int64_t SequenceSquares(const std::vector<int32_t>& sequences);

// The step loss of packed microbatches, the mean over every token of the step: microbatch j's
// mean token loss losses[j] weighted by its tokens[j], summed in double in microbatch order,
// over the sum of tokens. So it does not depend on how documents fall into microbatches (up to
// rounding). REQUIRES equal sizes, tokens > 0.
double TokenMeanLoss(const std::vector<double>& losses, const std::vector<int64_t>& tokens);

}  // namespace pp::common

#endif  // PP_COMMON_PACKING_H_
