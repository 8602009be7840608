// libFuzzer harness: common/tokenizer.h on arbitrary folders and text. The input is split at its
// first two NUL bytes: FILE1 \0 FILE2 \0 TEXT. An even first byte makes FILE1 vocab.json and FILE2
// merges.txt; an odd one makes FILE1 tokenizer.json. When the folder loads, TEXT is encoded:
// every id must be in the vocabulary and decode, encoding again must give the same ids (the word
// cache), and when SplitsAfterNewlines() promises it, TEXT cut after each such newline must
// encode as its two pieces do.
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <system_error>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/tokenizer.h"

namespace {

// The folder the harness writes its files to, removed at exit (a plain array: it outlives every
// static destructor, so the atexit handler may read it).
char dir_name[] = "/tmp/tokenizer_fuzzer.XXXXXX";

void RemoveDir() {
  std::error_code ignored;
  std::filesystem::remove_all(dir_name, ignored);
}

const char* Dir() {
  static const bool made = [] {
    if (mkdtemp(dir_name) == nullptr) abort();
    atexit(RemoveDir);
    return true;
  }();
  (void)made;
  return dir_name;
}

// Plain writes, not WriteFileAtomic: an fsync per input would slow the fuzzer a hundredfold.
void Put(const std::string& name, absl::string_view bytes, bool present) {
  std::string path = std::string(Dir()) + "/" + name;
  unlink(path.c_str());
  if (!present) return;
  FILE* f = fopen(path.c_str(), "wb");
  if (f == nullptr) abort();
  if (!bytes.empty() && fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) abort();
  fclose(f);
}

absl::string_view Next(absl::string_view* rest) {
  size_t nul = rest->find('\0');
  absl::string_view part = rest->substr(0, nul);
  rest->remove_prefix(nul == absl::string_view::npos ? rest->size() : nul + 1);
  return part;
}

bool Plain(char c) { return c > ' ' && c < 0x7F; }

void CheckSplits(const pp::common::Tokenizer& t, absl::string_view text,
                 const std::vector<int32_t>& whole) {
  for (size_t i = 1; i + 1 < text.size(); ++i) {
    if (text[i] != '\n' || !Plain(text[i - 1]) || !Plain(text[i + 1])) continue;
    std::vector<int32_t> ids = t.Encode(text.substr(0, i + 1));
    std::vector<int32_t> tail = t.Encode(text.substr(i + 1));
    ids.insert(ids.end(), tail.begin(), tail.end());
    if (ids != whole) abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  bool json = data[0] & 1;
  absl::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  absl::string_view file1 = Next(&rest);
  absl::string_view file2 = Next(&rest);
  Put("tokenizer.json", file1, json);
  Put("vocab.json", file1, !json);
  Put("merges.txt", file2, !json);
  absl::StatusOr<pp::common::Tokenizer> t = pp::common::Tokenizer::Load(Dir());
  if (!t.ok()) {
    if (!absl::IsInvalidArgument(t.status())) abort();
    return 0;
  }
  std::vector<int32_t> ids = t->Encode(rest);
  for (int32_t id : ids) {
    if (id < 0 || id >= t->vocab_size()) abort();
  }
  if (!t->Decode(ids).ok()) abort();
  if (t->Encode(rest) != ids) abort();
  if (t->SplitsAfterNewlines()) CheckSplits(*t, rest, ids);
  return 0;
}
