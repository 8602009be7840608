// packed_bench: useful tokens/s of packed variable-length microbatches (issue 33;
// train.tokens_per_microbatch = K, common/packing.h) against fixed windows padded to the longest
// document, on one in-memory corpus of mixed document lengths. Goal: packed >= 1.5x padded.
//
// Corpus: --docs byte documents of log-uniform lengths in [--min_len, --max_len] (fixed seed),
// each ending with the end-of-text byte 0, its other tokens drawn from 1..255; concatenated into
// one stream with one extra token at the end (the last document's last target).
// - Packed: a whole-model StageModel (units 0..n_layers+1, as worker/trainer/trainer.cc's
//   WholeModelStage) with StageOptions.max_tokens = K, microbatch_size 1, seq_len --max_len; the
//   rows of common::PackRows over the stream (piece limit min(seq_len, K)), each row one
//   microbatch with StageInput.sequences = common::RowSequences, step_tokens = the pass's tokens.
// - Padded: each document alone in a row of Lmax = the longest document's length (or --pad_to),
//   B = K / Lmax rows a microbatch (B,Lmax), the rows after the last document all padding;
//   document masking (StageInput.doc_start: the document starts at 0, its padding is a second
//   document) and ModelConfig.document_positions, so the document's own attention and positions
//   are exact.
// Both: Forward then Backward (fused) of every microbatch, no optimizer step (what packing
// changes is the forward and backward work). Useful tokens = the documents' tokens, the same in
// both; padding is computed but not counted.
// One untimed warm-up pass of each, then --rounds rounds of packed then padded (ABAB...) over the
// whole corpus; per round each mode's useful tokens/s and the ratio packed / padded; the figure is
// the median ratio, with min..max of the per-round ratios as its noise.
//   build/bin/packed_bench [--docs=64] [--rounds=5] [--tokens_per_microbatch=2048] [--pad_to=0]
//     [--min_len=16] [--max_len=1024] [--n_layers=2] [--d_model=128] [--n_heads=4] [--threads=1]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/packing.h"
#include "kernels/ops.h"
#include "worker/model/model.h"

ABSL_FLAG(int, docs, 64, "documents in the corpus");
ABSL_FLAG(int, min_len, 16, "shortest document (tokens, its end-of-text included)");
ABSL_FLAG(int, max_len, 1024, "longest document; also the packed model's seq_len");
ABSL_FLAG(int64_t, tokens_per_microbatch, 2048, "K: a packed row's most tokens; padded B = K/Lmax");
ABSL_FLAG(int, pad_to, 0, "padded rows' length Lmax; 0: the longest document's (must hold it)");
ABSL_FLAG(int, rounds, 5, "timed rounds, each one packed and one padded pass over the corpus");
ABSL_FLAG(int, n_layers, 2, "model layers");
ABSL_FLAG(int, d_model, 128, "model width C");
ABSL_FLAG(int, n_heads, 4, "attention heads");
ABSL_FLAG(int, threads, 1, "CPU ops threads (kernels::MakeOps)");
ABSL_FLAG(uint64_t, seed, 33, "corpus and initialisation seed");

namespace pp::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int32_t kEndOfText = 0;

void Check(const absl::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "packed_bench: %s: %s\n", what, s.ToString().c_str());
    std::exit(1);
  }
}
template <typename T>
T Take(absl::StatusOr<T> v, const char* what) {
  Check(v.status(), what);
  return *std::move(v);
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  }
  return "unknown";
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Corpus {
  std::vector<int32_t> stream;   // the documents, then one more token
  std::vector<int64_t> starts;   // document d: stream [starts[d], starts[d] + lengths[d])
  std::vector<int64_t> lengths;  // each ends with kEndOfText
  int64_t tokens() const { return static_cast<int64_t>(stream.size()) - 1; }
};

Corpus MakeCorpus(int docs, int min_len, int max_len, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> log_len(std::log(min_len), std::log(max_len + 1.0));
  std::uniform_int_distribution<int32_t> byte(1, 255);
  Corpus c;
  for (int d = 0; d < docs; ++d) {
    const int64_t n =
        std::clamp<int64_t>(static_cast<int64_t>(std::exp(log_len(rng))), min_len, max_len);
    c.starts.push_back(static_cast<int64_t>(c.stream.size()));
    c.lengths.push_back(n);
    for (int64_t t = 0; t + 1 < n; ++t) c.stream.push_back(byte(rng));
    c.stream.push_back(kEndOfText);
  }
  c.stream.push_back(byte(rng));  // the last document's last target
  return c;
}

// One microbatch's host arrays.
struct Batch {
  std::vector<int32_t> tokens, targets, doc_start, sequences;
};

// The packed rows of the corpus.
std::vector<Batch> PackedBatches(const Corpus& c, int64_t piece_limit, int64_t budget) {
  const common::PackedRows rows =
      Take(common::PackRows(
               static_cast<int64_t>(c.stream.size()),
               [&](int64_t start, int64_t count, int32_t* out) {
                 std::memcpy(out, c.stream.data() + start, sizeof(int32_t) * count);
                 return absl::OkStatus();
               },
               kEndOfText, piece_limit, budget),
           "PackRows");
  std::vector<Batch> out;
  for (int64_t g = 0; g < rows.count(); ++g) {
    const int32_t* in = c.stream.data() + rows.starts[g];
    const int64_t n = rows.length(g);
    Batch b;
    b.tokens.assign(in, in + n);
    b.targets.assign(in + 1, in + n + 1);
    b.sequences = common::RowSequences(in, n, kEndOfText, piece_limit);
    out.push_back(std::move(b));
  }
  return out;
}

// Each document alone in a row of `lmax` tokens, `rows` rows a microbatch. Padding: end-of-text
// tokens (inputs and targets), one document from the row's first padding position.
std::vector<Batch> PaddedBatches(const Corpus& c, int64_t lmax, int rows) {
  std::vector<Batch> out;
  const int docs = static_cast<int>(c.lengths.size());
  for (int first = 0; first < docs; first += rows) {
    Batch b;
    b.tokens.assign(static_cast<size_t>(rows * lmax), kEndOfText);
    b.targets.assign(b.tokens.size(), kEndOfText);
    b.doc_start.assign(b.tokens.size(), 0);
    for (int r = 0; r < rows; ++r) {
      const int d = first + r;
      const int64_t n = d < docs ? c.lengths[d] : 0;
      const int32_t* in = d < docs ? c.stream.data() + c.starts[d] : nullptr;
      for (int64_t t = 0; t < lmax; ++t) {
        const size_t i = static_cast<size_t>(r * lmax + t);
        if (t < n) {
          b.tokens[i] = in[t];
          b.targets[i] = in[t + 1];
        }
        b.doc_start[i] = static_cast<int32_t>(t < n ? 0 : n);
      }
    }
    out.push_back(std::move(b));
  }
  return out;
}

// Forward + Backward of every batch; returns {seconds, mean loss}.
std::pair<double, double> Pass(model::StageModel& m, const std::vector<Batch>& batches, bool packed,
                               int64_t step_tokens) {
  const auto start = Clock::now();
  double loss = 0;
  for (const Batch& b : batches) {
    model::StageInput in;
    in.tokens = b.tokens.data();
    in.targets = b.targets.data();
    if (packed) {
      in.sequences = b.sequences.data();
      in.num_sequences = static_cast<int>(b.sequences.size()) - 1;
      in.step_tokens = step_tokens;
    } else {
      in.doc_start = b.doc_start.data();
    }
    loss += Take(m.Forward(0, in, nullptr), "Forward");
    Check(m.Backward(0, nullptr, nullptr), "Backward");
  }
  return {std::chrono::duration<double>(Clock::now() - start).count(),
          loss / static_cast<double>(batches.size())};
}

struct Setup {
  Corpus corpus;
  int64_t K = 0, useful = 0, longest = 0, lmax = 0;
  int B = 0;
};

// The flags checked, the corpus made and described. nullopt (after a line on stderr) on bad flags.
std::optional<Setup> MakeSetup() {
  const int docs = absl::GetFlag(FLAGS_docs), min_len = absl::GetFlag(FLAGS_min_len),
            max_len = absl::GetFlag(FLAGS_max_len), rounds = absl::GetFlag(FLAGS_rounds);
  Setup s;
  s.K = absl::GetFlag(FLAGS_tokens_per_microbatch);
  if (docs < 1 || min_len < 1 || max_len < min_len || s.K < max_len || rounds < 1) {
    std::fprintf(stderr, "packed_bench: need docs, rounds >= 1, 1 <= min_len <= max_len <= K\n");
    return std::nullopt;
  }
  s.corpus = MakeCorpus(docs, min_len, max_len, absl::GetFlag(FLAGS_seed));
  const std::vector<int64_t>& lengths = s.corpus.lengths;
  s.useful = s.corpus.tokens();
  s.longest = *std::max_element(lengths.begin(), lengths.end());
  s.lmax = absl::GetFlag(FLAGS_pad_to) > 0 ? absl::GetFlag(FLAGS_pad_to) : s.longest;
  if (s.lmax < s.longest || s.lmax > s.K) {
    std::fprintf(stderr, "packed_bench: --pad_to must be in [longest document, K]\n");
    return std::nullopt;
  }
  s.B = static_cast<int>(s.K / s.lmax);
  std::printf("CPU: %s (ops: cpu, %d thread)\n", CpuModel().c_str(), absl::GetFlag(FLAGS_threads));
  std::printf(
      "corpus: %d documents, %lld tokens; lengths log-uniform %d..%d: mean %.1f, median "
      "%.1f, min %lld, max %lld (seed %llu)\n",
      docs, static_cast<long long>(s.useful), min_len, max_len,
      static_cast<double>(s.useful) / docs,
      Median(std::vector<double>(lengths.begin(), lengths.end())),
      static_cast<long long>(*std::min_element(lengths.begin(), lengths.end())),
      static_cast<long long>(s.longest),
      static_cast<unsigned long long>(absl::GetFlag(FLAGS_seed)));
  return s;
}

// A whole-model stage of the flags' sizes, document positions, for `microbatches` of `batch`
// rows of `seq_len` (max_tokens > 0: packed rows of up to that many tokens).
std::unique_ptr<model::StageModel> WholeModel(kernels::Ops* ops, int seq_len, int batch,
                                              int microbatches, int64_t max_tokens) {
  model::ModelConfig config;
  config.vocab_size = 256;
  config.d_model = absl::GetFlag(FLAGS_d_model);
  config.n_heads = absl::GetFlag(FLAGS_n_heads);
  config.n_layers = absl::GetFlag(FLAGS_n_layers);
  config.seq_len = seq_len;
  config.document_positions = true;  // packed rows need it; padded rows mask like documents
  model::StageOptions stage;
  stage.first_unit = 0;
  stage.last_unit = model::NumUnits(config) - 1;
  stage.seed = absl::GetFlag(FLAGS_seed);
  stage.microbatch_size = batch;
  stage.microbatches = microbatches;
  stage.max_tokens = max_tokens;
  return Take(model::StageModel::Create(ops, config, stage), "StageModel");
}

// The work each mode computes: tokens (the linear ops) and attention pairs (sum of L^2).
void PrintWork(const Setup& s, const std::vector<Batch>& packed, size_t padded_microbatches,
               int64_t piece_limit) {
  int64_t squares = 0;
  size_t sequences = 0;
  for (const Batch& b : packed) {
    squares += common::SequenceSquares(b.sequences);
    sequences += b.sequences.size() - 1;
  }
  const int64_t padded_tokens = static_cast<int64_t>(padded_microbatches) * s.B * s.lmax;
  std::printf(
      "model: %d layers, C=%d, %d heads, vocab 256; Forward + Backward per microbatch, no "
      "optimizer step\n",
      absl::GetFlag(FLAGS_n_layers), absl::GetFlag(FLAGS_d_model), absl::GetFlag(FLAGS_n_heads));
  std::printf(
      "packed: K=%lld, seq_len %d (piece limit %lld): %zu rows (mean %.0f tokens, %.1f%% "
      "of K), %zu sequences\n",
      static_cast<long long>(s.K), absl::GetFlag(FLAGS_max_len),
      static_cast<long long>(piece_limit), packed.size(),
      static_cast<double>(s.useful) / packed.size(),
      100.0 * s.useful / (static_cast<double>(packed.size()) * s.K), sequences);
  std::printf(
      "padded: Lmax=%lld (%s), B=K/Lmax=%d, document masking + document "
      "positions: %zu microbatches of (%d,%lld), %lld tokens computed, %.1f%% padding\n",
      static_cast<long long>(s.lmax), s.lmax == s.longest ? "the longest document" : "--pad_to",
      s.B, padded_microbatches, s.B, static_cast<long long>(s.lmax),
      static_cast<long long>(padded_tokens),
      100.0 * (padded_tokens - s.useful) / static_cast<double>(padded_tokens));
  // Attention pairs: packed, each sequence's L^2; padded, each document's and its padding's.
  int64_t padded_squares = 0;
  for (size_t i = 0; i < padded_microbatches * s.B; ++i) {
    const int64_t n = i < s.corpus.lengths.size() ? s.corpus.lengths[i] : 0;
    padded_squares += n * n + (s.lmax - n) * (s.lmax - n);
  }
  std::printf(
      "work padded / packed: %.2fx the tokens (the linear ops), %.2fx the attention "
      "(sum of L^2 per document: %lld / %lld; padded adds each padding run's own)\n",
      static_cast<double>(padded_tokens) / s.useful, static_cast<double>(padded_squares) / squares,
      static_cast<long long>(padded_squares), static_cast<long long>(squares));
}

// A warm-up of each, then --rounds of packed then padded: useful tokens/s of each and the ratio.
void Rounds(const Setup& s, model::StageModel& packed_model, const std::vector<Batch>& packed,
            model::StageModel& padded_model, const std::vector<Batch>& padded) {
  const int rounds = absl::GetFlag(FLAGS_rounds);
  const auto [wp, packed_loss] = Pass(packed_model, packed, true, s.useful);
  const auto [wd, padded_loss] = Pass(padded_model, padded, false, s.useful);
  std::printf("warm-up: packed %.2f s (mean microbatch loss %.4f), padded %.2f s (%.4f)\n", wp,
              packed_loss, wd, padded_loss);
  std::printf("%-6s %16s %16s %8s\n", "round", "packed tok/s", "padded tok/s", "ratio");
  std::vector<double> ratios, packed_rates, padded_rates;
  for (int r = 1; r <= rounds; ++r) {
    const double tp = Pass(packed_model, packed, true, s.useful).first;
    const double td = Pass(padded_model, padded, false, s.useful).first;
    packed_rates.push_back(s.useful / tp);
    padded_rates.push_back(s.useful / td);
    ratios.push_back(td / tp);
    std::printf("%-6d %16.0f %16.0f %7.2fx\n", r, packed_rates.back(), padded_rates.back(),
                ratios.back());
    std::fflush(stdout);
  }
  const auto [lo, hi] = std::minmax_element(ratios.begin(), ratios.end());
  std::printf("useful tokens/s (median of %d rounds): packed %.0f, padded %.0f\n", rounds,
              Median(packed_rates), Median(padded_rates));
  std::printf("packed / padded: %.2fx median (rounds %.2f..%.2f) (goal >= 1.5x: %s)\n",
              Median(ratios), *lo, *hi, Median(ratios) >= 1.5 ? "met" : "missed");
}

int Main() {
  const std::optional<Setup> setup = MakeSetup();
  if (!setup) return 1;
  const Setup& s = *setup;
  auto ops = Take(kernels::MakeOps("cpu", absl::GetFlag(FLAGS_threads)), "MakeOps");
  // Packed: rows of whole documents, K tokens at most.
  const int seq_len = absl::GetFlag(FLAGS_max_len);
  const int64_t piece_limit = std::min<int64_t>(seq_len, s.K);
  const std::vector<Batch> packed = PackedBatches(s.corpus, piece_limit, s.K);
  int64_t packed_tokens = 0;
  for (const Batch& b : packed) packed_tokens += static_cast<int64_t>(b.tokens.size());
  if (packed_tokens != s.useful) {
    std::fprintf(stderr, "packed_bench: rows hold %lld tokens, corpus %lld\n",
                 static_cast<long long>(packed_tokens), static_cast<long long>(s.useful));
    return 1;
  }
  auto packed_model = WholeModel(ops.get(), seq_len, 1, static_cast<int>(packed.size()), s.K);
  // Padded: one document a row of Lmax, B rows a microbatch, document masking.
  const std::vector<Batch> padded = PaddedBatches(s.corpus, s.lmax, s.B);
  auto padded_model =
      WholeModel(ops.get(), static_cast<int>(s.lmax), s.B, static_cast<int>(padded.size()), 0);
  PrintWork(s, packed, padded.size(), piece_limit);
  Rounds(s, *packed_model, packed, *padded_model, padded);
  std::printf(
      "shape-header overhead: see bench/transport/boundary_bench (bench/NOTES.md "
      "\"Boundary headers\")\n");
  return 0;
}

}  // namespace
}  // namespace pp::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return pp::bench::Main();
}
