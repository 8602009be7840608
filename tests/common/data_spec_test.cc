// common/data_spec.h: the data section's shapes, glob resolution (byte order, idempotent, fixed
// for a job), and the checks of llm.c shards and token ids, each refusal one line that names the
// field and the file.
#include "common/data_spec.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "common/job_spec.h"
#include "common/llmc_shard.h"
#include "common/spec_bounds.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pp::common {
namespace {

using ::testing::ElementsAre;
using ::testing::StartsWith;

// An llm.c shard of `ids` (header, then little-endian uint16).
std::string Shard(const std::vector<int>& ids) {
  std::string bytes = LlmcHeader(static_cast<int64_t>(ids.size()));
  for (int id : ids) {
    bytes.push_back(static_cast<char>(id & 0xff));
    bytes.push_back(static_cast<char>(id >> 8));
  }
  return bytes;
}

std::vector<int> Ids(int n, int base) {
  std::vector<int> ids;
  for (int i = 0; i < n; ++i) ids.push_back((base + 7 * i) % 250);
  return ids;
}

class DataSpecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/data_spec_test_" + std::to_string(::getpid());
    std::filesystem::remove_all(dir_);
    ASSERT_TRUE(MakeDirs(dir_ + "/shards").ok());
    // Written out of order; "B" sorts before "a" in byte order (not in most locales' collation).
    for (const char* name : {"s10.bin", "s02.bin", "s01.bin", "B.bin"}) {
      Write(absl::StrCat("shards/", name), Shard(Ids(40, static_cast<int>(std::strlen(name)))));
    }
    spec_.set_name("shards");
    pp::v1::ModelSpec& model = *spec_.mutable_model();
    model.set_vocab_size(256);
    model.set_seq_len(16);
    model.set_d_model(32);
    model.set_n_heads(2);
    model.set_n_layers(1);
    spec_.mutable_parallel()->set_pipeline(1);
    spec_.mutable_parallel()->set_schedule("1f1b");
    spec_.mutable_data()->set_format("llmc");
    spec_.mutable_data()->set_path(dir_ + "/shards/*.bin");
    spec_.mutable_train()->set_steps(1);
    spec_.mutable_train()->set_microbatches(1);
    spec_.mutable_train()->set_microbatch_size(1);
    ApplyDefaults(&spec_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& bytes) {
    const std::string path = absl::StrCat(dir_, "/", name);
    EXPECT_TRUE(WriteFileAtomic(path, bytes).ok()) << path;
    return path;
  }

  // The message of validating `spec` (fields and files, under `roots`), "" when valid.
  static std::string Refusal(const pp::v1::JobSpec& spec,
                             const std::vector<std::string>& roots = {}) {
    return std::string(ValidateJobSpec(spec, roots).message());
  }

  std::string dir_;
  pp::v1::JobSpec spec_;
};

TEST_F(DataSpecTest, AGlobResolvesToItsMatchesInByteOrderOnceAndForAll) {
  absl::StatusOr<pp::v1::JobSpec> resolved = ResolveDataGlobs(spec_);
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  const std::string d = dir_ + "/shards/";
  EXPECT_TRUE(resolved->data().path().empty());
  EXPECT_THAT(resolved->data().paths(),
              ElementsAre(d + "B.bin", d + "s01.bin", d + "s02.bin", d + "s10.bin"));
  // Idempotent: the stored spec names files, not patterns, so a later match changes nothing.
  Write("shards/s00.bin", Shard(Ids(40, 1)));
  absl::StatusOr<pp::v1::JobSpec> again = ResolveDataGlobs(*resolved);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->SerializeAsString(), resolved->SerializeAsString());
  // Every resolved file is an input path (the --data_root checks rely on it).
  const auto inputs = SpecInputPaths(*resolved);
  ASSERT_EQ(inputs.size(), 4u);
  EXPECT_EQ(inputs[1].first, "data.paths[1]");
  EXPECT_EQ(inputs[1].second, d + "s01.bin");
  // K of one stream: its files' tokens together, N - T.
  absl::StatusOr<int64_t> windows = CheckSpecFiles(*resolved, {dir_});
  ASSERT_TRUE(windows.ok()) << windows.status();
  EXPECT_EQ(*windows, 4 * 40 - 16);
}

TEST_F(DataSpecTest, PathsExpandEachEntryInTheirOrder) {
  pp::v1::JobSpec spec = spec_;
  spec.mutable_data()->clear_path();
  spec.mutable_data()->add_paths(dir_ + "/shards/s1*.bin");
  spec.mutable_data()->add_paths(dir_ + "/shards/B.bin");
  spec.mutable_data()->add_paths(dir_ + "/shards/s0?.bin");
  absl::StatusOr<std::vector<DataFile>> files = StreamFiles("data", spec.data());
  ASSERT_TRUE(files.ok()) << files.status();
  std::vector<std::string> order;
  for (const DataFile& f : *files) order.push_back(absl::StrCat(f.field, " ", f.path));
  const std::string d = dir_ + "/shards/";
  EXPECT_THAT(order,
              ElementsAre("data.paths[0] " + d + "s10.bin", "data.paths[1] " + d + "B.bin",
                          "data.paths[2] " + d + "s01.bin", "data.paths[2] " + d + "s02.bin"));
  EXPECT_EQ(Refusal(spec), "");
}

TEST_F(DataSpecTest, AGlobMatchingNothingIsRefusedNamingIt) {
  pp::v1::JobSpec spec = spec_;
  spec.mutable_data()->set_path(dir_ + "/none/*.bin");
  EXPECT_EQ(Refusal(spec), "data.path: " + dir_ + "/none/*.bin matches no file");
  EXPECT_EQ(ResolveDataGlobs(spec).status().message(),
            "data.path: " + dir_ + "/none/*.bin matches no file");
  Write("shards/odd[1].bin", Shard(Ids(40, 0)));
  EXPECT_THAT(std::string(ResolveDataGlobs(spec_).status().message()),
              StartsWith("data.path: " + dir_ + "/shards/*.bin matches " + dir_ +
                         "/shards/odd[1].bin, whose name holds one of * ? [ (rename it)"));
}

TEST_F(DataSpecTest, BadShardsAreRefusedInOneLineNamingFieldAndFile) {
  const std::string d = dir_ + "/shards/";
  pp::v1::JobSpec spec = spec_;
  spec.mutable_data()->clear_path();
  spec.mutable_data()->add_paths(d + "s01.bin");
  spec.mutable_data()->add_paths(d + "bad.bin");
  std::string wrong_magic = Shard(Ids(40, 0));
  wrong_magic[0] = 7;
  wrong_magic[1] = wrong_magic[2] = wrong_magic[3] = 0;
  Write("shards/bad.bin", wrong_magic);
  EXPECT_EQ(Refusal(spec), "data.paths[1]: " + d +
                               "bad.bin: not an llm.c token shard: magic 7, expected 20240520");
  Write("shards/bad.bin", Shard(Ids(40, 0)).substr(0, 1024 + 60));
  EXPECT_EQ(Refusal(spec), "data.paths[1]: " + d + "bad.bin: not an llm.c token shard: the " +
                               "header says 40 tokens (1104 bytes), the file has 1084 bytes " +
                               "(truncated)");
  std::vector<int> ids = Ids(40, 0);
  ids[33] = 300;
  Write("shards/bad.bin", Shard(ids));
  EXPECT_EQ(Refusal(spec),
            "model.vocab_size: 256 is too small for llmc data with token 300 "
            "(need >= 301) in data.paths[1] " +
                d + "bad.bin");
  spec.mutable_model()->set_vocab_size(512);
  spec.mutable_model()->set_real_vocab_size(300);
  EXPECT_THAT(Refusal(spec), StartsWith("model.real_vocab_size: 300 is too small for llmc data "
                                        "with token 300"));
  spec.mutable_model()->set_real_vocab_size(301);
  EXPECT_EQ(Refusal(spec), "");
}

TEST_F(DataSpecTest, Uint16IdsAreCheckedAgainstTheRealVocabulary) {
  pp::v1::JobSpec spec = spec_;
  std::string tokens;
  for (int i = 0; i < 40; ++i) tokens += std::string("\x10\x01", 2);  // id 272
  spec.mutable_data()->set_format("uint16");
  spec.mutable_data()->set_path(Write("u.bin", tokens));
  spec.mutable_model()->set_vocab_size(320);
  spec.mutable_model()->set_real_vocab_size(272);
  EXPECT_EQ(Refusal(spec),
            "model.real_vocab_size: 272 is too small for uint16 data with token "
            "272 (need >= 273) in data.path " +
                dir_ + "/u.bin");
  spec.mutable_model()->set_real_vocab_size(273);
  EXPECT_EQ(Refusal(spec), "");
  spec.mutable_data()->set_format("bytes");
  spec.mutable_model()->set_real_vocab_size(255);
  EXPECT_THAT(Refusal(spec), StartsWith("model.real_vocab_size: 255 is too small for bytes data"));
}

struct BadShape {
  const char* want;
  void (*mutate)(pp::v1::JobSpec*);
};

// Mix sources that name "/x" with `weights`, path cleared.
void MixOf(pp::v1::JobSpec* spec, std::initializer_list<int> weights) {
  spec->mutable_data()->clear_path();
  for (int w : weights) {
    pp::v1::WeightedData* m = spec->mutable_data()->add_mix();
    m->set_weight(w);
    m->mutable_data()->set_path("/x");
  }
}

const BadShape kBadShapes[] = {
    {"data: set exactly one of path, paths and mix",
     [](pp::v1::JobSpec* s) { s->mutable_data()->add_paths("/x"); }},
    {"data.path: missing", [](pp::v1::JobSpec* s) { s->mutable_data()->clear_path(); }},
    {"data.format: unknown value \"parquet\" (one of bytes, uint16, llmc, generated)",
     [](pp::v1::JobSpec* s) { s->mutable_data()->set_format("parquet"); }},
    {"data: set exactly one of path, paths and mix",
     [](pp::v1::JobSpec* s) {
       MixOf(s, {1});
       s->mutable_data()->set_path("/y");
     }},
    {"data.paths[1]: empty",
     [](pp::v1::JobSpec* s) {
       s->mutable_data()->clear_path();
       s->mutable_data()->add_paths("/x");
       s->mutable_data()->add_paths("");
     }},
    {"data.mix[0].weight: must be >= 1, got 0", [](pp::v1::JobSpec* s) { MixOf(s, {0}); }},
    {"data.mix: weights sum to 65537, over the limit 65536",
     [](pp::v1::JobSpec* s) {
       MixOf(s, {65536, 1});
     }},
    {"data.mix[0].data.mix: only data may be a mix",
     [](pp::v1::JobSpec* s) {
       MixOf(s, {1});
       pp::v1::DataSpec* inner = s->mutable_data()->mutable_mix(0)->mutable_data();
       inner->clear_path();
       inner->set_format("bytes");
       inner->add_mix()->mutable_data()->set_path("/x");
     }},
    {"data.mix[0].data.tokenizer: set data.tokenizer on the mix",
     [](pp::v1::JobSpec* s) {
       MixOf(s, {1});
       s->mutable_data()->mutable_mix(0)->mutable_data()->set_tokenizer("/t");
     }},
    {"eval.data.mix: only data may be a mix",
     [](pp::v1::JobSpec* s) {
       s->mutable_eval()->set_batches(1);
       s->mutable_eval()->mutable_data()->set_format("bytes");
       pp::v1::WeightedData* m = s->mutable_eval()->mutable_data()->add_mix();
       m->set_weight(1);
       m->mutable_data()->set_path("/x");
     }},
};

TEST_F(DataSpecTest, ShapesAndMixFieldsAreRefusedNamingTheField) {
  for (const BadShape& c : kBadShapes) {
    pp::v1::JobSpec spec = spec_;
    c.mutate(&spec);
    EXPECT_THAT(std::string(ValidateJobSpecFields(spec).message()), StartsWith(c.want));
  }
}

TEST_F(DataSpecTest, AMixCountsTheWindowsOfEverySourceAndRefusesAHoldout) {
  pp::v1::JobSpec spec = spec_;
  spec.mutable_data()->clear_path();
  pp::v1::WeightedData* shards = spec.mutable_data()->add_mix();
  shards->set_weight(3);
  shards->mutable_data()->set_path(dir_ + "/shards/s0*.bin");  // 80 tokens
  pp::v1::WeightedData* text = spec.mutable_data()->add_mix();
  text->set_weight(1);
  text->mutable_data()->set_format("generated");
  text->mutable_data()->set_generated_tokens(100);
  ApplyDefaults(&spec);
  EXPECT_EQ(spec.data().mix(0).data().format(), "llmc") << "the mix's format is the default";
  ASSERT_TRUE(ValidateJobSpecFields(spec).ok()) << ValidateJobSpecFields(spec);
  absl::StatusOr<pp::v1::JobSpec> resolved = ResolveDataGlobs(spec);
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ(resolved->data().mix(0).data().paths_size(), 2);
  EXPECT_EQ(SpecInputPaths(*resolved)[1].first, "data.mix[0].data.paths[1]");
  absl::StatusOr<int64_t> windows = CheckSpecFiles(*resolved, {});
  ASSERT_TRUE(windows.ok()) << windows.status();
  EXPECT_EQ(*windows, (80 - 16) + (100 - 16));
  spec.mutable_eval()->set_batches(1);
  spec.mutable_eval()->set_holdout_fraction(0.1);
  EXPECT_THAT(std::string(ValidateJobSpecFields(spec).message()),
              StartsWith("eval.holdout_fraction: a mix has no one stream"));
}

TEST_F(DataSpecTest, EveryMatchStaysUnderTheRootsAndTheirNumberIsBounded) {
  const std::string root = dir_ + "/root";
  ASSERT_TRUE(MakeDirs(root).ok());
  std::filesystem::copy_file(dir_ + "/shards/s01.bin", root + "/a.bin");
  std::filesystem::create_symlink(dir_ + "/shards/s02.bin", root + "/b.bin");  // out of root
  pp::v1::JobSpec spec = spec_;
  spec.mutable_data()->set_path(root + "/*.bin");
  EXPECT_THAT(Refusal(spec, {root}),
              StartsWith("data.path \"" + root + "/b.bin\" is outside the allowed --data_root"));
  EXPECT_EQ(Refusal(spec, {dir_}), "");

  // 4 matches and 4093 more names: one file past the bound.
  spec.mutable_data()->clear_path();
  spec.mutable_data()->add_paths(dir_ + "/shards/*.bin");
  for (int i = 4; i <= kMaxDataFiles; ++i) spec.mutable_data()->add_paths(root + "/a.bin");
  EXPECT_EQ(ResolveDataGlobs(spec).status().message(),
            absl::StrCat("data.paths[", kMaxDataFiles - 3, "]: ", root,
                         "/a.bin: the job's data is over the limit of ", kMaxDataFiles,
                         " files (every worker holds each open)"));
}

// ppcoord lists no folder outside --data_root: the pattern's own folder is checked first, so a
// glob cannot tell which files exist elsewhere (a match and "matches no file" would).
TEST_F(DataSpecTest, AGlobIsCheckedAgainstTheRootsBeforeAnythingIsListed) {
  const std::string root = dir_ + "/shards";
  pp::v1::JobSpec spec = spec_;
  EXPECT_TRUE(ResolveDataGlobs(spec, {root}).ok());
  for (const std::string& outside : {dir_ + "/*/s01.bin", std::string("/etc/*"),
                                     dir_ + "/nothing-here/*.bin"}) {
    spec.mutable_data()->set_path(outside);
    EXPECT_THAT(std::string(ResolveDataGlobs(spec, {root}).status().message()),
                StartsWith("data.path \"")) << outside;
  }
  spec.mutable_data()->set_path(root + "/../shards/*.bin");
  EXPECT_EQ(ResolveDataGlobs(spec, {root}).status().message(),
            absl::StrCat("data.path: ", root, "/../shards/*.bin: a glob may not hold \"..\""));
  spec.mutable_data()->set_path("shards/*.bin");
  EXPECT_EQ(ResolveDataGlobs(spec, {root}).status().message(),
            "data.path: shards/*.bin: a glob must be absolute");
  spec.mutable_data()->set_path(root + "/s0*.bin");  // without roots: no rule
  EXPECT_TRUE(ResolveDataGlobs(spec).ok());
}

TEST_F(DataSpecTest, ATokenizerMustLoadUnderTheRootsAndFitTheVocabulary) {
  const std::string tok = dir_ + "/tok";
  ASSERT_TRUE(MakeDirs(tok).ok());
  pp::v1::JobSpec spec = spec_;
  spec.mutable_data()->set_tokenizer(tok);
  EXPECT_EQ(Refusal(spec), "data.tokenizer: " + tok +
                               " holds neither a readable tokenizer.json "
                               "nor vocab.json and merges.txt");
  Write("tok/vocab.json", R"({"a": 0, "b": 1, "ab": 2, "<|endoftext|>": 299})");
  Write("tok/merges.txt", "#version: 0.2\na b\n");
  EXPECT_EQ(Refusal(spec),
            "data.tokenizer: " + tok + " has 300 ids, more than model.vocab_size 256");
  spec.mutable_model()->set_vocab_size(320);
  EXPECT_EQ(Refusal(spec), "");
  EXPECT_THAT(Refusal(spec, {dir_ + "/shards"}),
              StartsWith("data.tokenizer \"" + tok + "\" is outside"));
  EXPECT_EQ(SpecInputPaths(spec).back().first, "data.tokenizer");
}

// Each bad documents setting (data_spec.h "Documents") and its one-line refusal.
const BadShape kBadDocuments[] = {
    {"data.documents: unknown value \"packed\" (one of none, mask)",
     [](pp::v1::JobSpec* s) { s->mutable_data()->set_documents("packed"); }},
    {"model.positions: unknown value \"rotary\" (one of absolute, document)",
     [](pp::v1::JobSpec* s) { s->mutable_model()->set_positions("rotary"); }},
    {"model.positions: \"document\" requires data.documents \"mask\"",
     [](pp::v1::JobSpec* s) {
       s->mutable_data()->set_documents("none");
       s->mutable_model()->set_positions("document");
     }},
    {"data.end_of_text: must be in [0, model.vocab_size 256), got 256",
     [](pp::v1::JobSpec* s) { s->mutable_data()->set_end_of_text(256); }},
    {"data.end_of_text: must be in [0, model.real_vocab_size 200), got -1",
     [](pp::v1::JobSpec* s) {
       s->mutable_model()->set_real_vocab_size(200);
       s->mutable_data()->set_end_of_text(-1);
     }},
    {"data.end_of_text: required with documents \"mask\" for format uint16/llmc without "
     "data.tokenizer",
     [](pp::v1::JobSpec* s) { s->mutable_data()->set_documents("mask"); }},
    {"data.mix[0].data.documents: set data.documents (top level) instead",
     [](pp::v1::JobSpec* s) {
       s->mutable_data()->clear_path();
       pp::v1::WeightedData* m = s->mutable_data()->add_mix();
       m->set_weight(1);
       m->mutable_data()->set_format("bytes");
       m->mutable_data()->set_path("/x");
       m->mutable_data()->set_documents("mask");
     }},
    {"eval.data.end_of_text: set data.end_of_text (top level) instead",
     [](pp::v1::JobSpec* s) {
       s->mutable_eval()->set_batches(1);
       s->mutable_eval()->mutable_data()->set_format("bytes");
       s->mutable_eval()->mutable_data()->set_path("/x");
       s->mutable_eval()->mutable_data()->set_end_of_text(0);
     }},
};

TEST_F(DataSpecTest, BadDocumentSettingsAreRefusedInOneLineNamingTheField) {
  for (const BadShape& c : kBadDocuments) {
    pp::v1::JobSpec spec = spec_;
    c.mutate(&spec);
    EXPECT_EQ(std::string(ValidateJobSpecFields(spec).message()), c.want);
  }
}

TEST_F(DataSpecTest, MaskedDocumentsNeedAnEndOfTextOnlyForWideIds) {
  pp::v1::JobSpec spec = spec_;
  spec.mutable_data()->set_documents("mask");
  spec.mutable_model()->set_positions("document");
  spec.mutable_data()->set_end_of_text(7);
  EXPECT_TRUE(ValidateJobSpecFields(spec).ok()) << ValidateJobSpecFields(spec);
  spec.mutable_data()->clear_end_of_text();
  spec.mutable_data()->set_tokenizer(dir_ + "/tok");  // its <|endoftext|>: resolved at submit
  EXPECT_TRUE(ValidateJobSpecFields(spec).ok()) << ValidateJobSpecFields(spec);
  spec.mutable_data()->clear_tokenizer();
  for (const char* format : {"bytes", "generated"}) {  // the byte \0 by default
    spec.mutable_data()->set_format(format);
    spec.mutable_data()->set_generated_tokens(1000);
    EXPECT_TRUE(ValidateJobSpecFields(spec).ok()) << format << ": " << ValidateJobSpecFields(spec);
    EXPECT_EQ(EndOfTextId(spec), 0);
  }
  spec.mutable_data()->set_documents("none");  // "" and "none" and "absolute" are the defaults
  spec.mutable_model()->set_positions("absolute");
  EXPECT_TRUE(ValidateJobSpecFields(spec).ok()) << ValidateJobSpecFields(spec);
  EXPECT_FALSE(MasksDocuments(spec));
}

TEST_F(DataSpecTest, TheEndOfTextIsResolvedFromTheTokenizerOnceAndStored) {
  pp::v1::JobSpec spec = spec_;
  spec.mutable_model()->set_vocab_size(320);
  absl::StatusOr<pp::v1::JobSpec> unmasked = ResolveEndOfText(spec);
  ASSERT_TRUE(unmasked.ok()) << unmasked.status();
  EXPECT_FALSE(unmasked->data().has_end_of_text());  // documents "none": the spec unchanged

  spec.mutable_data()->set_documents("mask");
  spec.mutable_data()->set_tokenizer(dir_ + "/tok");
  ASSERT_TRUE(MakeDirs(dir_ + "/tok").ok());
  Write("tok/vocab.json", R"({"a": 0, "b": 1, "ab": 2})");
  Write("tok/merges.txt", "#version: 0.2\na b\n");
  EXPECT_EQ(ResolveEndOfText(spec).status().message(),
            "data.end_of_text: required with documents \"mask\": data.tokenizer " + dir_ +
                "/tok has no <|endoftext|>");
  Write("tok/vocab.json", R"({"a": 0, "b": 1, "ab": 2, "<|endoftext|>": 299})");
  absl::StatusOr<pp::v1::JobSpec> resolved = ResolveEndOfText(spec);
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ(resolved->data().end_of_text(), 299);
  EXPECT_EQ(EndOfTextId(*resolved), 299);
  EXPECT_EQ(Refusal(*resolved), "");
  // Set ids win and stay: resolving again changes nothing.
  Write("tok/vocab.json", R"({"a": 0, "b": 1, "ab": 2, "<|endoftext|>": 300})");
  absl::StatusOr<pp::v1::JobSpec> again = ResolveEndOfText(*resolved);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->data().end_of_text(), 299);

  pp::v1::JobSpec bytes = spec_;
  bytes.mutable_data()->set_format("bytes");
  bytes.mutable_data()->set_documents("mask");
  absl::StatusOr<pp::v1::JobSpec> zero = ResolveEndOfText(bytes);
  ASSERT_TRUE(zero.ok()) << zero.status();
  EXPECT_TRUE(zero->data().has_end_of_text());
  EXPECT_EQ(zero->data().end_of_text(), 0);
}

TEST(AbsoluteDataPathsTest, EveryRelativeDataPathIsMadeAbsoluteGlobsKept) {
  pp::v1::JobSpec spec;
  spec.mutable_data()->set_tokenizer("tok");
  pp::v1::WeightedData* source = spec.mutable_data()->add_mix();
  source->mutable_data()->add_paths("shards/*.bin");
  source->mutable_data()->add_paths("/abs/b.bin");
  spec.mutable_eval()->mutable_data()->set_path("eval.bin");
  AbsoluteDataPaths(&spec);
  const std::string here = std::filesystem::current_path().string();
  EXPECT_EQ(spec.data().tokenizer(), here + "/tok");
  EXPECT_THAT(spec.data().mix(0).data().paths(), ElementsAre(here + "/shards/*.bin", "/abs/b.bin"));
  EXPECT_EQ(spec.eval().data().path(), here + "/eval.bin");
  EXPECT_TRUE(spec.data().path().empty());
}

}  // namespace
}  // namespace pp::common
