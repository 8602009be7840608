// worker/trainer/train_from.h: the trainer started from given weights (ppctl import) keeps them
// exactly at lr 0, learns on from them, and refuses weights that do not fit the spec.
#include "worker/trainer/train_from.h"

#include <filesystem>

#include "common/checkpoint.h"
#include "common/hf_gpt2.h"
#include "common/job_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pp::trainer {
namespace {

pp::v1::JobSpec TinySpec(const std::string& name, double lr) {
  pp::v1::JobSpec spec;
  spec.set_name(name);
  auto* m = spec.mutable_model();
  m->set_vocab_size(256), m->set_seq_len(16), m->set_d_model(16), m->set_n_heads(2);
  m->set_n_layers(2);
  spec.mutable_parallel()->set_pipeline(1);
  spec.mutable_parallel()->set_schedule("1f1b");
  auto* t = spec.mutable_train();
  t->set_steps(8), t->set_microbatches(2), t->set_microbatch_size(2), t->set_lr(lr);
  t->set_weight_decay(0.1), t->set_seed(5);
  spec.mutable_data()->set_format("generated");
  spec.mutable_data()->set_generated_tokens(20000);
  common::ApplyDefaults(&spec);
  return spec;
}

TEST(TrainFrom, KeepsLearnsOnAndRefuses) {
  const std::string root = ::testing::TempDir() + "/train_from_test";
  std::filesystem::remove_all(root);
  TrainOptions o;
  o.checkpoint_root = root;
  ASSERT_TRUE(Train(TinySpec("a", 1e-2), o).ok());
  absl::StatusOr<common::Checkpoint> ckpt = common::LoadCheckpoint(common::StepDir(root, "a", 8));
  ASSERT_TRUE(ckpt.ok());
  // Through the Hugging Face folder, as ppctl export then ppctl import do.
  ASSERT_TRUE(common::WriteHfGpt2(root + "/hf", ckpt->manifest.spec().model(), ckpt->tensors).ok());
  absl::StatusOr<common::HfGpt2Model> hf = common::ReadHfGpt2(root + "/hf");
  ASSERT_TRUE(hf.ok()) << hf.status();
  TrainOptions one;
  one.steps = 1;
  absl::StatusOr<TrainResult> kept = TrainFrom(TinySpec("k", 0.0), one, hf->tensors);
  ASSERT_TRUE(kept.ok()) << kept.status();
  ASSERT_EQ(kept->weights.size(), 2u * 12 + 5);
  for (const auto& [name, values] : kept->weights) {
    EXPECT_EQ(values, ckpt->tensors.at(name).data) << name;  // bitwise: lr 0 changes nothing
  }
  absl::StatusOr<TrainResult> fresh = Train(TinySpec("f", 1e-2), one);
  absl::StatusOr<TrainResult> tuned = TrainFrom(TinySpec("t", 1e-2), one, hf->tensors);
  ASSERT_TRUE(fresh.ok() && tuned.ok());
  EXPECT_LT(tuned->losses[0], fresh->losses[0] - 0.5);  // it starts where `a` left off
  InitialWeights partial = hf->tensors;
  partial.erase("h.1.mlp.fc.bias");
  EXPECT_THAT(std::string(TrainFrom(TinySpec("p", 1e-2), one, partial).status().message()),
              ::testing::HasSubstr("no tensor h.1.mlp.fc.bias of 64 values"));
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace pp::trainer
