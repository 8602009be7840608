// Packed rows of a stream (data.h PackedStream, common/packing.h): the index built once when the
// data opens, and a row read as a (1, n) microbatch with its sequences.
#include "absl/strings/str_cat.h"
#include "common/data_spec.h"
#include "worker/data/data.h"

namespace pp::data {

absl::StatusOr<PackedStream> PackedStream::Index(const TokenSource& source, int64_t first,
                                                 int64_t tokens, const pp::v1::JobSpec& spec) {
  PackedStream packed;
  packed.first_ = first;
  packed.end_of_text_ = common::EndOfTextId(spec);
  packed.piece_limit_ = common::PieceLimit(spec);
  absl::StatusOr<common::PackedRows> rows = common::PackRows(
      tokens,
      [&](int64_t start, int64_t count, int32_t* out) {
        return source.Read(first + start, count, out);
      },
      packed.end_of_text_, packed.piece_limit_, spec.train().tokens_per_microbatch());
  if (!rows.ok()) return rows.status();
  packed.rows_ = *std::move(rows);
  return packed;
}

int64_t PackedStream::RowOf(int64_t sequence) const {
  return WindowStart(sequence, WindowRange{0, rows_.count()});
}

absl::StatusOr<Microbatch> PackedStream::ReadRow(const TokenSource& source,
                                                 int64_t sequence) const {
  if (sequence < 0) {
    return absl::InvalidArgumentError(absl::StrCat("ReadRow(", sequence, "): not a sequence"));
  }
  const int64_t row = RowOf(sequence);
  const int64_t start = first_ + rows_.starts[row], n = rows_.length(row);
  std::vector<int32_t> tokens(static_cast<size_t>(n + 1));
  if (absl::Status s = source.Read(start, n + 1, tokens.data()); !s.ok()) return s;
  Microbatch batch;
  batch.batch = 1;
  batch.seq_len = n;
  batch.inputs.assign(tokens.begin(), tokens.end() - 1);
  batch.targets.assign(tokens.begin() + 1, tokens.end());
  batch.sequences = common::RowSequences(batch.inputs.data(), n, end_of_text_, piece_limit_);
  return batch;
}

}  // namespace pp::data
