// The bounds of common/spec_bounds.h: each field passes at its limit and is refused one past it,
// each product likewise, overflowing products count as over, and ValidateJobSpec applies them
// (the spec that used to take ppcoord down among them).
#include "common/spec_bounds.h"

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/mesh.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pp::common {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using Spec = pp::v1::JobSpec;

// Small in every size, so that one field at its limit trips no product.
Spec Small() {
  Spec spec;
  spec.set_name("bounds");
  pp::v1::ModelSpec* model = spec.mutable_model();
  model->set_vocab_size(256);
  model->set_seq_len(16);
  model->set_d_model(32);
  model->set_n_heads(1);
  model->set_n_layers(2);
  spec.mutable_parallel()->set_pipeline(1);
  spec.mutable_parallel()->set_schedule("1f1b");
  spec.mutable_train()->set_steps(1);
  spec.mutable_train()->set_microbatches(1);
  spec.mutable_train()->set_microbatch_size(1);
  spec.mutable_data()->set_format("generated");
  ApplyDefaults(&spec);
  return spec;
}

// A refusal that starts with `subject` and names `limit`.
void ExpectOver(const Spec& spec, const std::string& subject, int64_t limit) {
  absl::Status status = CheckSpecBounds(spec);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << subject;
  EXPECT_THAT(std::string(status.message()), StartsWith(subject + ": "));
  EXPECT_THAT(std::string(status.message()), HasSubstr(absl::StrCat("over the limit ", limit)));
}

struct FieldCase {
  std::string field;
  int64_t limit;
  std::function<void(Spec&, int64_t)> set;
};

TEST(SpecBoundsTest, EachFieldPassesAtItsLimitAndIsRefusedOnePast) {
  const std::vector<FieldCase> cases = {
      {"name", kMaxNameBytes, [](Spec& s, int64_t n) { s.set_name(std::string(n, 'n')); }},
      {"model.vocab_size", kMaxVocabSize,
       [](Spec& s, int64_t v) { s.mutable_model()->set_vocab_size(v); }},
      {"model.seq_len", kMaxSeqLen, [](Spec& s, int64_t v) { s.mutable_model()->set_seq_len(v); }},
      {"model.d_model", kMaxDModel, [](Spec& s, int64_t v) { s.mutable_model()->set_d_model(v); }},
      {"model.n_layers", kMaxLayers,
       [](Spec& s, int64_t v) { s.mutable_model()->set_n_layers(v); }},
      {"parallel.pipeline", kMaxAxis,
       [](Spec& s, int64_t v) { s.mutable_parallel()->set_pipeline(v); }},
      {"parallel.chunks", kMaxChunks,
       [](Spec& s, int64_t v) { s.mutable_parallel()->set_chunks(v); }},
      {"parallel.tensor", kMaxAxis,
       [](Spec& s, int64_t v) { s.mutable_parallel()->set_tensor(v); }},
      {"parallel.data", kMaxAxis, [](Spec& s, int64_t v) { s.mutable_parallel()->set_data(v); }},
      {"parallel.bucket_bytes", kMaxBucketBytes,
       [](Spec& s, int64_t v) { s.mutable_parallel()->set_bucket_bytes(v); }},
      {"train.microbatch_size", kMaxMicrobatchSize,
       [](Spec& s, int64_t v) { s.mutable_train()->set_microbatch_size(v); }},
      {"train.threads", kMaxThreads, [](Spec& s, int64_t v) { s.mutable_train()->set_threads(v); }},
      {"data.path", kMaxPathBytes,
       [](Spec& s, int64_t n) { s.mutable_data()->set_path(std::string(n, 'p')); }},
      {"data.generated_tokens", kMaxGeneratedTokens,
       [](Spec& s, int64_t v) { s.mutable_data()->set_generated_tokens(v); }},
      {"checkpoint.keep", kMaxCheckpointsKept,
       [](Spec& s, int64_t v) { s.mutable_checkpoint()->set_keep(v); }},
      {"eval.batches", kMaxEvalBatches,
       [](Spec& s, int64_t v) { s.mutable_eval()->set_batches(v); }},
      {"eval.data.path", kMaxPathBytes,
       [](Spec& s, int64_t n) { s.mutable_eval()->mutable_data()->set_path(std::string(n, 'p')); }},
      {"eval.data.generated_tokens", kMaxGeneratedTokens,
       [](Spec& s, int64_t v) { s.mutable_eval()->mutable_data()->set_generated_tokens(v); }},
  };
  for (const FieldCase& c : cases) {
    SCOPED_TRACE(c.field);
    Spec spec = Small();
    c.set(spec, c.limit);
    EXPECT_TRUE(CheckSpecBounds(spec).ok()) << CheckSpecBounds(spec);
    c.set(spec, c.limit + 1);
    ExpectOver(spec, c.field, c.limit);
  }
}

TEST(SpecBoundsTest, NegativeBucketBytesAreRefused) {
  Spec spec = Small();
  spec.mutable_parallel()->set_bucket_bytes(-1);
  EXPECT_THAT(std::string(CheckSpecBounds(spec).message()),
              StartsWith("parallel.bucket_bytes: must be >= 0, got -1"));
}

TEST(SpecBoundsTest, RanksArePipelineTimesTensorTimesData) {
  Spec spec = Small();
  spec.mutable_parallel()->set_pipeline(16);
  spec.mutable_parallel()->set_tensor(16);
  spec.mutable_parallel()->set_data(16);
  EXPECT_TRUE(CheckSpecBounds(spec).ok()) << CheckSpecBounds(spec);
  spec.mutable_parallel()->set_data(17);
  ExpectOver(spec, "parallel.pipeline x parallel.tensor x parallel.data", kMaxWorldSize);
  EXPECT_THAT(std::string(CheckSpecBounds(spec).message()), HasSubstr("16 x 16 x 17 = 4352 ranks"));
}

TEST(SpecBoundsTest, SequencesPerStepAreDataTimesMicrobatchesTimesTheirSize) {
  Spec spec = Small();
  spec.mutable_parallel()->set_data(64);
  spec.mutable_train()->set_microbatches(16);
  spec.mutable_train()->set_microbatch_size(16384);  // 2^6 x 2^4 x 2^14 = 2^24
  EXPECT_TRUE(CheckSpecBounds(spec).ok()) << CheckSpecBounds(spec);
  spec.mutable_train()->set_microbatch_size(16385);
  ExpectOver(spec, "parallel.data x train.microbatches x train.microbatch_size",
             kMaxSequencesPerStep);
}

TEST(SpecBoundsTest, ActionsPerStepFollowTheSchedule) {
  struct Case {
    std::string schedule;
    int D, V, ranks_per_stage;  // ranks_per_stage: tensor x data
    int largest_M;              // the largest M within kMaxActionsPerStep
  };
  // world x V x M x (2 or 3 compute + 4 comm when D > 1) <= 65536.
  const std::vector<Case> cases = {
      {"gpipe", 1, 1, 1, 32768},           // 2 per microbatch
      {"1f1b", 4, 1, 1, 2730},             // 4 x 6 x 2730 = 65520
      {"zb-h1", 4, 1, 1, 2340},            // 4 x 7 x 2340 = 65520
      {"zb-v", 4, 2, 1, 1170},             // 4 x 2 x 7 x 1170 = 65520
      {"interleaved-1f1b", 4, 2, 4, 341},  // 16 x 2 x 6 x 341 = 65472
      {"1f1b", 1, 1, 64, 512},             // 64 x 2 x 512 = 65536
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat(c.schedule, " D=", c.D, " V=", c.V));
    Spec spec = Small();
    spec.mutable_model()->set_n_layers(8);
    spec.mutable_parallel()->set_schedule(c.schedule);
    spec.mutable_parallel()->set_pipeline(c.D);
    spec.mutable_parallel()->set_chunks(c.V);
    spec.mutable_parallel()->set_data(c.ranks_per_stage);
    spec.mutable_train()->set_microbatches(c.largest_M);
    EXPECT_TRUE(CheckSpecBounds(spec).ok()) << CheckSpecBounds(spec);
    spec.mutable_train()->set_microbatches(c.largest_M + 1);
    ExpectOver(spec, "train.microbatches", kMaxActionsPerStep);
  }
}

TEST(SpecBoundsTest, AMillionMicrobatchesAreRefusedForTheirTaskPlans) {
  Spec spec = Small();
  spec.mutable_parallel()->set_pipeline(4);
  spec.mutable_model()->set_n_layers(4);
  spec.mutable_train()->set_microbatches(1000000);
  ExpectOver(spec, "train.microbatches", kMaxActionsPerStep);
  EXPECT_THAT(std::string(CheckSpecBounds(spec).message()),
              HasSubstr("24000000 actions per step over all ranks (4 ranks x up to 6000000 each"));
}

TEST(SpecBoundsTest, TensorsStayWithinInt32Elements) {
  struct Case {
    std::string subject;
    std::function<void(Spec&)> at_limit;  // just within
    std::function<void(Spec&)> over;
  };
  const std::vector<Case> cases = {
      {"model.vocab_size x model.d_model",  // 2^20 x 2047 < 2^31 <= 2^20 x 2048
       [](Spec& s) {
         s.mutable_model()->set_vocab_size(kMaxVocabSize);
         s.mutable_model()->set_d_model(2047);
       },
       [](Spec& s) { s.mutable_model()->set_d_model(2048); }},
      {"train.microbatch_size x model.seq_len x 4 x model.d_model",  // 15, 16 x 2^11 x 4 x 2^14
       [](Spec& s) {
         s.mutable_model()->set_d_model(kMaxDModel);
         s.mutable_model()->set_seq_len(2048);
         s.mutable_train()->set_microbatch_size(15);
       },
       [](Spec& s) { s.mutable_train()->set_microbatch_size(16); }},
      {"train.microbatch_size x model.seq_len x model.vocab_size",  // 127, 128 x 2^7 x 2^17
       [](Spec& s) {
         s.mutable_model()->set_vocab_size(1 << 17);
         s.mutable_model()->set_seq_len(128);
         s.mutable_train()->set_microbatch_size(127);
       },
       [](Spec& s) { s.mutable_train()->set_microbatch_size(128); }},
      {"train.microbatch_size x model.n_heads x model.seq_len x model.seq_len",  // 1, 2 x 2^30
       [](Spec& s) { s.mutable_model()->set_seq_len(kMaxSeqLen); },
       [](Spec& s) { s.mutable_train()->set_microbatch_size(2); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.subject);
    Spec spec = Small();
    c.at_limit(spec);
    EXPECT_TRUE(CheckSpecBounds(spec).ok()) << CheckSpecBounds(spec);
    c.over(spec);
    ExpectOver(spec, c.subject, kMaxTensorElements);
  }
}

TEST(SpecBoundsTest, ParametersAreCountedAndBounded) {
  Spec spec = Small();
  spec.mutable_model()->set_d_model(8192);
  spec.mutable_model()->set_n_layers(64);  // 64 x (12 x 2^26 + 13 x 2^13) + 2^21 + ... < 2^36
  EXPECT_TRUE(CheckSpecBounds(spec).ok()) << CheckSpecBounds(spec);
  spec.mutable_model()->set_n_layers(kMaxLayers);
  ExpectOver(spec, "model", kMaxParameters);
  // 1024 x (12 x 8192^2 + 13 x 8192) + 256 x 8192 x 2 + 16 x 8192 + 2 x 8192
  EXPECT_THAT(std::string(CheckSpecBounds(spec).message()), HasSubstr("824747114496 parameters"));
}

TEST(SpecBoundsTest, CheckedProductSaysWhenInt64Overflows) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(CheckedProduct({}), 1);
  EXPECT_EQ(CheckedProduct({65536, 65536, 4}), int64_t{1} << 34);
  EXPECT_EQ(CheckedProduct({kMax, 1}), kMax);
  EXPECT_EQ(CheckedProduct({3037000499, 3037000499}), int64_t{3037000499} * 3037000499);
  EXPECT_EQ(CheckedProduct({3037000500, 3037000500}), std::nullopt);
  EXPECT_EQ(CheckedProduct({65536, 65536, 65536, 65536}), std::nullopt);  // 2^64
  EXPECT_EQ(CheckedProduct({-1, std::numeric_limits<int64_t>::min()}), std::nullopt);
  EXPECT_EQ(MaxActionsPerRank("1f1b", 4, 1, 8), 48);
  EXPECT_EQ(MaxActionsPerRank("zb-v", 1, 2, 8), 48);
  EXPECT_EQ(MaxActionsPerRank("1f1b", 2, kMax / 2, 3), std::nullopt);
}

// The mesh is the other guard of the product that used to wrap to 0 and crash ppcoord's placement.
TEST(SpecBoundsTest, AMeshRefusesMoreRanksThanAnInt) {
  constexpr int kMaxInt = std::numeric_limits<int>::max();
  absl::StatusOr<Mesh> wrapped = Mesh::Create(65536, 4, 65536);  // 2^34
  EXPECT_EQ(wrapped.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(wrapped.status().message()), HasSubstr("more ranks than an int"));
  EXPECT_FALSE(Mesh::Create(kMaxInt, kMaxInt, kMaxInt).ok());  // past int64 as well
  absl::StatusOr<Mesh> widest = Mesh::Create(kMaxInt, 1, 1);
  ASSERT_TRUE(widest.ok()) << widest.status();
  EXPECT_EQ(widest->size(), kMaxInt);
}

// The documented example and a GPT-2 small sized job are far inside every bound.
TEST(SpecBoundsTest, UsualSpecsPass) {
  Spec example = Small();
  example.mutable_model()->set_seq_len(64);
  example.mutable_model()->set_d_model(128);
  example.mutable_model()->set_n_heads(4);
  example.mutable_model()->set_n_layers(4);
  example.mutable_parallel()->set_pipeline(4);
  example.mutable_train()->set_microbatches(8);
  example.mutable_train()->set_microbatch_size(4);
  EXPECT_TRUE(CheckSpecBounds(example).ok()) << CheckSpecBounds(example);
  Spec gpt2 = example;
  gpt2.mutable_model()->set_vocab_size(50304);  // GPT-2's 50257 padded to a multiple of 64
  gpt2.mutable_model()->set_real_vocab_size(50257);
  gpt2.mutable_model()->set_seq_len(1024);
  gpt2.mutable_model()->set_d_model(768);
  gpt2.mutable_model()->set_n_heads(12);
  gpt2.mutable_model()->set_n_layers(12);
  gpt2.mutable_parallel()->set_tensor(2);
  gpt2.mutable_parallel()->set_data(8);
  gpt2.mutable_train()->set_microbatches(32);
  gpt2.mutable_train()->set_microbatch_size(8);
  EXPECT_TRUE(CheckSpecBounds(gpt2).ok()) << CheckSpecBounds(gpt2);
}

// Through ValidateJobSpec: the spec that used to crash ppcoord, and the other hostile sizes.
TEST(SpecBoundsTest, ValidateJobSpecRefusesHostileSizes) {
  Spec crashing = Small();
  crashing.mutable_model()->set_d_model(65536);
  crashing.mutable_model()->set_n_heads(65536);
  crashing.mutable_parallel()->set_tensor(65536);
  crashing.mutable_parallel()->set_data(65536);
  absl::Status status = ValidateJobSpec(crashing);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              StartsWith(absl::StrCat("model.d_model: 65536 is over the limit ", kMaxDModel)));
  // Within every field limit, the ranks multiply past 2^32 in int: refused as a product.
  Spec mesh = Small();
  mesh.mutable_model()->set_d_model(4096);
  mesh.mutable_model()->set_n_heads(4096);
  mesh.mutable_model()->set_n_layers(kMaxLayers);
  mesh.mutable_parallel()->set_pipeline(1024);
  mesh.mutable_parallel()->set_tensor(4096);
  mesh.mutable_parallel()->set_data(4096);
  status = ValidateJobSpec(mesh);
  EXPECT_THAT(std::string(status.message()),
              StartsWith("parallel.pipeline x parallel.tensor x parallel.data: 1024 x 4096 x 4096 "
                         "= 17179869184 ranks is over the limit 4096"));
  Spec layers = Small();
  layers.mutable_model()->set_n_layers(300000000);
  EXPECT_THAT(std::string(ValidateJobSpec(layers).message()),
              StartsWith("model.n_layers: 300000000 is over the limit 1024"));
  Spec microbatches = Small();
  microbatches.mutable_train()->set_microbatches(1000000);
  EXPECT_THAT(std::string(ValidateJobSpec(microbatches).message()),
              StartsWith("train.microbatches: 1000000 microbatches make 2000000 actions"));
}

// The whole spec is bounded in bytes, as protobuf encodes it: at most kMaxSpecBytes passes, one
// byte more is refused naming the cap and the largest field, before any other bound.
TEST(SpecBoundsTest, TheWholeSpecIsBoundedInBytes) {
  Spec at_limit;
  at_limit.mutable_parallel()->set_schedule_file(std::string(kMaxSpecBytes - 8, ' '));
  ASSERT_EQ(at_limit.ByteSizeLong(), static_cast<size_t>(kMaxSpecBytes))
      << "two tags and two 3-byte lengths around the text";
  EXPECT_TRUE(CheckSpecBytes(at_limit).ok()) << CheckSpecBytes(at_limit);
  Spec over = at_limit;
  over.set_name("x");
  const absl::Status status = CheckSpecBytes(over);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              StartsWith(absl::StrCat("spec: ", kMaxSpecBytes + 3, " bytes is over the limit ",
                                      kMaxSpecBytes)));
  EXPECT_THAT(std::string(status.message()), HasSubstr("the largest field is parallel with"));
  // A carried schedule at its own limit leaves room for everything else.
  Spec carried = Small();
  carried.mutable_parallel()->clear_schedule();
  carried.mutable_parallel()->set_schedule_file(std::string(kMaxScheduleCsvBytes, ' '));
  carried.set_name(std::string(kMaxNameBytes, 'n'));
  carried.mutable_data()->set_path(std::string(kMaxPathBytes, 'p'));
  carried.mutable_model()->set_init_from(std::string(kMaxPathBytes, 'i'));
  carried.mutable_eval()->mutable_data()->set_path(std::string(kMaxPathBytes, 'e'));
  EXPECT_TRUE(CheckSpecBytes(carried).ok()) << CheckSpecBytes(carried);
  // CheckSpecBounds (and so ValidateJobSpec) checks the bytes first: 3.7 MiB of name is refused
  // as bytes, whatever else the spec says.
  Spec huge = Small();
  huge.set_name(std::string(3700 << 10, 'n'));
  EXPECT_THAT(std::string(CheckSpecBounds(huge).message()), StartsWith("spec: 3788"));
  EXPECT_THAT(std::string(ValidateJobSpec(huge).message()), StartsWith("spec: 3788"));
}

// Fields no one knows (a newer client's, or padding) are kept by the parser and would be stored
// and served: refused wherever they sit, naming the message's path and the field's number.
TEST(SpecBoundsTest, UnknownFieldsAnywhereAreRefused) {
  Spec spec = Small();
  EXPECT_TRUE(CheckSpecBytes(spec).ok());
  std::string wire = spec.SerializeAsString();
  // Field 1000, wire type 2 (length-delimited), 3 bytes: what a client appends to the request.
  wire += std::string("\xc2\x3e\x03" "abc", 6);
  Spec parsed;
  ASSERT_TRUE(parsed.ParseFromString(wire));
  absl::Status status = CheckSpecBytes(parsed);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              StartsWith("spec: unknown field number 1000 (pp.v1.JobSpec has no such field"));
  EXPECT_THAT(std::string(ValidateJobSpec(parsed).message()),
              StartsWith("spec: unknown field number 1000"));

  Spec nested = Small();
  nested.mutable_parallel()->mutable_auto_plan()->GetReflection()->MutableUnknownFields(
      nested.mutable_parallel()->mutable_auto_plan())->AddVarint(99, 7);
  EXPECT_THAT(std::string(CheckSpecBytes(nested).message()),
              StartsWith("parallel.auto_plan: unknown field number 99 (pp.v1.AutoPlanSpec"));
  Spec eval = Small();
  eval.mutable_eval()->mutable_data()->GetReflection()->MutableUnknownFields(
      eval.mutable_eval()->mutable_data())->AddLengthDelimited(42, std::string(1 << 20, 'x'));
  EXPECT_THAT(std::string(CheckSpecBytes(eval).message()),
              StartsWith("eval.data: unknown field number 42 (pp.v1.DataSpec"));
  // A part of a spec is checked under the path it is given (ResumeJob's parallel).
  EXPECT_THAT(std::string(CheckNoUnknownFields(nested.parallel(), "parallel").message()),
              StartsWith("parallel.auto_plan: unknown field number 99"));
}

}  // namespace
}  // namespace pp::common
