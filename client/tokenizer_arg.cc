// FindTokenizer and CopyTokenizer (tokenizer_arg.h).
#include "client/tokenizer_arg.h"

#include <algorithm>
#include <filesystem>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_io.h"

ABSL_FLAG(std::string, tokenizer, "",
          "sample, export, tokenize: a Hugging Face tokenizer folder (vocab.json + merges.txt, or "
          "tokenizer.json); sample and export default to the job's data.tokenizer");

namespace pp::client {
namespace {

// Files of a tokenizer folder transformers reads when present (the config first); export copies
// them beside the files Load read: a folder with both tokenizer.json and vocab.json +
// merges.txt keeps both, for the fast and the slow tokenizer classes.
constexpr const char* kTokenizerExtras[] = {"tokenizer_config.json", "special_tokens_map.json",
                                            "tokenizer.json", "vocab.json", "merges.txt"};

// `s` as a JSON string literal.
std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// transformers' AutoTokenizer reads the class from here; GPT2Tokenizer resolves to its fast
// twin, which loads tokenizer.json, or vocab.json + merges.txt.
std::string MinimalTokenizerConfig(const common::Tokenizer& tokenizer, int model_max_length) {
  std::string specials;
  if (std::optional<int32_t> eot = tokenizer.end_of_text(); eot.has_value()) {
    if (absl::StatusOr<std::string> text = tokenizer.Decode({*eot}); text.ok()) {
      const std::string t = JsonString(*text);
      specials = absl::StrCat(",\n  \"bos_token\": ", t, ",\n  \"eos_token\": ", t,
                              ",\n  \"unk_token\": ", t);
    }
  }
  return absl::StrCat("{\n  \"tokenizer_class\": \"GPT2Tokenizer\",\n  \"model_max_length\": ",
                      model_max_length, specials, "\n}\n");
}

}  // namespace

absl::StatusOr<std::optional<FoundTokenizer>> FindTokenizer(const std::string& flag_dir,
                                                            const pp::v1::JobSpec& job) {
  if (!flag_dir.empty()) {
    absl::StatusOr<common::Tokenizer> t = common::Tokenizer::Load(flag_dir);
    if (!t.ok()) return t.status();
    return FoundTokenizer{flag_dir, *std::move(t)};
  }
  const std::string& dir = job.data().tokenizer();
  if (dir.empty()) return std::nullopt;
  absl::StatusOr<common::Tokenizer> t = common::Tokenizer::Load(dir);
  if (!t.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the job's tokenizer (data.tokenizer ", dir, ", as its workers saw it under --data_root) ",
        "does not load here (", t.status().message(), "); pass --tokenizer=DIR"));
  }
  return FoundTokenizer{dir, *std::move(t)};
}

absl::StatusOr<std::vector<std::string>> CopyTokenizer(const FoundTokenizer& found,
                                                       int model_max_length,
                                                       const std::string& out_dir) {
  std::vector<std::string> names = found.tokenizer.files();
  std::error_code ec;
  for (const char* extra : kTokenizerExtras) {
    if (std::find(names.begin(), names.end(), extra) == names.end() &&
        std::filesystem::exists(absl::StrCat(found.dir, "/", extra), ec)) {
      names.push_back(extra);
    }
  }
  for (const std::string& name : names) {
    absl::StatusOr<std::string> bytes = common::ReadFile(absl::StrCat(found.dir, "/", name));
    if (!bytes.ok()) return bytes.status();
    if (absl::Status s = common::WriteFileAtomic(absl::StrCat(out_dir, "/", name), *bytes);
        !s.ok()) {
      return s;
    }
  }
  if (std::find(names.begin(), names.end(), kTokenizerExtras[0]) == names.end()) {
    if (absl::Status s =
            common::WriteFileAtomic(absl::StrCat(out_dir, "/", kTokenizerExtras[0]),
                                    MinimalTokenizerConfig(found.tokenizer, model_max_length));
        !s.ok()) {
      return s;
    }
    names.push_back(kTokenizerExtras[0]);
  }
  return names;
}

}  // namespace pp::client
