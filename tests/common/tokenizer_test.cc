// common/tokenizer.h on hand-made folders: what loads, what is refused and how, and encoding
// details that need no Hugging Face (tests/client/tokenizer_hf_test.py compares with it).
#include "common/tokenizer.h"

#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pp::common {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Byte-level spellings (GPT-2's bytes_to_unicode): printable bytes are themselves, space is
// "Ġ" (U+0120), and the bytes of U+FFFD (EF BF BD) are "ï", "¿", "½".
constexpr char kVocab[] = R"({"h": 0, "e": 1, "l": 2, "o": 3, "\u0120": 4, "w": 5, "r": 6,
  "d": 7, "he": 8, "ll": 9, "llo": 10, "hello": 11, "\u0120w": 12, "<|endoftext|>": 13,
  "\u00ef": 14, "\u00bf": 15, "\u00bd": 16, "\u00ef\u00bf": 17, "\u00ef\u00bf\u00bd": 18})";
constexpr char kMerges[] =
    "#version: 0.2\nh e\nl l\nll o\nhe llo\n\u0120 w\n\u00ef \u00bf\n\u00ef\u00bf \u00bd\n";
constexpr int32_t kFffd = 18;

std::string Folder(const std::string& name) {
  std::string dir = ::testing::TempDir() + "/tokenizer_" + name;
  EXPECT_TRUE(MakeDirs(dir).ok());
  return dir;
}

std::string WriteFolder(const std::string& name, const std::string& vocab,
                        const std::string& merges) {
  std::string dir = Folder(name);
  EXPECT_TRUE(WriteFileAtomic(dir + "/vocab.json", vocab).ok());
  EXPECT_TRUE(WriteFileAtomic(dir + "/merges.txt", merges).ok());
  return dir;
}

// tokenizer.json's fields other than the model: GPT-2's.
constexpr char kAdded[] = R"([{"id": 13, "content": "<|endoftext|>", "special": true}])";
constexpr char kByteLevel[] =
    R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})";

// A tokenizer.json of the tiny vocabulary; `model_extra` adds fields to the model.
std::string WriteJson(const std::string& name, const std::string& model_extra,
                      const std::string& pre_tokenizer = kByteLevel,
                      const std::string& normalizer = "null", const std::string& added = kAdded) {
  std::string dir = Folder(name);
  std::string json = absl::StrCat(
      R"({"added_tokens": )", added, R"(, "normalizer": )", normalizer, R"(, "pre_tokenizer": )",
      pre_tokenizer, R"(, "model": {)",
      absl::StrContains(model_extra, "\"type\"") ? "" : R"("type": "BPE", )", model_extra,
      R"("vocab": )", kVocab, R"(, "merges": [["h", "e"], "l l", ["ll", "o"], ["he", "llo"],)",
      R"(["\u0120", "w"], ["\u00ef", "\u00bf"], ["\u00ef\u00bf", "\u00bd"]]}})");
  EXPECT_TRUE(WriteFileAtomic(dir + "/tokenizer.json", json).ok());
  return dir;
}

Tokenizer LoadOk(const std::string& dir) {
  absl::StatusOr<Tokenizer> t = Tokenizer::Load(dir);
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(*t);
}

std::string LoadError(const std::string& dir) {
  absl::StatusOr<Tokenizer> t = Tokenizer::Load(dir);
  EXPECT_FALSE(t.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(t.status())) << t.status();
  return std::string(t.status().message());
}

TEST(TokenizerTest, EncodesAndDecodesVocabAndMerges) {
  Tokenizer t = LoadOk(WriteFolder("files", kVocab, kMerges));
  EXPECT_THAT(t.Encode("hello world"), ElementsAre(11, 12, 3, 6, 2, 7));
  EXPECT_THAT(t.Encode("hell"), ElementsAre(8, 9));
  EXPECT_THAT(t.Encode(""), ElementsAre());
  // A byte the vocabulary lacks is dropped, as HF's BPE does without an unk token.
  EXPECT_THAT(t.Encode("hi"), ElementsAre(0));
  EXPECT_EQ(*t.Decode(t.Encode("hello world")), "hello world");
  EXPECT_EQ(t.vocab_size(), 19);
  EXPECT_EQ(t.end_of_text(), 13);
  EXPECT_THAT(t.files(), ElementsAre("vocab.json", "merges.txt"));
  EXPECT_TRUE(t.SplitsAfterNewlines());
  EXPECT_TRUE(absl::IsInvalidArgument(t.Decode({19}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(t.Decode({-1}).status()));
}

TEST(TokenizerTest, SplitsOutSpecialTokens) {
  Tokenizer t = LoadOk(WriteFolder("special", kVocab, kMerges));
  EXPECT_THAT(t.Encode("hello<|endoftext|>hello"), ElementsAre(11, 13, 11));
  EXPECT_THAT(t.Encode("<|endoftext|><|endoftext|>"), ElementsAre(13, 13));
  EXPECT_EQ(*t.Decode({11, 13, 12}), "hello<|endoftext|> w");
}

TEST(TokenizerTest, ReadsInvalidUtf8AsPythonsReplace) {
  Tokenizer t = LoadOk(WriteFolder("utf8", kVocab, kMerges));
  EXPECT_THAT(t.Encode("\xEF\xBF\xBD"), ElementsAre(kFffd));
  // Each maximal invalid subpart is one U+FFFD: Python's b"...".decode("utf-8", "replace").
  EXPECT_THAT(t.Encode("h\xE2\x82h"), ElementsAre(0, kFffd, 0));            // a cut sequence
  EXPECT_THAT(t.Encode("\xFF\xFE"), ElementsAre(kFffd, kFffd));             // never valid
  EXPECT_THAT(t.Encode("\xC0\xAF"), ElementsAre(kFffd, kFffd));             // overlong
  EXPECT_THAT(t.Encode("\xED\xA0\x80"), ElementsAre(kFffd, kFffd, kFffd));  // a surrogate
  EXPECT_THAT(t.Encode("\xF0\x9F\x98"), ElementsAre(kFffd));                // cut at the end
  EXPECT_THAT(t.Encode("\xF4\x90\x80\x80"), ElementsAre(kFffd, kFffd, kFffd, kFffd));
}

TEST(TokenizerTest, LoadsTokenizerJson) {
  Tokenizer t = LoadOk(WriteJson("json", ""));
  EXPECT_THAT(t.Encode("hello world<|endoftext|>"), ElementsAre(11, 12, 3, 6, 2, 7, 13));
  EXPECT_THAT(t.files(), ElementsAre("tokenizer.json"));
  // HF's default add_prefix_space is true: " world".
  Tokenizer prefixed = LoadOk(WriteJson("prefix", "", R"({"type": "ByteLevel"})"));
  EXPECT_THAT(prefixed.Encode("world"), ElementsAre(12, 3, 6, 2, 7));
  EXPECT_FALSE(prefixed.SplitsAfterNewlines());
}

TEST(TokenizerTest, EncodesTheSameOnManyThreads) {
  Tokenizer t = LoadOk(WriteFolder("threads", kVocab, kMerges));
  std::string text;
  for (int i = 0; i < 2000; ++i) absl::StrAppend(&text, "hello world hell ", i % 7, " ");
  const std::vector<int32_t> want = t.Encode(text);
  std::vector<std::vector<int32_t>> got(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) threads.emplace_back([&, i] { got[i] = t.Encode(text); });
  for (std::thread& th : threads) th.join();
  for (const auto& ids : got) EXPECT_EQ(ids, want);
}

TEST(TokenizerTest, RefusesBrokenFolders) {
  EXPECT_THAT(LoadError(Folder("empty")), HasSubstr("no tokenizer.json, nor vocab.json"));
  std::string only_vocab = Folder("only_vocab");
  ASSERT_TRUE(WriteFileAtomic(only_vocab + "/vocab.json", kVocab).ok());
  EXPECT_THAT(LoadError(only_vocab), HasSubstr("merges.txt: missing"));
  EXPECT_THAT(LoadError(WriteFolder("bad_line", kVocab, "#version: 0.2\nh e\nh e l\n")),
              HasSubstr("merges.txt:3: expected two tokens"));
  EXPECT_THAT(LoadError(WriteFolder("unknown", kVocab, "h e\nq e\n")),
              HasSubstr("merges.txt:2: token \"q\" is not in the vocabulary"));
  EXPECT_THAT(LoadError(WriteFolder("no_join", kVocab, "h l\n")),
              HasSubstr("merges.txt:1: token \"hl\" is not in the vocabulary"));
  EXPECT_THAT(LoadError(WriteFolder("bad_json", "{\"h\": 0,", kMerges)),
              HasSubstr("vocab.json: not a JSON object"));
  EXPECT_THAT(LoadError(WriteFolder("bad_id", R"({"h": 0.5})", "")),
              HasSubstr("vocab.json: token \"h\": id must be an integer"));
  EXPECT_THAT(LoadError(WriteFolder("dup_id", R"({"h": 0, "e": 0})", "")), HasSubstr("share id 0"));
  std::string big = WriteFolder("big", kVocab, kMerges);
  ASSERT_EQ(truncate((big + "/vocab.json").c_str(), (64 << 20) + 1), 0);  // sparse
  EXPECT_THAT(LoadError(big), HasSubstr("vocab.json"));
}

TEST(TokenizerTest, RefusesUnsupportedTokenizerJson) {
  EXPECT_THAT(LoadError(WriteJson("norm", "", kByteLevel, R"({"type": "NFC"})")),
              HasSubstr("normalizer: not supported"));
  EXPECT_THAT(LoadError(WriteJson("meta", "", R"({"type": "Metaspace"})")),
              HasSubstr("pre_tokenizer: only ByteLevel"));
  EXPECT_THAT(LoadError(WriteJson("wordpiece", R"("type": "WordPiece", )")), HasSubstr("only BPE"));
  EXPECT_THAT(LoadError(WriteJson("dropout", R"("dropout": 0.1, )")),
              HasSubstr("dropout: not supported"));
  EXPECT_THAT(LoadError(WriteJson("lstrip", "", kByteLevel, "null",
                                  R"([{"id": 13, "content": "x", "lstrip": true}])")),
              HasSubstr("added_tokens[0]: lstrip=true is not supported"));
  std::string not_json = Folder("not_json");
  ASSERT_TRUE(WriteFileAtomic(not_json + "/tokenizer.json", "[1, 2").ok());
  EXPECT_THAT(LoadError(not_json), HasSubstr("tokenizer.json: not a JSON object"));
}

}  // namespace
}  // namespace pp::common
