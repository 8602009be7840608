// The single-process trainer: learns, is deterministic, equals a hand-run pipeline of three
// stages bit for bit, writes a loadable checkpoint in the common/checkpoint.h layout, and skips
// non-finite steps up to train.max_bad_steps.
#include "worker/trainer/trainer.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/checkpoint.h"
#include "common/step_math.h"
#include "common/job_spec.h"
#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "worker/data/data.h"
#include "worker/model/model.h"
#include "worker/optim/optim.h"

namespace pp::trainer {
namespace {

pp::v1::JobSpec TinySpec() {
  pp::v1::JobSpec spec;
  spec.set_name("tiny");
  auto* m = spec.mutable_model();
  m->set_vocab_size(256), m->set_seq_len(16), m->set_d_model(16), m->set_n_heads(2);
  m->set_n_layers(2);
  spec.mutable_parallel()->set_pipeline(1);
  spec.mutable_parallel()->set_schedule("1f1b");
  auto* t = spec.mutable_train();
  t->set_steps(6), t->set_microbatches(2), t->set_microbatch_size(2), t->set_lr(1e-2);
  t->set_weight_decay(0.1), t->set_grad_clip(1.0), t->set_seed(3);
  spec.mutable_data()->set_format("generated");
  spec.mutable_data()->set_generated_tokens(20000);
  spec.mutable_data()->set_generated_seed(1);
  spec.mutable_checkpoint()->set_every_steps(3);
  spec.mutable_checkpoint()->set_keep(1);
  common::ApplyDefaults(&spec);
  return spec;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("trainer_test_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(TrainerTest, LearnsAndIsDeterministic) {
  const auto spec = TinySpec();
  ASSERT_TRUE(common::ValidateJobSpec(spec).ok()) << common::ValidateJobSpec(spec);
  std::ostringstream log;
  TrainOptions opts;
  opts.log = &log;
  auto a = Train(spec, opts);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->losses.size(), 6u);
  EXPECT_NEAR(a->losses.front(), std::log(256.0), 0.1);
  EXPECT_LT(a->losses.back(), a->losses.front() - 0.3);
  EXPECT_EQ(a->tokens, 6 * 2 * 2 * 16);
  EXPECT_NE(log.str().find("step 6/6 loss"), std::string::npos) << log.str();
  auto b = Train(spec, {});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(0, std::memcmp(a->losses.data(), b->losses.data(), 6 * sizeof(double)));
  for (const auto& [name, v] : a->weights) EXPECT_TRUE(SameBits(v, b->weights.at(name))) << name;
}

// A log buffer that keeps what had been written at each flush.
class FlushRecorder : public std::stringbuf {
 public:
  std::vector<std::string> flushed;

 protected:
  int sync() override {
    flushed.push_back(str());
    return 0;
  }
};

// Each step's line is flushed as it is written: it is the run's progress through a pipe
// (`ppctl train | tee`), and bench/peer times the lines as they come.
TEST_F(TrainerTest, FlushesEachStepLine) {
  FlushRecorder buffer;
  std::ostream log(&buffer);
  TrainOptions opts;
  opts.log = &log;
  ASSERT_TRUE(Train(TinySpec(), opts).ok());
  for (int step = 1; step <= 6; ++step) {
    const std::string line = absl::StrFormat("step %d/6 loss", step);
    bool flushed = false;  // some flush whose text ends with that step's whole line
    for (const std::string& text : buffer.flushed) {
      const size_t at = text.rfind(line);
      flushed |= at != std::string::npos && text.find('\n', at) == text.size() - 1;
    }
    EXPECT_TRUE(flushed) << line << " in\n" << buffer.str();
  }
}

// train.threads only spends more cores: the CPU backend cuts its GEMMs and loops where every
// value keeps the bits of one thread, so a 2- or 3-thread trainer equals the 1-thread
// reference (and so every pipeline layout, whose workers run one thread each).
TEST_F(TrainerTest, TheThreadCountDoesNotChangeTheBits) {
  pp::v1::JobSpec spec = TinySpec();
  spec.mutable_model()->set_d_model(64), spec.mutable_model()->set_n_heads(4);
  spec.mutable_train()->set_microbatch_size(12);  // 192 rows a microbatch: split over threads
  spec.mutable_train()->set_steps(3);
  ASSERT_TRUE(common::ValidateJobSpec(spec).ok()) << common::ValidateJobSpec(spec);
  TrainOptions one;
  one.threads = 1;
  auto a = Train(spec, one);
  ASSERT_TRUE(a.ok()) << a.status();
  for (int threads : {2, 3}) {
    TrainOptions more;
    more.threads = threads;
    auto b = Train(spec, more);
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_EQ(a->losses.size(), b->losses.size());
    EXPECT_EQ(0, std::memcmp(a->losses.data(), b->losses.data(), a->losses.size() * sizeof(double)))
        << threads << " threads: loss " << b->losses.back() << " vs " << a->losses.back();
    for (const auto& [name, v] : a->weights) {
      EXPECT_TRUE(SameBits(v, b->weights.at(name))) << threads << " threads: " << name;
    }
  }
}

// The reference the distributed runtime must match: three stages run by hand (all forwards,
// then the backwards), clipping from merged per-stage sums, give the trainer's bits.
TEST_F(TrainerTest, EqualsAHandRunPipeline) {
  const auto spec = TinySpec();
  auto trained = Train(spec, {});
  ASSERT_TRUE(trained.ok()) << trained.status();

  auto ops = kernels::MakeOps("cpu");
  ASSERT_TRUE(ops.ok());
  auto config = model::ModelConfigFromSpec(spec.model());
  ASSERT_TRUE(config.ok());
  const int M = 2, B = 2, T = 16;
  std::vector<std::unique_ptr<model::StageModel>> stages;
  for (auto [first, last] : {std::pair{0, 1}, std::pair{2, 2}, std::pair{3, 3}}) {
    model::StageOptions o;
    o.first_unit = first, o.last_unit = last, o.microbatch_size = B, o.microbatches = M;
    o.seed = spec.train().seed();
    auto s = model::StageModel::Create(ops->get(), *config, o);
    ASSERT_TRUE(s.ok()) << s.status();
    stages.push_back(std::move(*s));
  }
  auto source = data::TokenSource::Open(spec.data());
  ASSERT_TRUE(source.ok()) << source.status();
  const auto adamw = optim::AdamWConfigFromSpec(spec.train());
  const size_t n = stages[0]->activation_size();
  std::vector<float> a(n), a2(n), g(n), g2(n);
  for (int step = 0; step < 6; ++step) {
    for (auto& s : stages) s->ZeroGrads();
    double loss = 0;
    for (int j = 0; j < M; ++j) {
      auto mb = data::ReadMicrobatch(*source, common::DataPositionAtStep(step, M, B), j, B, T);
      ASSERT_TRUE(mb.ok());
      model::StageInput in;
      in.tokens = mb->inputs.data();
      ASSERT_TRUE(stages[0]->Forward(j, in, a.data()).ok());  // CPU backend memory is host memory
      in = {};
      in.activations = a.data();
      ASSERT_TRUE(stages[1]->Forward(j, in, a2.data()).ok());
      in.activations = a2.data();
      in.targets = mb->targets.data();
      auto l = stages[2]->Forward(j, in, nullptr);
      ASSERT_TRUE(l.ok());
      loss += *l;
    }
    for (int j = 0; j < M; ++j) {
      ASSERT_TRUE(stages[2]->Backward(j, nullptr, g.data()).ok());
      ASSERT_TRUE(stages[1]->Backward(j, g.data(), g2.data()).ok());
      ASSERT_TRUE(stages[0]->Backward(j, g2.data(), nullptr).ok());
    }
    loss /= M;
    EXPECT_EQ(0, std::memcmp(&loss, &trained->losses[step], sizeof(double))) << "step " << step;
    optim::SumSquares sums;
    for (auto& s : stages) {
      ASSERT_TRUE(optim::MergeSumSquares(optim::GradSumSquares(**ops, s->tensors()), sums).ok());
    }
    const float scale = optim::ClipScale(optim::GlobalNorm(sums), adamw.grad_clip);
    for (auto& s : stages) optim::ApplyAdamW(**ops, s->tensors(), adamw, step + 1, scale);
  }
  for (auto& s : stages) {
    for (const auto& [name, v] : s->ValuesToHost()) {
      EXPECT_TRUE(SameBits(v, trained->weights.at(name))) << name;
    }
  }
}

// Evaluation reads its own windows and touches no gradient or moment: the run trains bitwise as
// without it, and evaluates after steps 2, 4 and the last.
TEST_F(TrainerTest, EvalDoesNotChangeTraining) {
  const pp::v1::JobSpec plain = TinySpec();
  pp::v1::JobSpec with_eval = plain;
  with_eval.mutable_eval()->set_every_steps(2);
  with_eval.mutable_eval()->set_batches(3);
  pp::v1::DataSpec* eval_data = with_eval.mutable_eval()->mutable_data();
  eval_data->set_format("generated");
  eval_data->set_generated_tokens(5000);
  eval_data->set_generated_seed(9);
  ASSERT_TRUE(common::ValidateJobSpec(with_eval).ok()) << common::ValidateJobSpec(with_eval);
  auto a = Train(plain, {});
  auto b = Train(with_eval, {});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(a->evals.empty());
  ASSERT_EQ(b->evals.size(), 3u);
  EXPECT_EQ(b->evals[0].step, 2);
  EXPECT_EQ(b->evals[1].step, 4);
  EXPECT_EQ(b->evals[2].step, 6);
  for (const auto& e : b->evals) EXPECT_TRUE(std::isfinite(e.loss) && e.loss > 0);
  EXPECT_LT(b->evals[2].loss, b->evals[0].loss);  // it learns the text-like bytes
  EXPECT_EQ(0, std::memcmp(a->losses.data(), b->losses.data(), a->losses.size() * sizeof(double)));
  for (const auto& [name, v] : a->weights) EXPECT_TRUE(SameBits(v, b->weights.at(name))) << name;
}

// A holdout evaluation: the documented formula by hand on the final weights, the held-out
// windows of the training data (which training never reads).
TEST_F(TrainerTest, HoldoutEvalLossIsTheMeanOverTheHeldOutWindows) {
  pp::v1::JobSpec spec = TinySpec();
  spec.mutable_eval()->set_batches(2);
  spec.mutable_eval()->set_holdout_fraction(0.1);
  ASSERT_TRUE(common::ValidateJobSpec(spec).ok()) << common::ValidateJobSpec(spec);
  std::ostringstream log;
  TrainOptions options;
  options.log = &log;
  auto trained = Train(spec, options);
  ASSERT_TRUE(trained.ok()) << trained.status();
  ASSERT_EQ(trained->evals.size(), 1u);  // every_steps 0: after the last step only
  EXPECT_EQ(trained->evals[0].step, 6);
  EXPECT_NE(log.str().find(absl::StrFormat("eval step 6/6 loss %.6f", trained->evals[0].loss)),
            std::string::npos)
      << log.str();

  auto ops = kernels::MakeOps("cpu");
  auto config = model::ModelConfigFromSpec(spec.model());
  ASSERT_TRUE(ops.ok() && config.ok());
  model::StageOptions o;
  o.last_unit = model::NumUnits(*config) - 1, o.microbatch_size = 2, o.microbatches = 2;
  o.seed = spec.train().seed();
  auto full = model::StageModel::Create(ops->get(), *config, o);
  ASSERT_TRUE(full.ok());
  for (model::ModelTensor& t : (*full)->tensors()) {
    const std::vector<float>& v = trained->weights.at(t.name);
    std::memcpy(t.value, v.data(), v.size() * sizeof(float));  // CPU memory is host memory
  }
  auto source = data::TokenSource::Open(spec.data());
  ASSERT_TRUE(source.ok());
  const data::WindowRange held_out = data::HeldOutWindows(source->size(), 16, 0.1);
  double sum = 0;
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 2; ++j) {
      auto mb = data::ReadMicrobatch(*source, held_out, common::DataPositionAtStep(i, 2, 2), j,
                                     2, 16);
      ASSERT_TRUE(mb.ok());
      model::StageInput in;
      in.tokens = mb->inputs.data();
      in.targets = mb->targets.data();
      auto loss = (*full)->Forward(j, in, nullptr);
      ASSERT_TRUE(loss.ok());
      sum += *loss;
      ASSERT_TRUE((*full)->Backward(j, nullptr, nullptr).ok());  // releases microbatch j
    }
  }
  const double expected = sum / 4;
  EXPECT_EQ(0, std::memcmp(&expected, &trained->evals[0].loss, sizeof(double)))
      << expected << " vs " << trained->evals[0].loss;
}

TEST_F(TrainerTest, WritesALoadableCheckpoint) {
  const auto spec = TinySpec();
  TrainOptions opts;
  opts.checkpoint_root = dir_.string();
  auto result = Train(spec, opts);
  ASSERT_TRUE(result.ok()) << result.status();
  auto steps = common::ListCommittedSteps(dir_.string(), "tiny");
  ASSERT_TRUE(steps.ok()) << steps.status();
  EXPECT_EQ(*steps, std::vector<int>{6});  // every 3 steps, keep 1
  auto ckpt = common::LoadCheckpoint(common::StepDir(dir_.string(), "tiny", 6));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ(ckpt->manifest.step(), 6);
  EXPECT_EQ(ckpt->manifest.data_position(), 6 * 2 * 2);
  EXPECT_EQ(ckpt->manifest.spec().name(), "tiny");
  EXPECT_EQ(ckpt->tensors.size(), 3 * result->weights.size());
  for (const auto& [name, v] : result->weights) {
    ASSERT_TRUE(ckpt->tensors.count(name)) << name;
    EXPECT_TRUE(SameBits(ckpt->tensors.at(name).data, v)) << name;
    EXPECT_TRUE(ckpt->tensors.count(common::ExpAvgSqName(name))) << name;
  }
  EXPECT_EQ(ckpt->tensors.at("h.1.mlp.fc.weight").shape, (std::vector<int64_t>{64, 16}));
}

// The schedule reaches the optimizer with 1-based steps: 2 warm-up steps, then a linear decay to
// min_lr 0 within one step, so steps 3 and 4 apply rate 0 and leave the weights of step 2 as they
// were, bit for bit; the same run without the decay moves them.
TEST_F(TrainerTest, TheLearningRateScheduleSetsEachStepsRate) {
  pp::v1::JobSpec spec = TinySpec();
  spec.clear_checkpoint();
  spec.mutable_train()->set_steps(4);
  spec.mutable_train()->set_warmup_steps(2);
  spec.mutable_train()->set_decay("linear");
  spec.mutable_train()->set_decay_steps(1);
  TrainOptions two_steps;
  two_steps.steps = 2;
  auto after_warmup = Train(spec, two_steps);
  auto decayed = Train(spec, {});
  spec.mutable_train()->set_decay("constant");
  auto constant = Train(spec, {});
  ASSERT_TRUE(after_warmup.ok() && decayed.ok() && constant.ok());
  for (const auto& [name, v] : after_warmup->weights) {
    EXPECT_TRUE(SameBits(v, decayed->weights.at(name))) << name;
    EXPECT_FALSE(SameBits(v, constant->weights.at(name))) << name;
  }
}

// lr 1e30 makes step 1's update finite but huge, and every later step's loss NaN.
pp::v1::JobSpec DivergingSpec(int steps, int max_bad_steps) {
  pp::v1::JobSpec spec = TinySpec();
  spec.mutable_train()->set_lr(1e30);
  spec.mutable_train()->set_steps(steps);
  spec.mutable_train()->set_max_bad_steps(max_bad_steps);
  spec.mutable_checkpoint()->set_every_steps(1);
  spec.mutable_checkpoint()->set_keep(10);
  return spec;
}

TEST_F(TrainerTest, ANonFiniteStepIsNotApplied) {
  auto one = Train(DivergingSpec(1, 1), {});
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->skipped_steps, 0);
  std::ostringstream log;
  TrainOptions opts;
  opts.log = &log;
  auto two = Train(DivergingSpec(2, 1), opts);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(two->skipped_steps, 1);
  ASSERT_EQ(two->losses.size(), 2u);
  EXPECT_TRUE(std::isfinite(two->losses[0]));
  EXPECT_FALSE(std::isfinite(two->losses[1]));
  EXPECT_NE(log.str().find("tok/s (skipped: not finite)\n"), std::string::npos) << log.str();
  // Weights (and so moments) as after step 1, bit for bit.
  for (const auto& [name, v] : one->weights)
    EXPECT_TRUE(SameBits(v, two->weights.at(name))) << name;
}

TEST_F(TrainerTest, MaxBadStepsToleratesThatManyAndFailsAtTheNext) {
  for (int max_bad_steps : {0, 1}) {
    SCOPED_TRACE(max_bad_steps);
    std::filesystem::remove_all(dir_);
    TrainOptions opts;
    opts.checkpoint_root = dir_.string();
    auto result = Train(DivergingSpec(4, max_bad_steps), opts);
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.status().code(), absl::StatusCode::kOutOfRange);
    const int failed_at = 2 + max_bad_steps;
    EXPECT_EQ(
        result.status().message(),
        absl::StrCat("step ", failed_at, ": non-finite loss nan on rank 0; ", max_bad_steps + 1,
                     " bad steps, more than train.max_bad_steps = ", max_bad_steps));
    // Checkpoints up to the step before the failing one; the skipped step's holds step 1's
    // finite weights again.
    auto steps = common::ListCommittedSteps(dir_.string(), "tiny");
    ASSERT_TRUE(steps.ok()) << steps.status();
    std::vector<int> want;  // newest first
    for (int k = failed_at - 1; k >= 1; --k) want.push_back(k);
    EXPECT_EQ(*steps, want);
    EXPECT_FALSE(std::filesystem::exists(common::StepDir(dir_.string(), "tiny", failed_at)));
  }
}

TEST_F(TrainerTest, BadInputsFailCleanly) {
  auto spec = TinySpec();
  TrainOptions opts;
  opts.device = "tpu";
  EXPECT_FALSE(Train(spec, opts).ok());
  spec.mutable_model()->set_n_heads(3);
  auto r = Train(spec, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("n_heads"), std::string::npos);
  EXPECT_EQ(TrainMain((dir_ / "missing.json").string(), {}), 1);
  std::filesystem::create_directories(dir_);
  std::ofstream(dir_ / "bad.json") << R"({"name": "x", "model": {"vocabSize": -1}})";
  EXPECT_EQ(TrainMain((dir_ / "bad.json").string(), {}), 1);
}

}  // namespace
}  // namespace pp::trainer
