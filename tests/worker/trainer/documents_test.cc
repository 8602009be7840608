// Packed documents in the reference trainer (worker/data/data.h "Documents"): `ppctl train`
// resolves data.tokenizer's <|endoftext|> as ppcoord does, and trains what a spec naming that id
// trains, bit for bit.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_format.h"
#include "common/file_io.h"
#include "common/job_spec.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "worker/trainer/trainer.h"

namespace pp::trainer {
namespace {

namespace fs = std::filesystem;

constexpr int32_t kEot = 299;  // the test tokenizer's <|endoftext|>

class TrainerDocumentsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("trainer_documents_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "tok");
    std::ofstream(dir_ / "tok/vocab.json") << R"({"a": 0, "b": 1, "ab": 2, "<|endoftext|>": 299})";
    std::ofstream(dir_ / "tok/merges.txt") << "#version: 0.2\na b\n";
    // uint16 ids below 300, an end of text after documents of 0 to 30 tokens.
    std::string ids;
    for (int i = 0, next_end = 3; i < 4000; ++i) {
      const int id = i == next_end ? kEot : (i * 37) % 256;
      if (i == next_end) next_end += 1 + (i * 7) % 31;
      ids.push_back(static_cast<char>(id & 0xff));
      ids.push_back(static_cast<char>(id >> 8));
    }
    std::ofstream(dir_ / "ids.bin", std::ios::binary) << ids;
  }
  void TearDown() override { fs::remove_all(dir_); }

  pp::v1::JobSpec Spec() const {
    pp::v1::JobSpec spec;
    spec.set_name("docs");
    auto* m = spec.mutable_model();
    m->set_vocab_size(320), m->set_seq_len(16), m->set_d_model(16), m->set_n_heads(2);
    m->set_n_layers(2), m->set_positions("document");
    spec.mutable_parallel()->set_pipeline(1);
    spec.mutable_parallel()->set_schedule("1f1b");
    auto* t = spec.mutable_train();
    t->set_steps(3), t->set_microbatches(2), t->set_microbatch_size(2), t->set_lr(1e-2);
    t->set_seed(3);
    auto* d = spec.mutable_data();
    d->set_format("uint16"), d->set_path((dir_ / "ids.bin").string());
    d->set_tokenizer((dir_ / "tok").string()), d->set_documents("mask");
    return spec;
  }

  // `ppctl train` of `spec`: its exit code, and the losses file's text.
  int TrainCommand(const pp::v1::JobSpec& spec, std::string* losses) const {
    std::string json;
    EXPECT_TRUE(google::protobuf::util::MessageToJsonString(spec, &json).ok());
    const std::string path = (dir_ / "spec.json").string();
    std::ofstream(path) << json;
    std::ostringstream log;
    TrainOptions options;
    options.log = &log;
    options.losses_path = (dir_ / "losses.txt").string();
    fs::remove(options.losses_path);
    const int code = TrainMain(path, options);
    *losses = common::ReadFile(options.losses_path).value_or("");
    return code;
  }

  fs::path dir_;
};

// The losses file's text of a Train run.
std::string LossesText(const pp::v1::JobSpec& spec) {
  absl::StatusOr<TrainResult> result = Train(spec, {});
  EXPECT_TRUE(result.ok()) << result.status();
  std::string text;
  if (!result.ok()) return text;
  for (size_t i = 0; i < result->losses.size(); ++i) {
    absl::StrAppendFormat(&text, "%d %.17g\n", i + 1, result->losses[i]);
  }
  return text;
}

TEST_F(TrainerDocumentsTest, TrainTakesTheTokenizersEndOfTextAsPpcoordDoes) {
  std::string losses;
  ASSERT_EQ(TrainCommand(Spec(), &losses), 0);
  pp::v1::JobSpec named = Spec();
  named.mutable_data()->set_end_of_text(kEot);
  common::ApplyDefaults(&named);
  EXPECT_EQ(losses, LossesText(named));
  named.mutable_data()->set_end_of_text(7);  // another id: other documents, other losses
  EXPECT_NE(losses, LossesText(named));
}

TEST_F(TrainerDocumentsTest, WideIdsWithoutAnEndOfTextAreRefused) {
  pp::v1::JobSpec spec = Spec();
  spec.mutable_data()->clear_tokenizer();
  std::string losses;
  EXPECT_EQ(TrainCommand(spec, &losses), 1);
  spec.mutable_data()->set_end_of_text(kEot);
  EXPECT_EQ(TrainCommand(spec, &losses), 0);
  EXPECT_FALSE(losses.empty());
}

}  // namespace
}  // namespace pp::trainer
