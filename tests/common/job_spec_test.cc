#include "common/job_spec.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "common/hf_gpt2.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pp::common {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// The documented example spec, with a data file the test owns.
std::string DesignExample(const std::string& data_path) {
  return absl::StrCat(R"({"name": "tiny",
   "model": {"vocabSize": 256, "seqLen": 64, "dModel": 128, "nHeads": 4, "nLayers": 4},
   "parallel": {"pipeline": 4, "chunks": 1, "tensor": 1, "data": 1, "schedule": "1f1b"},
   "train": {"steps": 20, "microbatches": 8, "microbatchSize": 4, "lr": 0.0003,
             "weightDecay": 0.1, "gradClip": 1.0, "seed": 1},
   "data": {"path": ")",
                      data_path, R"("},
   "checkpoint": {"everySteps": 10, "keep": 3}})");
}

class JobSpecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/job_spec_test_" + std::to_string(::getpid());
    ASSERT_TRUE(MakeDirs(dir_).ok());
    data_ = dir_ + "/job_spec_data.txt";
    ASSERT_TRUE(WriteFileAtomic(data_, std::string(1000, 'a')).ok());
    absl::StatusOr<pp::v1::JobSpec> spec = ParseJobSpec(DesignExample(data_));
    ASSERT_TRUE(spec.ok()) << spec.status();
    spec_ = *spec;
    ApplyDefaults(&spec_);
    ASSERT_TRUE(ValidateJobSpec(spec_).ok()) << ValidateJobSpec(spec_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Validation of a modified copy of the good spec must fail with a message starting `prefix`.
  template <typename Mutate>
  void ExpectInvalid(Mutate mutate, const std::string& prefix) {
    pp::v1::JobSpec spec = spec_;
    mutate(&spec);
    absl::Status status = ValidateJobSpec(spec);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << prefix;
    EXPECT_THAT(std::string(status.message()), StartsWith(prefix));
  }

  // The uint16 file at `path` holds token 50256 as its largest: a vocabulary of 50257 validates,
  // one of 50256 is refused naming the token. Returns the valid spec.
  pp::v1::JobSpec ExpectLargestTokenIs50256(const std::string& path) {
    pp::v1::JobSpec spec = spec_;
    spec.mutable_data()->set_path(path);
    spec.mutable_data()->set_format("uint16");
    spec.mutable_model()->set_vocab_size(50256);
    EXPECT_THAT(std::string(ValidateJobSpec(spec).message()),
                StartsWith("model.vocab_size: 50256 is too small for uint16 data with token 50256"));
    spec.mutable_model()->set_vocab_size(50257);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
    return spec;
  }

  std::string dir_;
  std::string data_;
  pp::v1::JobSpec spec_;
};

TEST_F(JobSpecTest, DesignExampleParses) {
  EXPECT_EQ(spec_.name(), "tiny");
  EXPECT_EQ(spec_.model().d_model(), 128);
  EXPECT_EQ(spec_.parallel().schedule(), "1f1b");
  EXPECT_EQ(spec_.train().microbatch_size(), 4);
  EXPECT_DOUBLE_EQ(spec_.train().lr(), 0.0003);
  EXPECT_EQ(spec_.checkpoint().every_steps(), 10);
}

TEST_F(JobSpecTest, TextFormatAndFilesLoad) {
  std::string text = absl::StrCat(
      "name: \"tiny\"\nmodel { vocab_size: 256 seq_len: 64 d_model: 128 n_heads: 4 n_layers: 4 }\n",
      "parallel { pipeline: 4 schedule: \"1f1b\" }\n",
      "train { steps: 20 microbatches: 8 microbatch_size: 4 lr: 0.0003 weight_decay: 0.1 ",
      "grad_clip: 1.0 seed: 1 }\n", "data { path: \"", data_, "\" }\n",
      "checkpoint { every_steps: 10 keep: 3 }\n");
  ASSERT_TRUE(WriteFileAtomic(dir_ + "/spec.txtpb", text).ok());
  absl::StatusOr<pp::v1::JobSpec> spec = LoadJobSpec(dir_ + "/spec.txtpb");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ApplyDefaults(&*spec);
  EXPECT_EQ(spec->SerializeAsString(), spec_.SerializeAsString());

  ASSERT_TRUE(WriteFileAtomic(dir_ + "/spec.json", "\n  " + DesignExample(data_)).ok());
  spec = LoadJobSpec(dir_ + "/spec.json");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ApplyDefaults(&*spec);
  EXPECT_EQ(spec->SerializeAsString(), spec_.SerializeAsString());
}

TEST_F(JobSpecTest, ParseErrorsNameTheFileAndTheParser) {
  absl::StatusOr<pp::v1::JobSpec> spec = ParseJobSpec(R"({"model": {"dModle": 3}})", "a.json");
  EXPECT_THAT(std::string(spec.status().message()),
              StartsWith("a.json: not a valid JobSpec (JSON): "));
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("dModle"));
  spec = ParseJobSpec("model { d_model: \"x\" }", "a.txtpb");
  EXPECT_THAT(std::string(spec.status().message()),
              StartsWith("a.txtpb: not a valid JobSpec (text format): line 1"));
  EXPECT_THAT(std::string(LoadJobSpec(dir_ + "/nope.json").status().message()),
              HasSubstr("nope.json"));
}

TEST_F(JobSpecTest, DefaultsFillZeros) {
  pp::v1::JobSpec spec;
  spec.mutable_data()->set_format("generated");
  ApplyDefaults(&spec);
  EXPECT_EQ(spec.parallel().chunks(), 1);
  EXPECT_EQ(spec.parallel().tensor(), 1);
  EXPECT_EQ(spec.parallel().data(), 1);
  EXPECT_EQ(spec.parallel().partition(), "cost");
  EXPECT_DOUBLE_EQ(spec.train().beta1(), 0.9);
  EXPECT_DOUBLE_EQ(spec.train().beta2(), 0.95);
  EXPECT_DOUBLE_EQ(spec.train().eps(), 1e-8);
  EXPECT_EQ(spec.train().threads(), 1);
  EXPECT_EQ(spec.checkpoint().keep(), 3);
  EXPECT_EQ(spec.data().generated_tokens(), 1 << 20);
  pp::v1::JobSpec bytes;
  ApplyDefaults(&bytes);
  EXPECT_EQ(bytes.data().format(), "bytes");
  EXPECT_EQ(bytes.data().generated_tokens(), 0);
  spec.mutable_train()->set_beta2(0.999);  // set values stay
  ApplyDefaults(&spec);
  EXPECT_DOUBLE_EQ(spec.train().beta2(), 0.999);
}

using Spec = pp::v1::JobSpec;

TEST_F(JobSpecTest, ModelErrors) {
  ExpectInvalid([](Spec* s) { s->mutable_model()->set_n_heads(5); },
                "model.n_heads: 5 does not divide model.d_model 128");
  ExpectInvalid([](Spec* s) { s->mutable_model()->set_d_model(0); }, "model.d_model: must be >= 1");
  ExpectInvalid([](Spec* s) { s->mutable_model()->set_seq_len(-4); },
                "model.seq_len: must be >= 1");
  ExpectInvalid([](Spec* s) { s->mutable_model()->set_n_layers(0); },
                "model.n_layers: must be >= 1");
  ExpectInvalid([](Spec* s) { s->mutable_model()->set_n_heads(0); }, "model.n_heads: must be >= 1");
  ExpectInvalid([](Spec* s) { s->mutable_model()->set_vocab_size(0); },
                "model.vocab_size: must be >= 1");
  ExpectInvalid([](Spec* s) { s->mutable_model()->set_vocab_size(255); },
                "model.vocab_size: 255 is too small for bytes data");
}

TEST_F(JobSpecTest, ParallelErrors) {
  ExpectInvalid([](Spec* s) { s->mutable_parallel()->set_pipeline(0); },
                "parallel.pipeline: must be >= 1");
  ExpectInvalid([](Spec* s) { s->mutable_parallel()->set_data(-1); },
                "parallel.data: must be >= 1");
  ExpectInvalid([](Spec* s) { s->mutable_parallel()->set_tensor(3); },
                "parallel.tensor: 3 does not divide model.n_heads 4");
  ExpectInvalid([](Spec* s) { s->mutable_parallel()->set_schedule("2f2b"); },
                "parallel.schedule: unknown value \"2f2b\"");
  ExpectInvalid([](Spec* s) { s->mutable_parallel()->clear_schedule(); },
                "parallel.schedule: unknown value \"\"");
  ExpectInvalid(
      [](Spec* s) {
        s->mutable_parallel()->set_schedule("zb-v");
        s->mutable_parallel()->set_chunks(1);
      },
      "parallel.chunks: schedule zb-v needs 2 chunks, got 1");
  ExpectInvalid(
      [](Spec* s) {
        s->mutable_parallel()->set_schedule("interleaved-1f1b");
        s->mutable_parallel()->set_chunks(1);
      },
      "parallel.chunks: schedule interleaved-1f1b needs >= 2 chunks, got 1");
  for (const char* schedule : {"gpipe", "1f1b", "zb-h1"}) {
    ExpectInvalid(
        [&](Spec* s) {
          s->mutable_parallel()->set_schedule(schedule);
          s->mutable_parallel()->set_chunks(2);
        },
        absl::StrCat("parallel.chunks: schedule ", schedule, " needs 1 chunk, got 2"));
  }
  ExpectInvalid([](Spec* s) { s->mutable_parallel()->set_pipeline(7); },
                "parallel.pipeline: pipeline 7 x chunks 1 = 7 stages but the model has only 6");
  ExpectInvalid([](Spec* s) { s->mutable_parallel()->set_partition("random"); },
                "parallel.partition: unknown value \"random\"");
  ExpectInvalid([](Spec* s) { s->mutable_parallel()->add_stage_layers(6); },
                "parallel.stage_layers: only allowed with partition \"explicit\"");
  auto explicit_layers = [](std::vector<int> layers) {
    return [layers](Spec* s) {
      s->mutable_parallel()->set_partition("explicit");
      for (int n : layers) s->mutable_parallel()->add_stage_layers(n);
    };
  };
  ExpectInvalid(explicit_layers({3, 3}), "parallel.stage_layers: has 2 entries, need");
  ExpectInvalid(explicit_layers({1, 1, 1, 1}), "parallel.stage_layers: sum to 4, need");
  ExpectInvalid(explicit_layers({3, 0, 2, 1}), "parallel.stage_layers[1]: must be >= 1, got 0");
  Spec good = spec_;
  explicit_layers({1, 2, 2, 1})(&good);
  EXPECT_TRUE(ValidateJobSpec(good).ok());
  good = spec_;
  good.mutable_parallel()->set_schedule("interleaved-1f1b");
  good.mutable_parallel()->set_pipeline(3);
  good.mutable_parallel()->set_chunks(2);
  EXPECT_TRUE(ValidateJobSpec(good).ok());
}

TEST_F(JobSpecTest, TrainErrors) {
  ExpectInvalid([](Spec* s) { s->mutable_train()->set_steps(0); }, "train.steps: must be >= 1");
  ExpectInvalid([](Spec* s) { s->mutable_train()->set_microbatches(0); },
                "train.microbatches: must be >= 1");
  ExpectInvalid([](Spec* s) { s->mutable_train()->set_microbatch_size(0); },
                "train.microbatch_size: must be >= 1");
  ExpectInvalid([](Spec* s) { s->mutable_train()->set_threads(-2); },
                "train.threads: must be >= 1");
  ExpectInvalid([](Spec* s) { s->mutable_train()->set_lr(-1e-3); }, "train.lr: must be a finite");
  ExpectInvalid([](Spec* s) { s->mutable_train()->set_lr(std::nan("")); },
                "train.lr: must be a finite");
  ExpectInvalid([](Spec* s) { s->mutable_train()->set_weight_decay(-0.1); },
                "train.weight_decay: must be a finite");
  ExpectInvalid([](Spec* s) { s->mutable_train()->set_grad_clip(-1); },
                "train.grad_clip: must be a finite");
  ExpectInvalid([](Spec* s) { s->mutable_train()->set_beta1(1.0); },
                "train.beta1: must be in [0, 1), got 1");
  ExpectInvalid([](Spec* s) { s->mutable_train()->set_beta2(-0.5); }, "train.beta2: must be in");
  ExpectInvalid([](Spec* s) { s->mutable_train()->set_eps(-1); }, "train.eps: must be > 0");
  ExpectInvalid([](Spec* s) { s->mutable_train()->set_warmup_steps(-1); },
                "train.warmup_steps: must be a finite number >= 0, got -1");
  ExpectInvalid([](Spec* s) { s->mutable_train()->set_decay_steps(-3); },
                "train.decay_steps: must be a finite number >= 0, got -3");
  ExpectInvalid([](Spec* s) { s->mutable_train()->set_decay("exponential"); },
                "train.decay: unknown value \"exponential\" (one of constant, cosine, linear)");
  ExpectInvalid([](Spec* s) { s->mutable_train()->set_min_lr(std::nan("")); },
                "train.min_lr: must be a finite");
  ExpectInvalid([](Spec* s) { s->mutable_train()->set_min_lr(1.0); },
                "train.min_lr: must be <= train.lr (0.0003), got 1");
}

TEST_F(JobSpecTest, PrecisionIsFp32ByDefaultOrBf16AndNothingElse) {
  EXPECT_EQ(spec_.train().precision(), "fp32");  // ApplyDefaults filled it
  Spec bf16 = spec_;
  bf16.mutable_train()->set_precision("bf16");
  EXPECT_TRUE(ValidateJobSpec(bf16).ok()) << ValidateJobSpec(bf16);
  ApplyDefaults(&bf16);
  EXPECT_EQ(bf16.train().precision(), "bf16");  // a set value stays
  for (const char* bad : {"fp16", "BF16", "float32", "bf16 "}) {
    Spec spec = spec_;
    spec.mutable_train()->set_precision(bad);
    const absl::Status status = ValidateJobSpec(spec);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(std::string(status.message()),
              absl::StrCat("train.precision: unknown value \"", bad, "\" (one of fp32, bf16)"));
  }
}

TEST_F(JobSpecTest, CheckpointAndRestartErrors) {
  ExpectInvalid([](Spec* s) { s->mutable_checkpoint()->set_every_steps(-1); },
                "checkpoint.every_steps: must be >= 0");
  ExpectInvalid([](Spec* s) { s->mutable_checkpoint()->set_keep(-1); },
                "checkpoint.keep: must be >= 1");
  ExpectInvalid([](Spec* s) { s->set_max_restarts(-1); }, "max_restarts: must be >= 0");
}

TEST_F(JobSpecTest, DataErrors) {
  ExpectInvalid([](Spec* s) { s->mutable_data()->clear_path(); }, "data.path: missing");
  ExpectInvalid([&](Spec* s) { s->mutable_data()->set_path(dir_ + "/absent.bin"); },
                "data.path: cannot open " + dir_ + "/absent.bin");
  ExpectInvalid([&](Spec* s) { s->mutable_data()->set_path(dir_); }, "data.path: ");
  ExpectInvalid([](Spec* s) { s->mutable_data()->set_format("utf8"); },
                "data.format: unknown value \"utf8\"");
  std::string shortfile = dir_ + "/short.txt";
  ASSERT_TRUE(WriteFileAtomic(shortfile, std::string(64, 'x')).ok());  // needs 65 tokens
  ExpectInvalid(
      [&](Spec* s) { s->mutable_data()->set_path(shortfile); },
      "data.path: " + shortfile + " holds 64 tokens, need at least model.seq_len + 1 = 65");
  ExpectInvalid(
      [](Spec* s) {
        s->mutable_data()->set_format("generated");
        s->mutable_data()->set_generated_tokens(10);
      },
      "data.generated_tokens: 10 is fewer than model.seq_len + 1 = 65");
}

TEST_F(JobSpecTest, EvalNeedsBatchesAndExactlyOneSource) {
  pp::v1::JobSpec holdout = spec_;
  holdout.mutable_eval()->set_batches(2);
  holdout.mutable_eval()->set_every_steps(5);
  holdout.mutable_eval()->set_holdout_fraction(0.2);
  EXPECT_TRUE(ValidateJobSpec(holdout).ok()) << ValidateJobSpec(holdout);
  pp::v1::JobSpec separate = spec_;
  separate.mutable_eval()->set_batches(1);
  separate.mutable_eval()->mutable_data()->set_path(data_);
  ApplyDefaults(&separate);
  EXPECT_EQ(separate.eval().data().format(), "bytes");
  EXPECT_TRUE(ValidateJobSpec(separate).ok()) << ValidateJobSpec(separate);

  ExpectInvalid([](Spec* s) { s->mutable_eval()->set_every_steps(10); },
                "eval.batches: must be >= 1 when eval sets");
  ExpectInvalid([](Spec* s) { s->mutable_eval()->set_batches(-1); }, "eval.batches: must be >= 0");
  ExpectInvalid(
      [](Spec* s) {
        s->mutable_eval()->set_batches(1);
        s->mutable_eval()->set_every_steps(-2);
      },
      "eval.every_steps: must be >= 0");
  ExpectInvalid([](Spec* s) { s->mutable_eval()->set_batches(1); },
                "eval: needs exactly one of eval.data and eval.holdout_fraction");
  ExpectInvalid(
      [&](Spec* s) {
        *s = holdout;
        s->mutable_eval()->mutable_data()->set_path(data_);
      },
      "eval: needs exactly one of");
  for (double bad : {-0.1, 1.0, 2.0}) {
    ExpectInvalid(
        [&](Spec* s) {
          *s = holdout;
          s->mutable_eval()->set_holdout_fraction(bad);
        },
        "eval.holdout_fraction: must be in (0, 1)");
  }
  ExpectInvalid(
      [&](Spec* s) {
        *s = separate;
        s->mutable_eval()->mutable_data()->set_path(dir_ + "/absent.bin");
      },
      "eval.data.path: cannot open " + dir_ + "/absent.bin");
}

TEST_F(JobSpecTest, NoJobTrainsWithTheForwardOnlySchedule) {
  ExpectInvalid([](Spec* s) { s->mutable_parallel()->set_schedule("forward-only"); },
                "parallel.schedule: unknown value \"forward-only\" (one of gpipe, 1f1b, "
                "interleaved-1f1b, zb-h1, zb-h2, zb-v, v-half, v-min, dualpipe-v)");
}

// parallel.schedule "auto": chunks 0 stays (V is chosen), the bounds get their defaults, and what
// ppcoord chooses may not be fixed in the spec.
TEST_F(JobSpecTest, AutoScheduleLeavesTheChoiceOpen) {
  pp::v1::JobSpec spec = spec_;
  pp::v1::ParallelSpec* p = spec.mutable_parallel();
  p->set_schedule("auto");
  p->set_chunks(0);
  p->clear_partition();
  ApplyDefaults(&spec);
  EXPECT_TRUE(IsAutoSchedule(spec.parallel()));
  EXPECT_EQ(spec.parallel().chunks(), 0);
  EXPECT_EQ(spec.parallel().partition(), "");
  const pp::v1::AutoPlanSpec& bounds = spec.parallel().auto_plan();
  EXPECT_EQ(bounds.max_chunks(), 4);
  EXPECT_EQ(bounds.max_microbatches(), 64);
  EXPECT_EQ(bounds.calibration_seconds(), 10);
  EXPECT_EQ(bounds.drift_threshold(), 0.25);
  EXPECT_EQ(bounds.drift_steps(), 5);
  EXPECT_EQ(bounds.max_replans(), 1);
  ASSERT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  spec_ = spec;
  ExpectInvalid([](Spec* s) { s->mutable_parallel()->set_tensor(2); },
                "parallel.schedule: \"auto\" plans pipeline parallelism only");
  ExpectInvalid([](Spec* s) { s->mutable_parallel()->set_partition("uniform"); },
                "parallel.partition: must be empty with parallel.schedule \"auto\"");
  ExpectInvalid([](Spec* s) { s->mutable_parallel()->set_recompute("full"); },
                "parallel.recompute: with parallel.schedule \"auto\" only none or auto");
  ExpectInvalid([](Spec* s) { s->mutable_parallel()->add_program("0F0"); },
                "parallel.program: not allowed with parallel.schedule \"auto\"");
  ExpectInvalid([](Spec* s) { s->mutable_parallel()->mutable_auto_plan()->set_max_chunks(17); },
                "parallel.auto_plan.max_chunks: must be in [1, 16], got 17");
  ExpectInvalid(
      [](Spec* s) {
        s->mutable_parallel()->mutable_auto_plan()->set_drift_threshold(std::nan(""));
      },
      "parallel.auto_plan.drift_threshold: must be in");
  ExpectInvalid([](Spec* s) { s->mutable_parallel()->mutable_auto_plan()->set_max_replans(-2); },
                "parallel.auto_plan.max_replans: must be in [-1, 100], got -2");
  ExpectInvalid([](Spec* s) { s->mutable_parallel()->set_pipeline(100); },
                "parallel.pipeline: pipeline 100 stages but the model has only");
}

// A schedule carried as torch CSV replaces the named one; its contents are the planner's to check
// (tests/coordinator/plan/spec_schedule_test.cc), its size and the spec's fields are checked here.
TEST_F(JobSpecTest, CarriedScheduleReplacesTheName) {
  pp::v1::JobSpec carried = spec_;
  carried.mutable_parallel()->clear_schedule();
  carried.mutable_parallel()->set_schedule_file("0F0,0B0\r\n1F0,1B0\r\n");
  EXPECT_TRUE(ValidateJobSpec(carried).ok()) << ValidateJobSpec(carried);
  EXPECT_EQ(ScheduleLabel(carried.parallel()), "schedule-file");
  EXPECT_EQ(CarriedScheduleCsv(carried.parallel()), "0F0,0B0\r\n1F0,1B0\r\n");
  EXPECT_EQ(ScheduleLabel(spec_.parallel()), "1f1b");
  EXPECT_EQ(CarriedScheduleCsv(spec_.parallel()), "");

  pp::v1::JobSpec rows = spec_;
  rows.mutable_parallel()->clear_schedule();
  rows.mutable_parallel()->add_program("0F0,0B0");
  rows.mutable_parallel()->add_program("1F0,1B0");
  EXPECT_TRUE(ValidateJobSpec(rows).ok()) << ValidateJobSpec(rows);
  EXPECT_EQ(CarriedScheduleCsv(rows.parallel()), "0F0,0B0\n1F0,1B0");

  ExpectInvalid([](Spec* s) { s->mutable_parallel()->set_schedule_file("0F0,0B0"); },
                "parallel.schedule: must be empty when parallel.schedule_file carries the "
                "schedule, got \"1f1b\"");
  ExpectInvalid(
      [](Spec* s) {
        s->mutable_parallel()->clear_schedule();
        s->mutable_parallel()->set_schedule_file("0F0,0B0");
        s->mutable_parallel()->add_program("0F0,0B0");
      },
      "parallel.program: give the schedule once");
  ExpectInvalid(
      [](Spec* s) {
        s->mutable_parallel()->clear_schedule();
        s->mutable_parallel()->set_schedule_file(std::string((1 << 20) + 1, ','));
      },
      "parallel.schedule_file: 1048577 bytes is over the limit 1048576");
  // 4 ranks x 3 x a row of 6000 cells: 72000 actions a step, over 2^16.
  std::string row = "0F0";
  for (int i = 1; i < 6000; ++i) row += ",0F0";
  ExpectInvalid(
      [&](Spec* s) {
        s->mutable_parallel()->clear_schedule();
        s->mutable_parallel()->add_program(row);
      },
      "parallel.program: its longest row makes 72000 actions per step over all ranks (4 ranks "
      "x up to 18000 each) is over the limit 65536");
}

// model.init_from names a Hugging Face folder whose config.json must be the spec's model; the
// weights are checked where they load (tests/e2e/integration/init_from_test.cc).
TEST_F(JobSpecTest, InitFromMustHoldTheSpecsModel) {
  const std::string hf = dir_ + "/hf";
  ExpectInvalid([&](Spec* s) { s->mutable_model()->set_init_from(hf); },
                "model.init_from: ");
  ASSERT_TRUE(MakeDirs(hf).ok());
  pp::v1::ModelSpec model = spec_.model();
  ASSERT_TRUE(WriteFileAtomic(hf + "/config.json", HfGpt2ConfigJson(model)).ok());
  pp::v1::JobSpec good = spec_;
  good.mutable_model()->set_init_from(hf);
  EXPECT_TRUE(ValidateJobSpec(good).ok()) << ValidateJobSpec(good);
  pp::v1::JobSpec tied = good;
  tied.mutable_model()->set_tie_embeddings(true);
  EXPECT_THAT(std::string(ValidateJobSpec(tied).message()),
              StartsWith("model.tie_embeddings: the spec ties the head, "));
  model.set_tie_embeddings(true);
  ASSERT_TRUE(WriteFileAtomic(hf + "/config.json", HfGpt2ConfigJson(model)).ok());
  EXPECT_THAT(std::string(ValidateJobSpec(good).message()),
              StartsWith("model.tie_embeddings: the spec says false, " + hf +
                         "/config.json says tie_word_embeddings true"));
  EXPECT_TRUE(ValidateJobSpec(tied).ok()) << ValidateJobSpec(tied);
  pp::v1::JobSpec wider = tied;
  wider.mutable_model()->set_d_model(256);
  EXPECT_THAT(std::string(ValidateJobSpec(wider).message()),
              StartsWith("model.d_model: the spec says 256, " + hf + "/config.json says n_embd 128"));
}

// 1000 tokens, seq_len 64: 936 starts. 0.001 of them is none; 0.95 leaves 889 held out and
// 936 - 889 - 64 < 1 to train on.
TEST_F(JobSpecTest, HoldoutMustLeaveWindowsOnBothSides) {
  for (double fraction : {0.001, 0.95}) {
    ExpectInvalid(
        [&](Spec* s) {
          s->mutable_eval()->set_batches(1);
          s->mutable_eval()->set_holdout_fraction(fraction);
        },
        absl::StrCat("eval.holdout_fraction: ", fraction, " of the 936 window starts leaves "));
  }
}

TEST_F(JobSpecTest, Uint16VocabularyMustHoldEveryToken) {
  std::string tokens;
  for (int i = 0; i < 100; ++i) {
    uint16_t token = static_cast<uint16_t>(i == 57 ? 50256 : i);
    tokens.append(reinterpret_cast<const char*>(&token), 2);
  }
  std::string path = dir_ + "/tokens.u16";
  ASSERT_TRUE(WriteFileAtomic(path, tokens).ok());
  Spec spec = ExpectLargestTokenIs50256(path);
  ASSERT_TRUE(WriteFileAtomic(path, tokens + "x").ok());
  spec.mutable_model()->set_vocab_size(50257);
  EXPECT_THAT(std::string(ValidateJobSpec(spec).message()), HasSubstr("odd size (201 bytes)"));
}

// The file is read in 1 MiB chunks: a token in the last, partial chunk counts too.
TEST_F(JobSpecTest, Uint16ScanReadsEveryChunk) {
  std::vector<uint16_t> values((size_t{1} << 19) + 8);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<uint16_t>(i % 200);
  values.back() = 50256;
  std::string path = dir_ + "/long.u16";
  ASSERT_TRUE(WriteFileAtomic(path, std::string(reinterpret_cast<const char*>(values.data()),
                                                values.size() * 2))
                  .ok());
  ExpectLargestTokenIs50256(path);
}

// ValidateJobSpecFields opens nothing (ppcoord runs it under its lock); ValidateSpecFiles opens
// each file under the roots, refusing what is not a regular file without blocking on it.
TEST_F(JobSpecTest, FieldsOpenNoFileAndFilesOpenUnderTheRoots) {
  pp::v1::JobSpec absent = spec_;
  absent.mutable_data()->set_path(dir_ + "/absent.bin");
  absent.mutable_model()->set_init_from(dir_ + "/absent-model");
  absent.mutable_eval()->set_batches(1);
  absent.mutable_eval()->set_holdout_fraction(0.5);
  EXPECT_TRUE(ValidateJobSpecFields(absent).ok()) << ValidateJobSpecFields(absent);
  EXPECT_THAT(std::string(ValidateJobSpec(absent).message()), StartsWith("data.path: cannot open"));

  const std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ExpectInvalid([&](Spec* s) { s->mutable_data()->set_path(fifo); },
                "data.path: " + fifo + ": not a regular file (a FIFO)");

  const std::string root = dir_ + "/root";
  ASSERT_TRUE(MakeDirs(root + "/hf").ok());
  std::filesystem::create_symlink(data_, root + "/data.txt");
  pp::v1::JobSpec linked = spec_;
  linked.mutable_data()->set_path(root + "/data.txt");
  EXPECT_TRUE(ValidateSpecFiles(linked, {dir_}).ok()) << "the symlink stays inside " << dir_;
  EXPECT_THAT(std::string(ValidateSpecFiles(linked, {root}).message()),
              StartsWith("data.path \"" + root + "/data.txt\" is outside the allowed --data_root"));
  ASSERT_TRUE(WriteFileAtomic(dir_ + "/secret", "TOPSECRET is not JSON").ok());
  std::filesystem::create_symlink(dir_ + "/secret", root + "/hf/config.json");
  ASSERT_TRUE(WriteFileAtomic(root + "/corpus.txt", std::string(1000, 'a')).ok());
  linked.mutable_data()->set_path(root + "/corpus.txt");
  linked.mutable_model()->set_init_from(root + "/hf");
  const std::string refused(ValidateSpecFiles(linked, {root}).message());
  EXPECT_THAT(refused, StartsWith("model.init_from: config.json \"" + root +
                                  "/hf/config.json\" is outside the allowed --data_root"));
  const std::string unparsed(ValidateSpecFiles(linked, {}).message());
  EXPECT_THAT(unparsed, HasSubstr("config.json: not a JSON object"));
  EXPECT_THAT(unparsed + refused, ::testing::Not(HasSubstr("TOPSECRET")));
}

}  // namespace
}  // namespace pp::common
