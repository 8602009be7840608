#include "worker/data/data.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
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

absl::StatusOr<TokenSource> TokenSource::Open(const pp::v1::DataSpec& spec) {
  std::string format = spec.format().empty() ? "bytes" : spec.format();
  if (format == "generated") return Generated(spec.generated_seed(), spec.generated_tokens());
  if (format != "bytes" && format != "uint16") {
    return absl::InvalidArgumentError(absl::StrCat("data.format: unknown value \"", format,
                                                   "\" (one of bytes, uint16, generated)"));
  }
  absl::StatusOr<pp::common::RegularFile> file = pp::common::RegularFile::Open(spec.path());
  if (!file.ok()) return file.status();
  TokenSource source;
  source.uint16_ = format == "uint16";
  if (source.uint16_ && file->size() % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(spec.path(), " has an odd size (", file->size(), " bytes) for uint16 tokens"));
  }
  source.size_ = static_cast<int64_t>(source.uint16_ ? file->size() / 2 : file->size());
  source.file_ = *std::move(file);
  return source;
}

TokenSource TokenSource::Generated(uint64_t seed, int64_t n_tokens) {
  TokenSource source;
  std::string text = GenerateCorpus(seed, n_tokens);
  source.owned_.assign(text.begin(), text.end());
  source.size_ = static_cast<int64_t>(source.owned_.size());
  return source;
}

absl::Status TokenSource::Read(int64_t start, int64_t count, int32_t* out) const {
  if (!file_.has_value()) {
    for (int64_t i = 0; i < count; ++i) out[i] = owned_[static_cast<size_t>(start + i)];
    return absl::OkStatus();
  }
  int64_t width = uint16_ ? 2 : 1;
  std::vector<uint8_t> bytes(static_cast<size_t>(count * width));
  absl::Status status =
      file_->ReadAt(static_cast<uint64_t>(start * width), bytes.size(), bytes.data());
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
  absl::StatusOr<TokenSource> source = TokenSource::Open(eval.has_data() ? eval.data() : spec.data());
  if (!source.ok()) return source.status();
  const WindowRange windows = eval.has_data()
                                  ? AllWindows(source->size(), T)
                                  : HeldOutWindows(source->size(), T, eval.holdout_fraction());
  return EvalSource{*std::move(source), windows};
}

absl::StatusOr<Microbatch> ReadMicrobatch(const TokenSource& source, int64_t data_position,
                                          int64_t microbatch, int64_t batch, int64_t seq_len) {
  return ReadMicrobatch(source, AllWindows(source.size(), seq_len), data_position, microbatch,
                        batch, seq_len);
}

absl::StatusOr<Microbatch> ReadMicrobatch(const TokenSource& source, const WindowRange& range,
                                          int64_t data_position, int64_t microbatch,
                                          int64_t batch, int64_t seq_len) {
  if (batch < 1 || seq_len < 1 || data_position < 0 || microbatch < 0) {
    return absl::InvalidArgumentError(absl::StrCat("ReadMicrobatch: bad arguments (data_position ",
                                                   data_position, ", microbatch ", microbatch,
                                                   ", batch ", batch, ", seq_len ", seq_len, ")"));
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
  Microbatch mb;
  mb.batch = batch;
  mb.seq_len = seq_len;
  mb.inputs.resize(static_cast<size_t>(batch * seq_len));
  mb.targets.resize(mb.inputs.size());
  std::vector<int32_t> window(static_cast<size_t>(seq_len + 1));
  for (int64_t b = 0; b < batch; ++b) {
    int64_t start = WindowStart(data_position + microbatch * batch + b, range);
    absl::Status status = source.Read(start, seq_len + 1, window.data());
    if (!status.ok()) return status;
    std::copy(window.begin(), window.end() - 1, mb.inputs.begin() + b * seq_len);
    std::copy(window.begin() + 1, window.end(), mb.targets.begin() + b * seq_len);
  }
  return mb;
}

}  // namespace pp::data
