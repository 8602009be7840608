#include "worker/data/data.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/data_spec.h"
#include "common/llmc_shard.h"
#include "common/step_math.h"

namespace pp::data {
namespace {

// splitmix64 (Steele, Lea, Flood 2014): a tiny counter-based generator, enough for test text.
uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A word list drawn from syllables, so the corpus has a learnable, text-like structure.
std::vector<std::string> MakeWords(uint64_t* state) {
  static const char* const kSyllables[] = {"the", "an", "er", "in", "on", "re", "at", "es",
                                           "or",  "ti", "st", "ar", "ne", "lo", "ma", "ve"};
  std::vector<std::string> words;
  for (int i = 0; i < 64; ++i) {
    std::string word;
    int syllables = 1 + static_cast<int>(SplitMix64(state) % 3);
    for (int s = 0; s < syllables; ++s) word += kSyllables[SplitMix64(state) % 16];
    words.push_back(word);
  }
  return words;
}

}  // namespace

std::string GenerateCorpus(uint64_t seed, int64_t n_bytes) {
  uint64_t state = seed;
  std::vector<std::string> words = MakeWords(&state);
  std::string text;
  n_bytes = std::max<int64_t>(n_bytes, 0);
  text.reserve(static_cast<size_t>(n_bytes) + 32);
  bool sentence_start = true;
  while (static_cast<int64_t>(text.size()) < n_bytes) {
    uint64_t r = SplitMix64(&state);
    // Two draws, keep the smaller: frequent short words, rare long ones (roughly Zipf-like).
    size_t index = std::min(r % words.size(), (r >> 32) % words.size());
    std::string word = words[index];
    if (sentence_start) word[0] = static_cast<char>(word[0] - 'a' + 'A');
    text += word;
    uint64_t punctuation = (r >> 16) % 16;
    sentence_start = punctuation < 2;
    if (punctuation == 0) {
      text += ".\n";
    } else if (punctuation == 1) {
      text += ". ";
    } else if (punctuation == 2) {
      text += ", ";
    } else {
      text += ' ';
    }
  }
  text.resize(static_cast<size_t>(n_bytes));
  return text;
}

absl::StatusOr<TokenSource> TokenSource::Open(const pp::v1::DataSpec& spec,
                                              absl::string_view field) {
  const std::string format = spec.format().empty() ? "bytes" : spec.format();
  if (format == "generated") return Generated(spec.generated_seed(), spec.generated_tokens());
  if (format != "bytes" && format != "uint16" && format != "llmc") {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".format: unknown value \"", format,
                     "\" (one of bytes, uint16, llmc, generated)"));
  }
  if (spec.mix_size() > 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".mix: a mix is not one stream"));
  }
  absl::StatusOr<std::vector<common::DataFile>> files = common::StreamFiles(field, spec);
  if (!files.ok()) return files.status();
  TokenSource source;
  source.uint16_ = format != "bytes";
  for (const common::DataFile& name : *files) {
    absl::StatusOr<common::RegularFile> file = common::RegularFile::Open(name.path);
    if (!file.ok()) return file.status();
    absl::StatusOr<Part> part = OpenPart(*std::move(file), format, name.field);
    if (!part.ok()) return part.status();
    part->first = source.size_;
    source.size_ += part->tokens;
    source.parts_.push_back(*std::move(part));
  }
  return source;
}

TokenSource TokenSource::Generated(uint64_t seed, int64_t n_tokens) {
  TokenSource source;
  std::string text = GenerateCorpus(seed, n_tokens);
  source.owned_.assign(text.begin(), text.end());
  source.size_ = static_cast<int64_t>(source.owned_.size());
  return source;
}

absl::StatusOr<TokenSource::Part> TokenSource::OpenPart(common::RegularFile file,
                                                        absl::string_view format,
                                                        absl::string_view field) {
  Part part{std::move(file)};
  const uint64_t size = part.file.size();
  if (format == "bytes") {
    part.tokens = static_cast<int64_t>(size);
  } else if (format == "uint16") {
    if (size % 2 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": ", part.file.path(), " has an odd size (", size, " bytes) for uint16 tokens"));
    }
    part.tokens = static_cast<int64_t>(size / 2);
  } else {  // llmc: the header states the count, which the size must match
    std::string header(static_cast<size_t>(std::min<uint64_t>(common::kLlmcHeaderBytes, size)),
                       '\0');
    absl::Status read =
        part.file.ReadAt(0, header.size(), reinterpret_cast<uint8_t*>(header.data()));
    if (!read.ok()) return read;
    absl::StatusOr<int64_t> tokens = common::LlmcTokenCount(header, size, part.file.path());
    if (!tokens.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": ", tokens.status().message()));
    }
    part.tokens = *tokens;
    part.offset = common::kLlmcHeaderBytes;
  }
  return part;
}

absl::Status TokenSource::Read(int64_t start, int64_t count, int32_t* out) const {
  if (parts_.empty()) {
    for (int64_t i = 0; i < count; ++i) out[i] = owned_[static_cast<size_t>(start + i)];
    return absl::OkStatus();
  }
  // The last part that starts at or before `start`; then on through the following ones.
  auto part = std::upper_bound(parts_.begin(), parts_.end(), start,
                               [](int64_t at, const Part& p) { return at < p.first; }) -
              1;
  while (count > 0) {
    const int64_t n = std::min(count, part->first + part->tokens - start);
    if (n > 0) {
      if (absl::Status s = ReadPart(*part, start - part->first, n, out); !s.ok()) return s;
    }
    start += n;
    out += n;
    count -= n;
    ++part;
  }
  return absl::OkStatus();
}

absl::Status TokenSource::ReadPart(const Part& part, int64_t start, int64_t count,
                                   int32_t* out) const {
  const int64_t width = uint16_ ? 2 : 1;
  std::vector<uint8_t> bytes(static_cast<size_t>(count * width));
  absl::Status status = part.file.ReadAt(part.offset + static_cast<uint64_t>(start * width),
                                         bytes.size(), bytes.data());
  if (!status.ok()) return status;
  for (int64_t i = 0; i < count; ++i) {
    out[i] = uint16_ ? static_cast<int32_t>(bytes[2 * i] | (bytes[2 * i + 1] << 8))
                     : static_cast<int32_t>(bytes[i]);
  }
  return absl::OkStatus();
}

WindowRange AllWindows(int64_t n_tokens, int64_t seq_len) { return {0, n_tokens - seq_len}; }

WindowRange TrainWindows(int64_t n_tokens, int64_t seq_len, double holdout_fraction) {
  return {0, common::SplitWindows(n_tokens, seq_len, holdout_fraction).train_starts};
}

WindowRange HeldOutWindows(int64_t n_tokens, int64_t seq_len, double holdout_fraction) {
  const common::WindowSplit split = common::SplitWindows(n_tokens, seq_len, holdout_fraction);
  return {split.held_out_first, split.held_out_starts};
}

int64_t WindowStride(const WindowRange& range) {
  uint64_t starts = static_cast<uint64_t>(range.count);
  uint64_t stride = static_cast<uint64_t>((static_cast<unsigned __int128>(starts) * 40503) >> 16);
  if (stride < 1) stride = 1;
  while (std::gcd(stride, starts) != 1) ++stride;
  return static_cast<int64_t>(stride);
}

int64_t WindowStart(int64_t sequence, const WindowRange& range) {
  unsigned __int128 product = static_cast<unsigned __int128>(sequence) *
                              static_cast<uint64_t>(WindowStride(range));
  return range.first + static_cast<int64_t>(product % static_cast<uint64_t>(range.count));
}

int64_t WindowStride(int64_t n_tokens, int64_t seq_len) {
  return WindowStride(AllWindows(n_tokens, seq_len));
}

int64_t WindowStart(int64_t sequence, int64_t n_tokens, int64_t seq_len) {
  return WindowStart(sequence, AllWindows(n_tokens, seq_len));
}

absl::StatusOr<EvalSource> OpenEvalSource(const pp::v1::JobSpec& spec) {
  const pp::v1::EvalSpec& eval = spec.eval();
  const int64_t T = spec.model().seq_len();
  absl::StatusOr<TokenSource> source = eval.has_data()
                                            ? TokenSource::Open(eval.data(), "eval.data")
                                            : TokenSource::Open(spec.data());
  if (!source.ok()) return source.status();
  const WindowRange windows = eval.has_data()
                                  ? AllWindows(source->size(), T)
                                  : HeldOutWindows(source->size(), T, eval.holdout_fraction());
  EvalSource opened{*std::move(source), windows, std::nullopt};
  if (common::PacksMicrobatches(spec)) {  // eval.data's rows, or the held-out tokens'
    const int64_t n = opened.source.size();
    const int64_t first =
        eval.has_data() ? 0 : common::SplitWindows(n, T, eval.holdout_fraction()).held_out_first;
    absl::StatusOr<PackedStream> packed =
        PackedStream::Index(opened.source, first, n - first, spec);
    if (!packed.ok()) return packed.status();
    opened.packed.emplace(*std::move(packed));
  }
  return opened;
}

absl::StatusOr<Microbatch> ReadEvalMicrobatch(const EvalSource& eval, int64_t data_position,
                                              int64_t microbatch, int64_t batch, int64_t seq_len) {
  if (!eval.packed) {
    return ReadMicrobatch(eval.source, eval.windows, data_position, microbatch, batch, seq_len);
  }
  return eval.packed->ReadRow(eval.source, data_position + microbatch);
}

MixPattern::MixPattern(const std::vector<int32_t>& weights) : weights_(weights) {
  // Slot k of source i at the ideal time (2k + 1) / (2 w_i) of a period: compared exactly as
  // (2k + 1) * w_j against (2k' + 1) * w_i (below 2^17 * 2^16), ties to the lower source.
  struct Slot {
    int64_t twice_k_plus_1;
    int32_t source;
  };
  std::vector<Slot> slots;
  for (int32_t i = 0; i < static_cast<int32_t>(weights.size()); ++i) {
    for (int64_t k = 0; k < weights[i]; ++k) slots.push_back({2 * k + 1, i});
  }
  std::sort(slots.begin(), slots.end(), [&](const Slot& a, const Slot& b) {
    const int64_t lhs = a.twice_k_plus_1 * weights[b.source];
    const int64_t rhs = b.twice_k_plus_1 * weights[a.source];
    return lhs != rhs ? lhs < rhs : a.source < b.source;
  });
  for (const Slot& slot : slots) {
    source_.push_back(slot.source);
    rank_.push_back(static_cast<int32_t>(slot.twice_k_plus_1 / 2));
  }
}

MixPattern::Draw MixPattern::At(int64_t sequence) const {
  const int64_t slot = sequence % period();
  const int32_t source = source_[static_cast<size_t>(slot)];
  // (s div L) * w_i < s: no overflow.
  return {source, sequence / period() * weights_[static_cast<size_t>(source)] +
                      rank_[static_cast<size_t>(slot)]};
}

namespace {

// A stream opened with its windows; `field` names it in errors.
absl::StatusOr<Stream> OpenStream(const pp::v1::DataSpec& spec, absl::string_view field,
                                  int64_t seq_len, double holdout_fraction) {
  absl::StatusOr<TokenSource> source = TokenSource::Open(spec, field);
  if (!source.ok()) return source.status();
  if (source->size() < seq_len + 1) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": holds ", source->size(),
                                                   " tokens, need at least seq_len + 1 = ",
                                                   seq_len + 1));
  }
  const WindowRange windows = TrainWindows(source->size(), seq_len, holdout_fraction);
  return Stream{*std::move(source), windows, std::nullopt};
}

// Rows of B windows of T + 1 tokens, each read by `read(row, window)`, as inputs and targets.
template <typename ReadRow>
absl::StatusOr<Microbatch> FillMicrobatch(int64_t batch, int64_t seq_len, ReadRow read) {
  Microbatch mb;
  mb.batch = batch;
  mb.seq_len = seq_len;
  mb.inputs.resize(static_cast<size_t>(batch * seq_len));
  mb.targets.resize(mb.inputs.size());
  std::vector<int32_t> window(static_cast<size_t>(seq_len + 1));
  for (int64_t b = 0; b < batch; ++b) {
    if (absl::Status status = read(b, window.data()); !status.ok()) return status;
    std::copy(window.begin(), window.end() - 1, mb.inputs.begin() + b * seq_len);
    std::copy(window.begin() + 1, window.end(), mb.targets.begin() + b * seq_len);
  }
  return mb;
}

absl::Status CheckArguments(int64_t data_position, int64_t microbatch, int64_t batch,
                            int64_t seq_len) {
  if (batch >= 1 && seq_len >= 1 && data_position >= 0 && microbatch >= 0) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("ReadMicrobatch: bad arguments (data_position ",
                                                 data_position, ", microbatch ", microbatch,
                                                 ", batch ", batch, ", seq_len ", seq_len, ")"));
}

}  // namespace

absl::StatusOr<TrainData> TrainData::Open(const pp::v1::JobSpec& spec) {
  const pp::v1::DataSpec& data = spec.data();
  const int64_t T = spec.model().seq_len();
  TrainData opened;
  if (data.mix_size() == 0) {
    absl::StatusOr<Stream> stream = OpenStream(data, "data", T, spec.eval().holdout_fraction());
    if (!stream.ok()) return stream.status();
    opened.streams_.push_back(*std::move(stream));
  }
  std::vector<int32_t> weights;
  for (int i = 0; i < data.mix_size(); ++i) {
    // No holdout beside a mix (common/data_spec.h): every source reads all its windows.
    absl::StatusOr<Stream> stream =
        OpenStream(data.mix(i).data(), absl::StrCat("data.mix[", i, "].data"), T, 0);
    if (!stream.ok()) return stream.status();
    opened.streams_.push_back(*std::move(stream));
    weights.push_back(data.mix(i).weight());
  }
  if (!weights.empty()) opened.mix_.emplace(weights);
  for (const Stream& stream : opened.streams_) opened.windows_ += stream.windows.count;
  if (common::PacksMicrobatches(spec)) {  // one stream (validated): its training tokens' rows
    Stream& stream = opened.streams_[0];
    const int64_t n = stream.source.size();
    const double holdout = spec.eval().holdout_fraction();
    const int64_t tokens = holdout > 0 ? common::SplitWindows(n, T, holdout).held_out_first : n;
    absl::StatusOr<PackedStream> packed = PackedStream::Index(stream.source, 0, tokens, spec);
    if (!packed.ok()) return packed.status();
    stream.packed.emplace(*std::move(packed));
    opened.windows_ = stream.packed->rows().count();
  }
  return opened;
}

TrainData::Window TrainData::WindowOf(int64_t sequence) const {
  if (!mix_.has_value()) return {0, WindowStart(sequence, streams_[0].windows)};
  const MixPattern::Draw draw = mix_->At(sequence);
  const Stream& stream = streams_[static_cast<size_t>(draw.source)];
  return {draw.source, WindowStart(draw.sequence, stream.windows)};
}

absl::Status TrainData::ReadWindow(int64_t sequence, int64_t seq_len, int32_t* out) const {
  const Window window = WindowOf(sequence);
  return streams_[static_cast<size_t>(window.stream)].source.Read(window.start, seq_len + 1, out);
}

absl::StatusOr<Microbatch> ReadMicrobatch(const TrainData& data, int64_t data_position,
                                          int64_t microbatch, int64_t batch, int64_t seq_len) {
  if (absl::Status s = CheckArguments(data_position, microbatch, batch, seq_len); !s.ok()) {
    return s;
  }
  if (data.packed() != nullptr) {
    if (batch != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("ReadMicrobatch: a packed row is one sequence of rows, not ", batch));
    }
    return data.ReadRow(data_position + microbatch);
  }
  return FillMicrobatch(batch, seq_len, [&](int64_t b, int32_t* window) {
    return data.ReadWindow(data_position + microbatch * batch + b, seq_len, window);
  });
}

absl::StatusOr<Microbatch> ReadMicrobatch(const TokenSource& source, int64_t data_position,
                                          int64_t microbatch, int64_t batch, int64_t seq_len) {
  return ReadMicrobatch(source, AllWindows(source.size(), seq_len), data_position, microbatch,
                        batch, seq_len);
}

absl::StatusOr<Microbatch> ReadMicrobatch(const TokenSource& source, const WindowRange& range,
                                          int64_t data_position, int64_t microbatch,
                                          int64_t batch, int64_t seq_len) {
  if (absl::Status s = CheckArguments(data_position, microbatch, batch, seq_len); !s.ok()) {
    return s;
  }
  if (source.size() < seq_len + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data holds ", source.size(), " tokens, need at least seq_len + 1 = ", seq_len + 1));
  }
  if (range.count < 1 || range.first < 0 || range.first + range.count > source.size() - seq_len) {
    return absl::InvalidArgumentError(
        absl::StrCat("ReadMicrobatch: window starts [", range.first, ", ",
                     range.first + range.count, ") are empty or past the ",
                     source.size() - seq_len, " starts of the data"));
  }
  return FillMicrobatch(batch, seq_len, [&](int64_t b, int32_t* window) {
    return source.Read(WindowStart(data_position + microbatch * batch + b, range), seq_len + 1,
                       window);
  });
}

}  // namespace pp::data
