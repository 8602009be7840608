// The memory model against figures worked out by hand for a tiny GPT: vocab 16, T = 4, C = 8,
// 2 heads, 2 blocks, B = 1, so N = 4 tokens and (N,C) = 128 bytes.
#include <cstdint>
#include <vector>

#include "coordinator/plan/plan.h"
#include "gtest/gtest.h"

namespace pp::plan {
namespace {

pp::v1::JobSpec TinySpec(int pipeline, int microbatches) {
  pp::v1::JobSpec spec;
  pp::v1::ModelSpec* m = spec.mutable_model();
  m->set_vocab_size(16);
  m->set_seq_len(4);
  m->set_d_model(8);
  m->set_n_heads(2);
  m->set_n_layers(2);
  spec.mutable_parallel()->set_pipeline(pipeline);
  spec.mutable_parallel()->set_chunks(1);
  spec.mutable_parallel()->set_schedule("1f1b");
  spec.mutable_train()->set_steps(1);
  spec.mutable_train()->set_microbatches(microbatches);
  spec.mutable_train()->set_microbatch_size(1);
  return spec;
}

std::vector<RankMemory> Estimate(const pp::v1::JobSpec& spec, const std::vector<int>& units) {
  const pp::v1::ParallelSpec& p = spec.parallel();
  absl::StatusOr<pp::v1::Schedule> schedule = PlanSchedule(
      p.schedule(), p.pipeline(), p.chunks(), spec.train().microbatches(), pp::v1::CostModel());
  EXPECT_TRUE(schedule.ok()) << schedule.status();
  absl::StatusOr<std::vector<RankMemory>> memory = EstimateMemory(spec, units, *schedule);
  EXPECT_TRUE(memory.ok()) << memory.status();
  return memory.ok() ? *memory : std::vector<RankMemory>{};
}

// Parameters: embedding 16*8 + 4*8 = 160, a block 12*8*8 + 13*8 = 872, the head 2*8 + 16*8 = 144.
// Rank 0 holds the embedding and block 0 (1032), rank 1 block 1 and the head (1016).
TEST(MemoryTest, TwoStagesOneFOneBByHand) {
  const std::vector<RankMemory> ranks = Estimate(TinySpec(2, 2), {2, 2});
  ASSERT_EQ(ranks.size(), 2u);
  const MemoryBreakdown& r0 = ranks[0].bytes;
  EXPECT_EQ(r0.parameters, 1032 * 4);
  EXPECT_EQ(r0.gradients, 1032 * 4);
  EXPECT_EQ(r0.optimizer, 1032 * 8);
  // tmp (N,C) 128 + (N,4C) 512.
  EXPECT_EQ(r0.scratch, 640);
  // A block's forward keeps 3 (N,C) + 4 (N) + 12 (N,C) + attention stats (1,2,4,2) = 2048
  // bytes; stage 0 adds its tokens (16) and the embedding output (128): 2192 per microbatch. The
  // input-gradient peaks 1536 above that (grad_out copy, dx, dfch, dln2, dres2, dqkv, dln1).
  // 1F1B on rank 0 runs F0 F1 B0 B1: the peak is in B0 with two forwards saved, 2 x 2192 + 1536.
  EXPECT_EQ(r0.activations, 2 * 2192 + 1536);
  // Two gradient receives posted at the step's start, two sent activations kept to its end.
  EXPECT_EQ(r0.communication, 4 * 128);
  // The shard: values and two moments (12 bytes a parameter), as host tensors and serialized.
  EXPECT_EQ(r0.checkpoint, 24 * 1032);
  EXPECT_EQ(r0.baseline, kProcessBaselineBytes);
  // The last step's checkpoint comes when no activation is live: the larger of the two counts.
  EXPECT_EQ(r0.total, kProcessBaselineBytes + 16 * 1032 + 640 + 24 * 1032);

  const MemoryBreakdown& r1 = ranks[1].bytes;
  EXPECT_EQ(r1.parameters, 1016 * 4);
  EXPECT_EQ(r1.scratch, 640 + 256 + 16);  // and logits (N,16), losses (N)
  // Forward: input copy 128, block output 128, block 2048, head (targets, ln_f, mean, rstd,
  // softmax) 432 = 2736; the input-gradient peaks 1536 above it. F0 B0 F1 B1: one at a time.
  EXPECT_EQ(r1.activations, 2736 + 1536);
  // At B0's peak: mb 1's received activation and B0's grad_in.
  EXPECT_EQ(r1.communication, 2 * 128);
  EXPECT_EQ(r1.total, kProcessBaselineBytes + 16 * 1016 + 912 + 24 * 1016);
}

// bf16 adds the backend's two operand buffers, each at the largest product's need, and each held
// weight's converted copy. A block's products (IC -> OC) are qkv 8 -> 24, proj 8 -> 8, fc 8 ->
// 32, mlp.proj 32 -> 8: buffer 0 holds (N, max(IC,OC)), at most 4 x 32 floats; buffer 1 the
// (N, IC) input, at most 4 x 32 (mlp.proj's). The copies: a block's 768 weight elements, 3072
// bytes; the head's (16,8), 512 bytes. Rank 0 (a block): 512 + 512 + 3072; rank 1 (a block and
// the head) 512 more.
TEST(MemoryTest, Bf16CountsTheOperandBuffersOncePerRankAndEachWeightsCopy) {
  pp::v1::JobSpec spec = TinySpec(2, 2);
  const std::vector<RankMemory> fp32 = Estimate(spec, {2, 2});
  spec.mutable_train()->set_precision("bf16");
  const std::vector<RankMemory> bf16 = Estimate(spec, {2, 2});
  ASSERT_EQ(fp32.size(), 2u);
  ASSERT_EQ(bf16.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    const int64_t added = 512 + 512 + 3072 + (r == 1 ? 512 : 0);
    EXPECT_EQ(bf16[r].bytes.scratch, fp32[r].bytes.scratch + added) << r;
    EXPECT_EQ(bf16[r].bytes.total, fp32[r].bytes.total + added) << r;
    EXPECT_EQ(bf16[r].bytes.activations, fp32[r].bytes.activations) << r;
  }
  // One rank holding both stages keeps one pair of buffers, not one per stage, and every copy.
  spec.mutable_parallel()->set_pipeline(1);
  const std::vector<RankMemory> whole = Estimate(spec, {4});
  spec.mutable_train()->set_precision("fp32");
  const std::vector<RankMemory> whole_fp32 = Estimate(spec, {4});
  ASSERT_EQ(whole.size(), 1u);
  ASSERT_EQ(whole_fp32.size(), 1u);
  EXPECT_EQ(whole[0].bytes.scratch, whole_fp32[0].bytes.scratch + 512 + 512 + 2 * 3072 + 512);
}

// At C = 256 the MLP projection's IC is 4C = 1024: its B operands (the (256,1024) weight, the
// (4,1024) input) have rows 4 KiB apart, which the backend copies to rows of 1040 floats in fp32
// too. Scratch: (N,C) 4096 + (N,4C) 16384 + logits 256 + losses 16, then that copy, (256,1040)
// floats. bf16 instead: buffer 0 (N, 1024) floats, buffer 1 (N, 1040), and the weights' copies:
// a block's qkv 768 x 256, proj 256 x 256, fc 1024 x 256 and mlp.proj 256 x (1024 + 1040) (both
// layouts) floats, twice, and the head's 16 x 256.
TEST(MemoryTest, RowsFourKibApartCountTheirPaddedCopyInBothPrecisions) {
  pp::v1::JobSpec spec = TinySpec(1, 1);
  spec.mutable_model()->set_d_model(256);
  const std::vector<RankMemory> fp32 = Estimate(spec, {4});
  ASSERT_EQ(fp32.size(), 1u);
  const int64_t rest = 4096 + 16384 + 256 + 16;
  EXPECT_EQ(fp32[0].bytes.scratch, rest + 256 * 1040 * 4);
  spec.mutable_train()->set_precision("bf16");
  const std::vector<RankMemory> bf16 = Estimate(spec, {4});
  ASSERT_EQ(bf16.size(), 1u);
  const int64_t block_copies = (768 * 256 + 256 * 256 + 1024 * 256 + 256 * (1024 + 1040)) * 4;
  EXPECT_EQ(bf16[0].bytes.scratch,
            rest + 4 * 1024 * 4 + 4 * 1040 * 4 + 2 * block_copies + 16 * 256 * 4);
}

TEST(MemoryTest, ACheckpointBeforeTheLastStepAddsToTheStepPeak) {
  pp::v1::JobSpec spec = TinySpec(2, 2);
  spec.mutable_train()->set_steps(4);
  spec.mutable_checkpoint()->set_every_steps(2);
  const std::vector<RankMemory> ranks = Estimate(spec, {2, 2});
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_EQ(ranks[0].bytes.total,
            kProcessBaselineBytes + 16 * 1032 + 640 + (2 * 2192 + 1536 + 4 * 128) + 24 * 1032);
  // checkpoint.autoEverySteps: ppcoord may pick any interval, so a checkpoint mid-run counts even
  // when every_steps says only at the end.
  spec.mutable_checkpoint()->set_every_steps(0);
  const int64_t at_the_end = Estimate(spec, {2, 2})[0].bytes.total;
  spec.mutable_checkpoint()->set_auto_every_steps(true);
  EXPECT_EQ(Estimate(spec, {2, 2})[0].bytes.total, ranks[0].bytes.total);
  EXPECT_LT(at_the_end, ranks[0].bytes.total);
}

TEST(MemoryTest, GPipeHoldsEveryMicrobatchAndDataParallelAddsBuckets) {
  pp::v1::JobSpec spec = TinySpec(1, 3);
  spec.mutable_parallel()->set_schedule("gpipe");
  spec.mutable_parallel()->set_data(2);
  const std::vector<RankMemory> ranks = Estimate(spec, {4});
  ASSERT_EQ(ranks.size(), 2u);
  // One stage with every unit: forward = tokens 16 + 3 block inputs and the head's 384 +
  // 2 x 2048 + head 432 = 4928. The input-gradient: head gradient 128, dlogits 256, dlnf 128
  // (softmax freed: 256 left); per block dx 128 and 1280 more before 960 are freed: block 1
  // reaches 256 + 1408 = 1664 and leaves 704, block 0 reaches 704 + 1408 = 2112.
  // GPipe runs F0 F1 F2, then B0 at 3 x 4928 + 2112.
  EXPECT_EQ(ranks[0].bytes.activations, 3 * 4928 + 2112);
  // No pipeline boundary; gradients (2048 params, 8192 bytes) fit one bucket: flat + all-reduce.
  EXPECT_EQ(ranks[0].bytes.parameters, 2048 * 4);
  EXPECT_EQ(ranks[0].bytes.communication, 2 * 2048 * 4);
  // Replica 0 writes the shard (24 bytes a parameter); then every replica digests its state:
  // values and moments copied, and appended to one string whose last doubling holds the old and
  // the new buffer: 36 bytes a parameter, the larger.
  EXPECT_EQ(ranks[0].bytes.checkpoint, 36 * 2048);
  EXPECT_EQ(ranks[1].bytes.checkpoint, 36 * 2048);
  EXPECT_EQ(ranks[1].dp, 1);
}

TEST(MemoryTest, TensorParallelRanksHoldTheirShare) {
  pp::v1::JobSpec spec = TinySpec(1, 1);
  spec.mutable_parallel()->set_tensor(2);
  const std::vector<RankMemory> ranks = Estimate(spec, {4});
  ASSERT_EQ(ranks.size(), 2u);
  // A block with Cl = 4: 12*8*4 + 7*4 + 6*8 = 460; the embedding and head are whole (160, 144).
  EXPECT_EQ(ranks[0].bytes.parameters, (160 + 2 * 460 + 144) * 4);
  EXPECT_EQ(ranks[1].bytes.parameters, ranks[0].bytes.parameters);
  // TP rank 1 writes only its slices: qkv, attn.proj, fc and mlp.proj weights and their biases
  // (96+12 + 32 + 128+16 + 128 = 412 per block).
  EXPECT_EQ(ranks[1].bytes.checkpoint, 24 * 2 * 412);
  EXPECT_EQ(ranks[0].bytes.checkpoint, 24 * (160 + 2 * 460 + 144));
}

// GPT-2 small with its vocabulary padded to 50304 (model.real_vocab_size 50257): the tables are
// counted at their padded size, 50304 x 768 floats each for wte (rank 0) and lm_head (rank 3).
TEST(MemoryTest, Gpt2SmallWithAPaddedVocabularyFits) {
  pp::v1::JobSpec spec = TinySpec(4, 8);
  pp::v1::ModelSpec* m = spec.mutable_model();
  m->set_vocab_size(50304), m->set_real_vocab_size(50257), m->set_seq_len(1024);
  m->set_d_model(768), m->set_n_heads(12), m->set_n_layers(12);
  spec.mutable_train()->set_microbatch_size(4);
  const std::vector<RankMemory> ranks = Estimate(spec, {4, 3, 3, 4});
  ASSERT_EQ(ranks.size(), 4u);
  const int64_t table = int64_t{50304} * 768 * 4, block = (12 * 768 * 768 + 13 * 768) * 4;
  EXPECT_EQ(ranks[0].bytes.parameters, table + 1024 * 768 * 4 + 3 * block);
  EXPECT_EQ(ranks[3].bytes.parameters, 3 * block + 2 * 768 * 4 + table);
  for (const RankMemory& r : ranks) EXPECT_LT(r.bytes.total, int64_t{64} << 30) << r.rank;
}

TEST(MemoryTest, StagesThatDisagreeWithTheScheduleAreRefused) {
  pp::v1::JobSpec spec = TinySpec(2, 2);
  absl::StatusOr<pp::v1::Schedule> schedule = PlanSchedule("1f1b", 2, 1, 2, pp::v1::CostModel());
  ASSERT_TRUE(schedule.ok());
  EXPECT_EQ(EstimateMemory(spec, {4}, *schedule).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(MemoryTest, FormatBytes) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(int64_t{3} << 19), "1.50 MiB");
  EXPECT_EQ(FormatBytes(int64_t{640} << 10), "640 KiB");
  EXPECT_EQ(FormatBytes(int64_t{12} << 30), "12.0 GiB");
}

}  // namespace
}  // namespace pp::plan
