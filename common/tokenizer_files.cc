#include "common/tokenizer_files.h"

#include <google/protobuf/struct.pb.h>

#include <cmath>
#include <memory>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/file_io.h"
#include "common/proto_io.h"

namespace pp::common {
namespace {

using google::protobuf::ListValue;
using google::protobuf::Struct;
using google::protobuf::Value;

absl::Status Refuse(absl::string_view where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

// A token for an error message: escaped and cut, so a message stays one short line.
std::string Quote(absl::string_view token) {
  constexpr size_t kMax = 40;
  std::string q = absl::CHexEscape(token.substr(0, kMax));
  return absl::StrCat("\"", q, token.size() > kMax ? "...\"" : "\"");
}

// The file's bytes; NotFound passes through (the caller picks the other layout), every other
// failure is InvalidArgument with file_io's message, which names the file.
absl::StatusOr<std::string> ReadBounded(const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadFile(path, kMaxTokenizerFileBytes);
  if (bytes.ok() || absl::IsNotFound(bytes.status())) return bytes;
  return absl::InvalidArgumentError(bytes.status().message());
}

absl::StatusOr<Struct> ParseObject(absl::string_view json, absl::string_view where) {
  Struct root;
  // The parser's message quotes the bytes around the error: not passed on.
  if (!JsonToMessage(json, &root).ok()) return Refuse(where, "not a JSON object");
  return root;
}

const Value* Field(const Struct& s, const std::string& key) {
  auto it = s.fields().find(key);
  return it == s.fields().end() ? nullptr : &it->second;
}

bool IsNull(const Value* v) { return v == nullptr || v->kind_case() == Value::kNullValue; }

// `key` of `s` as a bool; `fallback` when absent or null.
absl::StatusOr<bool> BoolField(const Struct& s, const std::string& key, bool fallback,
                               absl::string_view where) {
  const Value* v = Field(s, key);
  if (IsNull(v)) return fallback;
  if (v->kind_case() != Value::kBoolValue) return Refuse(where, key + " must be true or false");
  return v->bool_value();
}

absl::StatusOr<int32_t> TokenId(const Value& v, absl::string_view where) {
  double d = v.kind_case() == Value::kNumberValue ? v.number_value() : -1;
  if (!(d >= 0 && d <= kMaxTokenId) || std::floor(d) != d) {
    return Refuse(where, absl::StrCat("id must be an integer in [0, ", kMaxTokenId, "]"));
  }
  return static_cast<int32_t>(d);
}

absl::Status ReadVocab(const Struct& vocab, TokenizerFiles* out) {
  out->vocab.reserve(vocab.fields_size());
  for (const auto& [token, value] : vocab.fields()) {
    absl::StatusOr<int32_t> id =
        TokenId(value, absl::StrCat(out->vocab_origin, ": token ", Quote(token)));
    if (!id.ok()) return id.status();
    out->vocab.emplace_back(token, *id);
  }
  return absl::OkStatus();
}

// "a b": two tokens separated by one space, as HF's BPE reads merges.txt lines and the string
// form of tokenizer.json's merges.
bool SplitMerge(absl::string_view line, std::pair<std::string, std::string>* merge) {
  std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
  if (parts.size() != 2) return false;
  *merge = {std::string(parts[0]), std::string(parts[1])};
  return true;
}

absl::Status ReadMergesTxt(const std::string& path, absl::string_view text, TokenizerFiles* out) {
  auto lines = std::make_shared<std::vector<int>>();
  std::vector<absl::string_view> rows = absl::StrSplit(text, '\n');
  // A final newline ends the last line rather than starting an empty one (Rust's lines()).
  if (!rows.empty() && rows.back().empty()) rows.pop_back();
  for (size_t i = 0; i < rows.size(); ++i) {
    absl::string_view row = rows[i];
    if (!row.empty() && row.back() == '\r') row.remove_suffix(1);
    if (absl::StartsWith(row, "#version")) continue;
    std::pair<std::string, std::string> merge;
    if (!SplitMerge(row, &merge)) {
      return Refuse(absl::StrCat(path, ":", i + 1), "expected two tokens separated by one space");
    }
    out->merges.push_back(std::move(merge));
    lines->push_back(static_cast<int>(i + 1));
  }
  out->merge_origin = [path, lines](size_t i) { return absl::StrCat(path, ":", (*lines)[i]); };
  return absl::OkStatus();
}

absl::Status ReadMergesJson(const ListValue& list, const std::string& where, TokenizerFiles* out) {
  out->merges.reserve(list.values_size());
  for (int i = 0; i < list.values_size(); ++i) {
    const Value& v = list.values(i);
    std::pair<std::string, std::string> merge;
    bool ok = false;
    if (v.kind_case() == Value::kStringValue) {
      ok = SplitMerge(v.string_value(), &merge);
    } else if (v.kind_case() == Value::kListValue && v.list_value().values_size() == 2 &&
               v.list_value().values(0).kind_case() == Value::kStringValue &&
               v.list_value().values(1).kind_case() == Value::kStringValue) {
      // Newer `tokenizers` write each merge as a pair, so tokens may hold spaces.
      merge = {v.list_value().values(0).string_value(), v.list_value().values(1).string_value()};
      ok = true;
    }
    if (!ok) {
      return Refuse(absl::StrCat(where, "[", i, "]"), "expected \"a b\" or [\"a\", \"b\"]");
    }
    out->merges.push_back(std::move(merge));
  }
  out->merge_origin = [where](size_t i) { return absl::StrCat(where, "[", i, "]"); };
  return absl::OkStatus();
}

absl::StatusOr<TokenizerFiles> ReadVocabAndMerges(const std::string& dir) {
  TokenizerFiles out;
  out.vocab_origin = dir + "/vocab.json";
  absl::StatusOr<std::string> vocab_json = ReadBounded(out.vocab_origin);
  absl::StatusOr<std::string> merges_txt = ReadBounded(dir + "/merges.txt");
  if (absl::IsNotFound(vocab_json.status()) && absl::IsNotFound(merges_txt.status())) {
    return Refuse(dir,
                  "no tokenizer.json, nor vocab.json and merges.txt (a Hugging Face "
                  "tokenizer folder)");
  }
  if (absl::IsNotFound(vocab_json.status())) return Refuse(out.vocab_origin, "missing");
  if (absl::IsNotFound(merges_txt.status())) return Refuse(dir + "/merges.txt", "missing");
  if (!vocab_json.ok()) return vocab_json.status();
  if (!merges_txt.ok()) return merges_txt.status();
  absl::StatusOr<Struct> vocab = ParseObject(*vocab_json, out.vocab_origin);
  if (!vocab.ok()) return vocab.status();
  if (absl::Status s = ReadVocab(*vocab, &out); !s.ok()) return s;
  if (absl::Status s = ReadMergesTxt(dir + "/merges.txt", *merges_txt, &out); !s.ok()) return s;
  // GPT-2's files carry no added-token list; transformers' GPT2Tokenizer makes <|endoftext|> its
  // special token, so it is split out of text here too.
  for (const auto& [token, id] : out.vocab) {
    if (token == "<|endoftext|>") out.added.push_back({token, id});
  }
  out.add_prefix_space = false;  // GPT2Tokenizer's default
  out.files = {"vocab.json", "merges.txt"};
  return out;
}

absl::Status ReadAddedTokens(const Value* list, const std::string& where, TokenizerFiles* out) {
  if (IsNull(list)) return absl::OkStatus();
  if (list->kind_case() != Value::kListValue) return Refuse(where, "must be a list");
  for (int i = 0; i < list->list_value().values_size(); ++i) {
    std::string at = absl::StrCat(where, "[", i, "]");
    const Value& v = list->list_value().values(i);
    if (v.kind_case() != Value::kStructValue) return Refuse(at, "must be an object");
    const Struct& token = v.struct_value();
    const Value* content = Field(token, "content");
    const Value* id = Field(token, "id");
    if (content == nullptr || content->kind_case() != Value::kStringValue ||
        content->string_value().empty()) {
      return Refuse(at, "content must be a non-empty string");
    }
    if (id == nullptr) return Refuse(at, "no id");
    absl::StatusOr<int32_t> n = TokenId(*id, at);
    if (!n.ok()) return n.status();
    // These change where a token matches (word boundaries, the spaces around it): not
    // implemented, so refused rather than matched differently from HF.
    for (const char* flag : {"single_word", "lstrip", "rstrip"}) {
      absl::StatusOr<bool> set = BoolField(token, flag, false, at);
      if (!set.ok()) return set.status();
      if (*set) return Refuse(at, absl::StrCat(flag, "=true is not supported"));
    }
    out->added.push_back({content->string_value(), *n});
  }
  return absl::OkStatus();
}

// tokenizer.json's pre_tokenizer and normalizer: GPT-2's (a ByteLevel pre-tokenizer, no
// normalizer) or refused by name, since any other would give other ids.
absl::Status ReadPipeline(const Struct& root, const std::string& where, TokenizerFiles* out) {
  if (!IsNull(Field(root, "normalizer"))) {
    return Refuse(where, "normalizer: not supported (GPT-2's byte-level BPE has none)");
  }
  const Value* pre = Field(root, "pre_tokenizer");
  const Value* type = pre != nullptr && pre->kind_case() == Value::kStructValue
                          ? Field(pre->struct_value(), "type")
                          : nullptr;
  if (type == nullptr || type->kind_case() != Value::kStringValue ||
      type->string_value() != "ByteLevel") {
    return Refuse(where, "pre_tokenizer: only ByteLevel is supported (GPT-2's)");
  }
  std::string at = where + ": pre_tokenizer";
  absl::StatusOr<bool> prefix = BoolField(pre->struct_value(), "add_prefix_space", true, at);
  if (!prefix.ok()) return prefix.status();
  absl::StatusOr<bool> regex = BoolField(pre->struct_value(), "use_regex", true, at);
  if (!regex.ok()) return regex.status();
  out->add_prefix_space = *prefix;
  out->use_regex = *regex;
  return absl::OkStatus();
}

// model's options other than vocab and merges: GPT-2's values, or refused by name.
absl::Status ReadModelOptions(const Struct& model, const std::string& where, TokenizerFiles* out) {
  const Value* type = Field(model, "type");
  if (type != nullptr &&
      !(type->kind_case() == Value::kStringValue && type->string_value() == "BPE")) {
    return Refuse(where, "type: only BPE is supported");
  }
  const Value* dropout = Field(model, "dropout");
  if (!IsNull(dropout) &&
      !(dropout->kind_case() == Value::kNumberValue && dropout->number_value() == 0)) {
    return Refuse(where, "dropout: not supported (it samples merges)");
  }
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const Value* v = Field(model, affix);
    if (!IsNull(v) && !(v->kind_case() == Value::kStringValue && v->string_value().empty())) {
      return Refuse(where, absl::StrCat(affix, ": not supported"));
    }
  }
  for (const char* flag : {"fuse_unk", "byte_fallback"}) {
    absl::StatusOr<bool> set = BoolField(model, flag, false, where);
    if (!set.ok()) return set.status();
    if (*set) return Refuse(where, absl::StrCat(flag, "=true is not supported"));
  }
  absl::StatusOr<bool> ignore = BoolField(model, "ignore_merges", false, where);
  if (!ignore.ok()) return ignore.status();
  out->ignore_merges = *ignore;
  const Value* unk = Field(model, "unk_token");
  if (!IsNull(unk)) {
    if (unk->kind_case() != Value::kStringValue) return Refuse(where, "unk_token: not a string");
    out->unk_token = unk->string_value();
  }
  return absl::OkStatus();
}

absl::StatusOr<TokenizerFiles> ReadTokenizerJson(const std::string& path, absl::string_view json) {
  TokenizerFiles out;
  absl::StatusOr<Struct> root = ParseObject(json, path);
  if (!root.ok()) return root.status();
  const Value* model = Field(*root, "model");
  if (model == nullptr || model->kind_case() != Value::kStructValue) {
    return Refuse(path, "model: missing or not an object");
  }
  std::string where = path + ": model";
  if (absl::Status s = ReadModelOptions(model->struct_value(), where, &out); !s.ok()) return s;
  const Value* vocab = Field(model->struct_value(), "vocab");
  const Value* merges = Field(model->struct_value(), "merges");
  if (vocab == nullptr || vocab->kind_case() != Value::kStructValue) {
    return Refuse(where, "vocab: missing or not an object");
  }
  if (merges == nullptr || merges->kind_case() != Value::kListValue) {
    return Refuse(where, "merges: missing or not a list");
  }
  out.vocab_origin = where + ".vocab";
  if (absl::Status s = ReadVocab(vocab->struct_value(), &out); !s.ok()) return s;
  if (absl::Status s = ReadMergesJson(merges->list_value(), where + ".merges", &out); !s.ok()) {
    return s;
  }
  if (absl::Status s = ReadPipeline(*root, path, &out); !s.ok()) return s;
  if (absl::Status s = ReadAddedTokens(Field(*root, "added_tokens"), path + ": added_tokens", &out);
      !s.ok()) {
    return s;
  }
  out.files = {"tokenizer.json"};
  return out;
}

}  // namespace

absl::StatusOr<TokenizerFiles> ReadTokenizerFiles(const std::string& dir) {
  // tokenizer.json first: it alone states the pre-tokenizer options and the added tokens.
  std::string path = dir + "/tokenizer.json";
  absl::StatusOr<std::string> json = ReadBounded(path);
  if (json.ok()) return ReadTokenizerJson(path, *json);
  if (!absl::IsNotFound(json.status())) return json.status();
  return ReadVocabAndMerges(dir);
}

}  // namespace pp::common
