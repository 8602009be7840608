// The document starts of packed windows (data.h "Documents").
#include <cstdint>
#include <optional>
#include <vector>

#include "common/data_spec.h"
#include "worker/data/data.h"

namespace pp::data {

void DocumentStarts(const int32_t* inputs, int64_t batch, int64_t seq_len, int32_t end_of_text,
                    int32_t* doc_start) {
  for (int64_t b = 0; b < batch; ++b) {
    const int32_t* row = inputs + b * seq_len;
    int32_t* starts = doc_start + b * seq_len;
    int32_t start = 0;  // the window's first token starts a document
    for (int64_t t = 0; t < seq_len; ++t) {
      // The token after an end of text starts the next document; the end of text itself stays
      // the last input of the document it ends.
      if (t > 0 && row[t - 1] == end_of_text) start = static_cast<int32_t>(t);
      starts[t] = start;
    }
  }
}

std::vector<int32_t> DocumentStarts(const Microbatch& batch, std::optional<int32_t> end_of_text) {
  if (!end_of_text.has_value()) return {};
  std::vector<int32_t> starts(batch.inputs.size());
  DocumentStarts(batch.inputs.data(), batch.batch, batch.seq_len, *end_of_text, starts.data());
  return starts;
}

std::optional<int32_t> DocumentEndOfText(const pp::v1::JobSpec& spec) {
  if (!common::MasksDocuments(spec)) return std::nullopt;
  return common::EndOfTextId(spec);
}

}  // namespace pp::data
