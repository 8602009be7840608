// Packed rows (packing.h): one scan of the stream, cutting documents into pieces and pieces into
// rows as it goes.
#include "common/packing.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/spec_field.h"
#include "common/step_math.h"

namespace pp::common {

using spec::Field;

bool PacksMicrobatches(const pp::v1::JobSpec& spec) {
  return spec.train().tokens_per_microbatch() > 0;
}

absl::Status ValidatePacking(const pp::v1::JobSpec& spec) {
  const int64_t budget = spec.train().tokens_per_microbatch();
  constexpr const char* kField = "train.tokens_per_microbatch";
  if (budget == 0) return absl::OkStatus();
  if (budget < 0 || budget > kMaxTokensPerMicrobatch) {
    return Field(kField, absl::StrCat(budget, " is not a token budget: a microbatch holds 1 to ",
                                      kMaxTokensPerMicrobatch, " tokens (0: fixed windows)"));
  }
  if (spec.train().microbatch_size() != 1) {
    return Field("train.microbatch_size",
                 absl::StrCat(spec.train().microbatch_size(), " beside ", kField,
                              ": a packed microbatch is one row; leave it unset (1)"));
  }
  if (spec.data().documents() != "mask") {
    return Field(kField, "packs documents: it needs data.documents \"mask\"");
  }
  if (spec.model().positions() != "document") {
    return Field(kField,
                 "packs documents, each with positions from 0: it needs model.positions "
                 "\"document\"");
  }
  if (spec.data().mix_size() > 0) {
    return Field(kField, "packs one stream; a data.mix is not supported with it");
  }
  if (spec.train().epochs() > 0) {
    return Field(kField, "train.epochs is not supported with it yet: set train.steps");
  }
  return absl::OkStatus();
}

int64_t PieceLimit(const pp::v1::JobSpec& spec) {
  return std::min<int64_t>(spec.model().seq_len(), spec.train().tokens_per_microbatch());
}

int64_t MaxMicrobatchTokens(const pp::v1::JobSpec& spec) {
  if (PacksMicrobatches(spec)) return spec.train().tokens_per_microbatch();
  return static_cast<int64_t>(spec.train().microbatch_size()) * spec.model().seq_len();
}

absl::StatusOr<PackedRows> PackRows(int64_t n_tokens, const TokenReader& read, int32_t end_of_text,
                                    int64_t piece_limit, int64_t budget) {
  constexpr int64_t kChunk = int64_t{1} << 20;
  PackedRows rows;
  rows.starts.push_back(0);
  const int64_t inputs = n_tokens - 1;  // the last token is only a target
  std::vector<int32_t> chunk;
  int64_t piece_start = 0;  // of the piece position p belongs to
  int64_t row_tokens = 0;   // of the open row, before the open piece
  // Closes the piece [piece_start, end): it joins the open row, or opens the next one.
  auto close_piece = [&](int64_t end) {
    const int64_t piece = end - piece_start;
    if (row_tokens + piece > budget) {
      rows.starts.push_back(piece_start);
      row_tokens = 0;
    }
    row_tokens += piece;
    piece_start = end;
  };
  for (int64_t first = 0; first < inputs; first += kChunk) {
    const int64_t count = std::min(kChunk, inputs - first);
    chunk.resize(static_cast<size_t>(count));
    if (absl::Status s = read(first, count, chunk.data()); !s.ok()) return s;
    for (int64_t i = 0; i < count; ++i) {
      const int64_t p = first + i;
      if (p - piece_start == piece_limit) close_piece(p);
      if (chunk[static_cast<size_t>(i)] == end_of_text) close_piece(p + 1);
    }
  }
  if (piece_start < inputs) close_piece(inputs);
  rows.starts.push_back(inputs);
  return rows;
}

std::vector<int32_t> RowSequences(const int32_t* inputs, int64_t n, int32_t end_of_text,
                                  int64_t piece_limit) {
  std::vector<int32_t> cu = {0};
  for (int64_t t = 1; t < n; ++t) {
    if (inputs[t - 1] == end_of_text || t - cu.back() == piece_limit) {
      cu.push_back(static_cast<int32_t>(t));
    }
  }
  cu.push_back(static_cast<int32_t>(n));
  return cu;
}

int64_t SequenceSquares(const std::vector<int32_t>& sequences) {
  int64_t sum = 0;
  for (size_t i = 1; i < sequences.size(); ++i) {
    const int64_t length = sequences[i] - sequences[i - 1];
    sum += length * length;
  }
  return sum;
}

double TokenMeanLoss(const std::vector<double>& losses, const std::vector<int64_t>& tokens) {
  double sum = 0;
  int64_t count = 0;
  for (size_t j = 0; j < losses.size(); ++j) {
    sum += losses[j] * static_cast<double>(tokens[j]);
    count += tokens[j];
  }
  return sum / static_cast<double>(count);
}

}  // namespace pp::common
