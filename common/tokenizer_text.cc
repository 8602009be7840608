#include "common/tokenizer_text.h"

#include <re2/re2.h>

#include <algorithm>
#include <array>

#include "absl/strings/str_cat.h"

namespace pp::common {
namespace {

// The length of the valid UTF-8 sequence at p[0..n), or minus the length of its maximal invalid
// subpart: the longest prefix of a well-formed sequence (at least one byte), the unit Python's
// "replace" handler turns into one U+FFFD. REQUIRES n > 0.
int Utf8Sequence(const uint8_t* p, size_t n) {
  uint8_t b = p[0];
  if (b < 0x80) return 1;
  int len;
  uint8_t lo = 0x80, hi = 0xBF;  // the second byte's range, narrowed per Unicode Table 3-7
  if (b >= 0xC2 && b <= 0xDF) {
    len = 2;
  } else if (b >= 0xE0 && b <= 0xEF) {
    len = 3;
    if (b == 0xE0) lo = 0xA0;  // overlong
    if (b == 0xED) hi = 0x9F;  // surrogates
  } else if (b >= 0xF0 && b <= 0xF4) {
    len = 4;
    if (b == 0xF0) lo = 0x90;  // overlong
    if (b == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return -1;
  }
  for (int i = 1; i < len; ++i) {
    if (static_cast<size_t>(i) >= n || p[i] < lo || p[i] > hi) return -i;
    lo = 0x80;
    hi = 0xBF;
  }
  return len;
}

// The code point at s[i], a valid sequence's first byte.
char32_t CodePointAt(absl::string_view s, size_t i) {
  auto b = [&](size_t k) { return static_cast<char32_t>(static_cast<uint8_t>(s[i + k])); };
  char32_t c = b(0);
  if (c < 0x80) return c;
  if (c < 0xE0) return ((c & 0x1F) << 6) | (b(1) & 0x3F);
  if (c < 0xF0) return ((c & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
  return ((c & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
}

void AppendUtf8(char32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

// Unicode's White_Space property (PropList.txt), which is what `\s` matches in HF `tokenizers`
// (Oniguruma, Unicode mode). RE2's `\s` is ASCII only ([\t\n\f\r ]), so the class is spelled out.
constexpr char kWhiteSpace[] =
    "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
    "\\x{202F}\\x{205F}\\x{3000}";

bool IsWhiteSpace(char32_t c) {
  switch (c) {
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return (c >= 0x9 && c <= 0xD) || (c >= 0x2000 && c <= 0x200A);
  }
}

// GPT-2's pattern without `\s+(?!\S)`: RE2 has no lookahead, so Gpt2PreTokenEnd applies it to
// the `\s+` match. One RE2 per thread: its DFA cache is locked per search, which would serialise
// encoding threads on a shared object.
const RE2& Gpt2Pattern() {
  thread_local const RE2 pattern(absl::StrCat("'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^",
                                              kWhiteSpace, "\\p{L}\\p{N}]+|[", kWhiteSpace, "]+"));
  return pattern;
}

bool IsContinuation(char c) { return (static_cast<uint8_t>(c) & 0xC0) == 0x80; }

// bytes_to_unicode (GPT-2 encoder.py): printable Latin-1 bytes stand for themselves, the other
// 68 for 256, 257, ... in byte order, so that no token holds a space or a control character.
struct ByteLevelMap {
  std::array<char32_t, 256> to_char;
  std::array<int16_t, 256 + 68> to_byte;
};

const ByteLevelMap& Map() {
  static const ByteLevelMap map = [] {
    ByteLevelMap m;
    m.to_byte.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      m.to_char[b] = printable ? static_cast<char32_t>(b) : next++;
      m.to_byte[m.to_char[b]] = static_cast<int16_t>(b);
    }
    return m;
  }();
  return map;
}

}  // namespace

bool IsValidUtf8(absl::string_view text) {
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  size_t n = text.size();
  for (size_t i = 0; i < n;) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    int len = Utf8Sequence(p + i, n - i);
    if (len < 0) return false;
    i += len;
  }
  return true;
}

std::string ReplaceInvalidUtf8(absl::string_view text) {
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  std::string out;
  out.reserve(text.size() + text.size() / 2);
  for (size_t i = 0; i < text.size();) {
    int len = Utf8Sequence(p + i, text.size() - i);
    if (len > 0) {
      out.append(text.data() + i, len);
      i += len;
    } else {
      out.append("\xEF\xBF\xBD");
      i += -len;
    }
  }
  return out;
}

size_t Gpt2PreTokenEnd(absl::string_view text, size_t pos) {
  const RE2& pattern = Gpt2Pattern();
  re2::StringPiece whole(text.data(), text.size());
  // RE2 searches at most to `limit`: a short window keeps each search from scanning the rest of
  // the text. Every alternative is decided by its first three characters, so a match that ends
  // before the window's end is the match on the whole text; one that reaches it is retried wider.
  for (size_t window = 256;; window *= 8) {
    size_t limit = std::min(text.size(), pos + window);
    while (limit < text.size() && IsContinuation(text[limit])) ++limit;
    re2::StringPiece match;
    if (!pattern.Match(whole, pos, limit, RE2::ANCHOR_START, &match, 1) || match.empty()) {
      // Unreachable for valid UTF-8 (every character matches an alternative): one character.
      size_t end = pos + 1;
      while (end < text.size() && IsContinuation(text[end])) ++end;
      return end;
    }
    size_t end = pos + match.size();
    if (end == limit && limit < text.size()) continue;
    size_t last = end - 1;
    while (last > pos && IsContinuation(text[last])) --last;
    // Only the `\s+` alternative ends in white space. `\s+(?!\S)` (tried before it) leaves the
    // run's last character to start the next word, when the run is longer than it and a
    // non-space follows: "  hello" is " ", " hello".
    if (IsWhiteSpace(CodePointAt(text, last)) && end < text.size() && last > pos) return last;
    return end;
  }
}

std::string ByteToByteLevel(uint8_t b) {
  std::string out;
  AppendUtf8(Map().to_char[b], &out);
  return out;
}

std::string ByteLevelToBytes(absl::string_view token) {
  const ByteLevelMap& map = Map();
  std::string out;
  out.reserve(token.size());
  const auto* p = reinterpret_cast<const uint8_t*>(token.data());
  for (size_t i = 0; i < token.size();) {
    int len = Utf8Sequence(p + i, token.size() - i);
    char32_t c = len > 0 ? CodePointAt(token, i) : 0xFFFF;
    if (c >= map.to_byte.size() || map.to_byte[c] < 0) return std::string(token);
    out.push_back(static_cast<char>(map.to_byte[c]));
    i += len;
  }
  return out;
}

}  // namespace pp::common
