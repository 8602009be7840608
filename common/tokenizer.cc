#include "common/tokenizer.h"

#include <re2/re2.h>

#include <algorithm>
#include <array>
#include <mutex>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/tokenizer_files.h"
#include "common/tokenizer_text.h"

namespace pp::common {
namespace {

// Words longer than this are merged every time rather than cached: they are rare, and a cache
// of them would grow with the input.
constexpr size_t kMaxCachedWordBytes = 64;
constexpr int kCacheShards = 64;
// Per shard; a full shard is emptied (about 16 MB in all at most, whatever the input).
constexpr size_t kMaxCachedWordsPerShard = 4096;

// Pre-token (raw bytes) -> ids. Shared by every thread that encodes with one Tokenizer: sharded,
// so that threads rarely meet on a lock.
class WordCache {
 public:
  bool Lookup(absl::string_view word, std::vector<int32_t>* out) const {
    const Shard& shard = shards_[ShardOf(word)];
    std::lock_guard<std::mutex> lock(shard.mu);
    auto it = shard.words.find(word);
    if (it == shard.words.end()) return false;
    out->insert(out->end(), it->second.begin(), it->second.end());
    return true;
  }
  void Insert(absl::string_view word, absl::Span<const int32_t> ids) {
    Shard& shard = shards_[ShardOf(word)];
    std::lock_guard<std::mutex> lock(shard.mu);
    if (shard.words.size() >= kMaxCachedWordsPerShard) shard.words.clear();
    shard.words.try_emplace(word, ids.begin(), ids.end());
  }

 private:
  // std::mutex rather than absl::Mutex: Debian's Abseil is built with its deadlock detector on,
  // which costs more than the lookup itself.
  struct Shard {
    mutable std::mutex mu;
    absl::flat_hash_map<std::string, std::vector<int32_t>> words;  // guarded by mu
  };
  static size_t ShardOf(absl::string_view word) {
    return absl::Hash<absl::string_view>()(word) % kCacheShards;
  }
  std::array<Shard, kCacheShards> shards_;
};

struct MergeTarget {
  int32_t rank;
  int32_t id;
};

uint64_t PairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

std::string Quote(absl::string_view token) {
  return absl::StrCat("\"", absl::CHexEscape(token.substr(0, 40)),
                      token.size() > 40 ? "...\"" : "\"");
}

// What Load builds from the files; Tokenizer::Impl adds the encoding steps and the cache.
struct Tables {
  // The id of each byte's one-character token; -1 when the vocabulary lacks it.
  std::array<int32_t, 256> byte_ids;
  absl::flat_hash_map<uint64_t, MergeTarget> merges;
  // Raw bytes -> id, for ignore_merges only.
  absl::flat_hash_map<std::string, int32_t> raw_vocab;
  std::vector<TokenizerFiles::AddedToken> added;
  // Bytes of each id (added tokens: their text); known[id] == 0 for ids no token has.
  std::vector<std::string> id_bytes;
  std::vector<uint8_t> known;
  std::optional<int32_t> unk;
  std::optional<int32_t> end_of_text;
  bool add_prefix_space = false;
  bool use_regex = true;
  bool ignore_merges = false;
  std::vector<std::string> files;
};

// The vocabulary's text -> id map, its ids checked for duplicates; fills id_bytes and known.
absl::StatusOr<absl::flat_hash_map<std::string, int32_t>> BuildVocab(const TokenizerFiles& files,
                                                                     Tables* impl) {
  int32_t max_id = -1;
  for (const auto& [token, id] : files.vocab) max_id = std::max(max_id, id);
  for (const auto& token : files.added) max_id = std::max(max_id, token.id);
  impl->id_bytes.assign(max_id + 1, std::string());
  impl->known.assign(max_id + 1, 0);
  absl::flat_hash_map<std::string, int32_t> vocab;
  vocab.reserve(files.vocab.size());
  std::vector<std::pair<int32_t, absl::string_view>> by_id;
  by_id.reserve(files.vocab.size());
  for (const auto& [token, id] : files.vocab) {
    vocab.emplace(token, id);
    by_id.emplace_back(id, token);
  }
  // Sorted, so that the message names the same pair on every run.
  std::sort(by_id.begin(), by_id.end());
  for (size_t i = 1; i < by_id.size(); ++i) {
    if (by_id[i].first == by_id[i - 1].first) {
      return absl::InvalidArgumentError(
          absl::StrCat(files.vocab_origin, ": tokens ", Quote(by_id[i - 1].second), " and ",
                       Quote(by_id[i].second), " share id ", by_id[i].first));
    }
  }
  for (const auto& [token, id] : files.vocab) {
    impl->id_bytes[id] = ByteLevelToBytes(token);
    impl->known[id] = 1;
    if (files.ignore_merges) impl->raw_vocab.emplace(impl->id_bytes[id], id);
  }
  return vocab;
}

absl::Status BuildMerges(const TokenizerFiles& files,
                         const absl::flat_hash_map<std::string, int32_t>& vocab, Tables* impl) {
  impl->merges.reserve(files.merges.size());
  std::string joined;
  for (size_t i = 0; i < files.merges.size(); ++i) {
    const auto& [a, b] = files.merges[i];
    joined = a + b;
    for (const std::string* token : {&a, &b, &std::as_const(joined)}) {
      if (!vocab.contains(*token)) {
        return absl::InvalidArgumentError(absl::StrCat(files.merge_origin(i), ": token ",
                                                       Quote(*token), " is not in the vocabulary"));
      }
    }
    // A repeated pair keeps its last rank, as HF's map of merges does.
    impl->merges[PairKey(vocab.at(a), vocab.at(b))] = {static_cast<int32_t>(i), vocab.at(joined)};
  }
  return absl::OkStatus();
}

}  // namespace

struct Tokenizer::Impl : Tables {
  mutable WordCache cache;

  void EncodeText(absl::string_view text, std::vector<int32_t>* out) const;
  void EncodeSegment(absl::string_view segment, std::vector<int32_t>* out) const;
  void EncodeWord(absl::string_view word, std::vector<int32_t>* out) const;
  void Merge(absl::string_view word, std::vector<int32_t>* out) const;
};

absl::StatusOr<Tokenizer> Tokenizer::Load(const std::string& dir) {
  absl::StatusOr<TokenizerFiles> files = ReadTokenizerFiles(dir);
  if (!files.ok()) return files.status();
  auto impl = std::make_unique<Impl>();
  absl::StatusOr<absl::flat_hash_map<std::string, int32_t>> vocab = BuildVocab(*files, impl.get());
  if (!vocab.ok()) return vocab.status();
  if (absl::Status s = BuildMerges(*files, *vocab, impl.get()); !s.ok()) return s;
  for (int b = 0; b < 256; ++b) {
    auto it = vocab->find(ByteToByteLevel(static_cast<uint8_t>(b)));
    impl->byte_ids[b] = it == vocab->end() ? -1 : it->second;
  }
  if (files->unk_token.has_value()) {
    auto it = vocab->find(*files->unk_token);
    if (it == vocab->end()) {
      return absl::InvalidArgumentError(absl::StrCat(files->vocab_origin, ": unk_token ",
                                                     Quote(*files->unk_token), " is not in it"));
    }
    impl->unk = it->second;
  }
  for (const TokenizerFiles::AddedToken& token : files->added) {
    // HF decodes an added token to its text (its id may also be a vocabulary entry).
    impl->id_bytes[token.id] = token.content;
    impl->known[token.id] = 1;
    if (token.content == "<|endoftext|>") impl->end_of_text = token.id;
  }
  if (!impl->end_of_text.has_value()) {
    auto it = vocab->find("<|endoftext|>");
    if (it != vocab->end()) impl->end_of_text = it->second;
  }
  impl->added = std::move(files->added);
  impl->add_prefix_space = files->add_prefix_space;
  impl->use_regex = files->use_regex;
  impl->ignore_merges = files->ignore_merges;
  impl->files = std::move(files->files);
  return Tokenizer(std::move(impl));
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->id_bytes.size()); }
std::optional<int32_t> Tokenizer::end_of_text() const { return impl_->end_of_text; }
const std::vector<std::string>& Tokenizer::files() const { return impl_->files; }

bool Tokenizer::SplitsAfterNewlines() const {
  if (impl_->add_prefix_space || !impl_->use_regex) return false;
  for (const TokenizerFiles::AddedToken& token : impl_->added) {
    if (absl::StrContains(token.content, '\n')) return false;
  }
  return true;
}

std::vector<int32_t> Tokenizer::Encode(absl::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  std::string replaced;
  if (!IsValidUtf8(text)) {
    replaced = ReplaceInvalidUtf8(text);
    text = replaced;
  }
  impl_->EncodeText(text, &ids);
  return ids;
}

absl::StatusOr<std::string> Tokenizer::Decode(absl::Span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size() || !impl_->known[id]) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " is not in the vocabulary (", vocab_size(), " ids)"));
    }
    out += impl_->id_bytes[id];
  }
  return out;
}

// Added tokens are split out first, leftmost match and then the longest (HF's
// AddedVocabulary, an Aho-Corasick LeftmostLongest search); the text between is pre-tokenized.
void Tokenizer::Impl::EncodeText(absl::string_view text, std::vector<int32_t>* out) const {
  constexpr size_t kUnknown = absl::string_view::npos - 1;
  std::vector<size_t> next(added.size(), kUnknown);
  size_t pos = 0;
  while (pos < text.size()) {
    size_t best = absl::string_view::npos;
    int best_token = -1;
    for (size_t t = 0; t < added.size(); ++t) {
      if (next[t] == kUnknown || next[t] < pos) next[t] = text.find(added[t].content, pos);
      if (next[t] < best || (next[t] == best && next[t] != absl::string_view::npos &&
                             added[t].content.size() > added[best_token].content.size())) {
        best = next[t];
        best_token = static_cast<int>(t);
      }
    }
    if (best == absl::string_view::npos) best = text.size();
    EncodeSegment(text.substr(pos, best - pos), out);
    if (best == text.size()) break;
    out->push_back(added[best_token].id);
    pos = best + added[best_token].content.size();
  }
}

void Tokenizer::Impl::EncodeSegment(absl::string_view segment, std::vector<int32_t>* out) const {
  if (segment.empty()) return;
  std::string prefixed;
  // HF's ByteLevel adds the space to each piece between added tokens that lacks one.
  if (add_prefix_space && segment[0] != ' ') {
    prefixed = absl::StrCat(" ", segment);
    segment = prefixed;
  }
  if (!use_regex) {
    EncodeWord(segment, out);
    return;
  }
  for (size_t pos = 0; pos < segment.size();) {
    size_t end = Gpt2PreTokenEnd(segment, pos);
    EncodeWord(segment.substr(pos, end - pos), out);
    pos = end;
  }
}

void Tokenizer::Impl::EncodeWord(absl::string_view word, std::vector<int32_t>* out) const {
  if (word.size() == 1) {
    int32_t id = byte_ids[static_cast<uint8_t>(word[0])];
    if (id >= 0 || unk.has_value()) out->push_back(id >= 0 ? id : *unk);
    return;
  }
  if (ignore_merges) {
    auto it = raw_vocab.find(word);
    if (it != raw_vocab.end()) {
      out->push_back(it->second);
      return;
    }
  }
  bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable && cache.Lookup(word, out)) return;
  size_t first = out->size();
  Merge(word, out);
  if (cacheable) cache.Insert(word, absl::MakeConstSpan(out->data() + first, out->size() - first));
}

// GPT-2's BPE on one pre-token: start from one symbol per byte, then merge the adjacent pair of
// lowest rank, the leftmost one on a tie, until no pair has a rank. A heap of candidate pairs
// (checked when popped, since merges around them may have changed them) keeps a long word
// O(n log n), like HF's Word::merge_all.
void Tokenizer::Impl::Merge(absl::string_view word, std::vector<int32_t>* out) const {
  struct Symbol {
    int32_t id;  // -1 once merged into its left neighbour
    int32_t prev;
    int32_t next;
  };
  struct Candidate {
    int32_t rank, left, right, left_id, right_id, id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Candidate> heap;
  symbols.clear();
  heap.clear();
  for (char c : word) {
    int32_t id = byte_ids[static_cast<uint8_t>(c)];
    // HF's BPE drops a character its vocabulary lacks when there is no unk token.
    if (id < 0 && !unk.has_value()) continue;
    int32_t n = static_cast<int32_t>(symbols.size());
    symbols.push_back({id >= 0 ? id : *unk, n - 1, n + 1});
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;
  auto consider = [&](int32_t left) {
    int32_t right = symbols[left].next;
    if (right < 0) return;
    auto it = merges.find(PairKey(symbols[left].id, symbols[right].id));
    if (it == merges.end()) return;
    heap.push_back(
        {it->second.rank, left, right, symbols[left].id, symbols[right].id, it->second.id});
    std::push_heap(heap.begin(), heap.end(), std::greater<Candidate>());
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) consider(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<Candidate>());
    Candidate c = heap.back();
    heap.pop_back();
    Symbol& left = symbols[c.left];
    if (left.id != c.left_id || left.next != c.right || symbols[c.right].id != c.right_id) {
      continue;  // stale: one side merged since
    }
    Symbol& right = symbols[c.right];
    left.id = c.id;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    right.id = -1;
    if (left.prev >= 0) consider(left.prev);
    consider(c.left);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) out->push_back(symbols[i].id);
}

}  // namespace pp::common
