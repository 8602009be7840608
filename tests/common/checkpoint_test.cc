#include "common/checkpoint.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "common/proto_io.h"
#include "common/sha256.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pp::common {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = ::testing::TempDir() + "/ckpt_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // Two ranks' shards and a manifest for `step`; returns the step folder.
  std::string Save(int step, bool commit = true) {
    std::string dir = StepDir(root_, "job1", step);
    float v = static_cast<float>(step);
    std::vector<Tensor> rank0 = {{"wte.weight", {2, 2}, {v, 1, 2, 3}},
                                 {ExpAvgName("wte.weight"), {2, 2}, {0, 0, 0, v}}};
    std::vector<Tensor> rank1 = {{"lm_head.weight", {2, 2}, {4, 5, 6, v}},
                                 {ExpAvgSqName("lm_head.weight"), {2, 2}, {v, 0, 0, 0}}};
    pp::v1::CheckpointManifest manifest;
    manifest.set_job_id("job1");
    manifest.set_step(step);
    manifest.set_data_position(step * 32);
    manifest.mutable_rng()->set_seed(7);
    manifest.mutable_rng()->set_counter(step);
    manifest.mutable_spec()->set_name("tiny");
    manifest.mutable_layout()->set_pipeline(2);
    manifest.mutable_layout()->add_stage_layers(3);
    manifest.mutable_layout()->add_stage_layers(3);
    int rank = 0;
    for (const auto& tensors : {rank0, rank1}) {
      absl::StatusOr<pp::v1::CheckpointShard> shard =
          WriteShard(dir, ShardFileName(rank), tensors, {{"rank", std::to_string(rank)}});
      EXPECT_TRUE(shard.ok()) << shard.status();
      shard->set_rank(rank++);
      *manifest.add_shards() = *shard;
    }
    if (commit) {
      EXPECT_TRUE(CommitManifest(dir, manifest).ok());
    }
    return dir;
  }

  void FlipByte(const std::string& path, size_t offset) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(offset));
    char c;
    f.get(c);
    f.seekp(static_cast<std::streamoff>(offset));
    f.put(static_cast<char>(c ^ 0x20));
  }

  std::string root_;
};

TEST_F(CheckpointTest, NamesFollowTheLayout) {
  EXPECT_EQ(StepDir("/ck", "j", 20), "/ck/j/step-20");
  EXPECT_EQ(ShardFileName(3), "rank-00003.safetensors");
  EXPECT_EQ(ExpAvgName("h.0.mlp.fc.weight"), "optim.exp_avg.h.0.mlp.fc.weight");
  EXPECT_EQ(ExpAvgSqName("ln_f.bias"), "optim.exp_avg_sq.ln_f.bias");
}

TEST_F(CheckpointTest, ShardReportsBytesAndSha) {
  std::string dir = StepDir(root_, "job1", 1);
  absl::StatusOr<pp::v1::CheckpointShard> shard =
      WriteShard(dir, "a.safetensors", {{"x", {1}, {1.0f}}});
  ASSERT_TRUE(shard.ok()) << shard.status();
  std::string path = dir + "/a.safetensors";
  EXPECT_EQ(shard->bytes(), static_cast<int64_t>(fs::file_size(path)));
  EXPECT_EQ(shard->sha256(), *Sha256File(path));
  EXPECT_THAT(std::string(WriteShard(dir, "../evil.safetensors", {}).status().message()),
              HasSubstr("plain *.safetensors name"));
}

TEST_F(CheckpointTest, AShardWithANonFiniteValueIsNeverWritten) {
  const std::string dir = StepDir(root_, "job1", 2);
  for (float bad : {std::nanf(""), std::numeric_limits<float>::infinity()}) {
    absl::StatusOr<pp::v1::CheckpointShard> shard = WriteShard(
        dir, "a.safetensors", {{"ok", {2}, {1.0f, 2.0f}}, {"w", {3}, {0.5f, bad, 1.0f}}});
    EXPECT_EQ(shard.status().code(), absl::StatusCode::kOutOfRange) << shard.status();
    EXPECT_THAT(std::string(shard.status().message()),
                HasSubstr(absl::StrCat("tensor \"w\" holds a non-finite value ",
                                       std::isnan(bad) ? "nan" : "inf", " at element 1")));
    EXPECT_FALSE(fs::exists(dir)) << "nothing of the step is written";
  }
}

TEST_F(CheckpointTest, RoundTripAcrossShards) {
  Save(10);
  absl::StatusOr<Checkpoint> checkpoint = LoadCheckpoint(StepDir(root_, "job1", 10));
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ(checkpoint->manifest.step(), 10);
  EXPECT_EQ(checkpoint->manifest.data_position(), 320);
  EXPECT_EQ(checkpoint->manifest.rng().counter(), 10u);
  EXPECT_EQ(checkpoint->manifest.format_version(), 1);
  EXPECT_EQ(checkpoint->manifest.spec().name(), "tiny");
  EXPECT_EQ(checkpoint->tensors.size(), 4u);
  EXPECT_EQ(checkpoint->tensors.at("lm_head.weight").data, (std::vector<float>{4, 5, 6, 10}));
  EXPECT_EQ(checkpoint->tensors.at(ExpAvgName("wte.weight")).data,
            (std::vector<float>{0, 0, 0, 10}));
}

// Two TP ranks each hold half of w (4,2)'s rows; the manifest says which half, as the metadata.
TEST_F(CheckpointTest, ManifestListsEachShardsSlicesAndMustAgreeWithTheShards) {
  const std::string dir = StepDir(root_, "job1", 3);
  pp::v1::CheckpointManifest manifest;
  manifest.set_job_id("job1");
  manifest.set_step(3);
  for (int rank = 0; rank < 2; ++rank) {
    const float v = static_cast<float>(rank);
    absl::StatusOr<pp::v1::CheckpointShard> shard =
        WriteShard(dir, ShardFileName(rank), {{"w", {2, 2}, {v, v, v, v}}},
                   {{SliceKey("w"), EncodeSlice({0, 1, 2 * rank, 2, {4, 2}})}});
    ASSERT_TRUE(shard.ok()) << shard.status();
    ASSERT_EQ(shard->slices_size(), 1);
    const pp::v1::TensorSlice& slice = shard->slices(0);
    EXPECT_EQ(slice.tensor(), "w");
    EXPECT_EQ(slice.dim(), 0);
    EXPECT_EQ(slice.parts(), 1);
    EXPECT_EQ(slice.offset(), 2 * rank);
    EXPECT_EQ(slice.length(), 2);
    EXPECT_THAT(slice.full_shape(), ElementsAre(4, 2));
    *manifest.add_shards() = *shard;
  }
  ASSERT_TRUE(CommitManifest(dir, manifest).ok());
  absl::StatusOr<std::string> json = ReadFile(dir + "/" + kManifestFile);
  ASSERT_TRUE(json.ok());
  EXPECT_THAT(*json, HasSubstr("\"slices\""));
  absl::StatusOr<Checkpoint> loaded = LoadCheckpoint(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->tensors.at("w").data, (std::vector<float>{0, 0, 0, 0, 1, 1, 1, 1}));

  // A manifest that says another slice than the shard holds is refused, naming the shard.
  manifest.mutable_shards(1)->mutable_slices(0)->set_offset(0);
  ASSERT_TRUE(CommitManifest(dir, manifest).ok());
  EXPECT_THAT(std::string(LoadCheckpoint(dir).status().message()),
              AllOf(HasSubstr("rank-00001.safetensors"), HasSubstr("slices")));
  manifest.mutable_shards(1)->clear_slices();
  ASSERT_TRUE(CommitManifest(dir, manifest).ok());
  EXPECT_FALSE(LoadCheckpoint(dir).ok());

  // Writing refuses slices that do not fit or name no tensor of the shard.
  EXPECT_THAT(std::string(WriteShard(dir, "x.safetensors", {{"w", {2, 2}, {0, 0, 0, 0}}},
                                     {{SliceKey("w"), EncodeSlice({0, 1, 3, 2, {4, 2}})}})
                              .status()
                              .message()),
              HasSubstr("does not fit"));
  EXPECT_THAT(std::string(WriteShard(dir, "x.safetensors", {{"w", {2, 2}, {0, 0, 0, 0}}},
                                     {{SliceKey("v"), EncodeSlice({0, 1, 0, 2, {4, 2}})}})
                              .status()
                              .message()),
              HasSubstr("not in the shard"));
}

// Reproduced through tests/fuzz/checkpoint_fuzzer: slice metadata whose numbers do not fit an
// int (a dim that wrapped to -1 read before the shape, an offset + length that overflowed, an
// offset of 2^32 read as 0) or whose whole shape is far larger than the slices hold (allocated
// before the coverage check) is DataLoss naming the shard or the tensor, never a crash, an
// out-of-bounds access or a wrong tensor.
TEST_F(CheckpointTest, SliceMetadataThatDoesNotFitIsDataLoss) {
  const std::string dir = StepDir(root_, "job1", 3);
  struct Case {
    std::string slice;  // dim parts offset length full_shape...
    std::string error;
  };
  for (const Case& c : {Case{"4294967295 1 0 2 2 2", "does not fit"},
                        Case{"0 1 2147483647 2 2 2", "does not fit"},
                        Case{"0 1 4294967296 2 2 2", "does not fit"},
                        Case{"0 4294967297 0 2 2 2", "does not fit"},
                        Case{"0 1 0 2 4000000000000 2", "does not fit"},  // whole > int
                        Case{"0 1 0 2 4 2", "overlap or leave gaps"},  // holds 2 of 4 rows
                        Case{"0 1 0 2 2 2 0", "empty or too large whole shape"}}) {
    SCOPED_TRACE(c.slice);
    fs::remove_all(dir);
    ASSERT_TRUE(MakeDirs(dir).ok());
    std::vector<int64_t> numbers;
    for (absl::string_view word : absl::StrSplit(c.slice, ' ')) {
      ASSERT_TRUE(absl::SimpleAtoi(word, &numbers.emplace_back()));
    }
    std::vector<int64_t> held(numbers.begin() + 4, numbers.end());
    held[0] = 2;
    absl::StatusOr<std::string> bytes = SerializeSafetensors(
        {{"w", held, std::vector<float>(*NumElements(held), 1.0f)}}, {{SliceKey("w"), c.slice}});
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    ASSERT_TRUE(WriteFileAtomic(dir + "/" + ShardFileName(0), *bytes).ok());
    pp::v1::CheckpointManifest manifest;
    manifest.set_step(3);
    pp::v1::CheckpointShard* shard = manifest.add_shards();
    shard->set_file(ShardFileName(0));
    shard->set_bytes(static_cast<int64_t>(bytes->size()));
    shard->set_sha256(Sha256Hex(*bytes));
    pp::v1::TensorSlice* slice = shard->add_slices();  // as an int32 proto holds the numbers
    slice->set_tensor("w");
    slice->set_dim(static_cast<int32_t>(numbers[0]));
    slice->set_parts(static_cast<int32_t>(numbers[1]));
    slice->set_offset(static_cast<int32_t>(numbers[2]));
    slice->set_length(static_cast<int32_t>(numbers[3]));
    slice->mutable_full_shape()->Assign(numbers.begin() + 4, numbers.end());
    ASSERT_TRUE(CommitManifest(dir, manifest).ok());
    absl::StatusOr<Checkpoint> loaded = LoadCheckpoint(dir);
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
    // Decoding names the shard; assembling names the tensor.
    EXPECT_THAT(std::string(loaded.status().message()),
                AllOf(HasSubstr(c.error),
                      HasSubstr(c.error == "does not fit" ? ShardFileName(0) : "tensor \"w\"")));
  }
}

TEST_F(CheckpointTest, OnlyCommittedStepsAreListed) {
  EXPECT_THAT(*ListCommittedSteps(root_, "job1"), IsEmpty());
  Save(5);
  Save(20);
  Save(15);
  Save(25, /*commit=*/false);  // shards written, manifest never committed: a torn save
  for (const char* odd : {"step-x", "step-030", "step--1"}) {  // not step-<N>: ignored
    fs::create_directories(root_ + "/job1/" + odd);
    std::ofstream(root_ + "/job1/" + odd + "/manifest.json") << "{}";
  }
  EXPECT_THAT(*ListCommittedSteps(root_, "job1"), ElementsAre(20, 15, 5));
  EXPECT_FALSE(LoadCheckpoint(StepDir(root_, "job1", 25)).ok());
}

TEST_F(CheckpointTest, CommitRefusesMissingOrShortShards) {
  std::string dir = Save(3, /*commit=*/false);
  pp::v1::CheckpointManifest manifest;
  pp::v1::CheckpointShard* shard = manifest.add_shards();
  shard->set_file("rank-00007.safetensors");
  EXPECT_THAT(std::string(CommitManifest(dir, manifest).message()),
              HasSubstr("rank-00007.safetensors"));
  shard->set_file(ShardFileName(0));
  shard->set_bytes(3);
  EXPECT_THAT(std::string(CommitManifest(dir, manifest).message()),
              HasSubstr("the manifest says 3"));
  EXPECT_FALSE(fs::exists(dir + "/manifest.json"));
  EXPECT_THAT(*ListCommittedSteps(root_, "job1"), IsEmpty());
}

TEST_F(CheckpointTest, TamperedShardIsRefusedNamingTheFile) {
  std::string dir = Save(4);
  std::string shard = dir + "/" + ShardFileName(1);
  FlipByte(shard, fs::file_size(shard) - 2);  // a data byte: still a valid safetensors file
  absl::StatusOr<Checkpoint> checkpoint = LoadCheckpoint(dir);
  ASSERT_FALSE(checkpoint.ok());
  EXPECT_THAT(std::string(checkpoint.status().message()), HasSubstr(ShardFileName(1)));
  EXPECT_THAT(std::string(checkpoint.status().message()), HasSubstr("sha256"));
}

// A reader that wants rank 0's tensors reads only rank 0's shard: the manifest lists each shard's
// tensors, so the other shard is neither read nor hashed (damage there does not stop it).
TEST_F(CheckpointTest, AFilteredLoadReadsOnlyTheShardsItNeeds) {
  const std::string dir = Save(6);
  absl::StatusOr<std::string> json = ReadFile(dir + "/" + kManifestFile);
  ASSERT_TRUE(json.ok());
  EXPECT_THAT(*json, HasSubstr("\"optim.exp_avg_sq.lm_head.weight\""));
  const std::string other = dir + "/" + ShardFileName(1);
  FlipByte(other, fs::file_size(other) - 2);
  const TensorFilter rank0 = [](const std::string& name) {
    return name == "wte.weight" || name == ExpAvgName("wte.weight");
  };
  absl::StatusOr<Checkpoint> loaded = LoadCheckpoint(dir, rank0);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->tensors.size(), 2u);
  EXPECT_EQ(loaded->tensors.at("wte.weight").data, (std::vector<float>{6, 1, 2, 3}));
  // Wanting one of its tensors reads (and verifies) the damaged shard.
  EXPECT_THAT(
      std::string(LoadCheckpoint(dir, [](const std::string& name) {
                    return name == "lm_head.weight";
                  }).status().message()),
      HasSubstr("sha256"));
  // A shard that holds other tensors than the manifest lists is refused.
  absl::StatusOr<std::string> text = ReadFile(dir + "/" + kManifestFile);
  ASSERT_TRUE(text.ok());
  pp::v1::CheckpointManifest manifest;
  ASSERT_TRUE(JsonToMessage(*text, &manifest).ok());
  manifest.mutable_shards(0)->set_tensors(0, "wpe.weight");
  ASSERT_TRUE(CommitManifest(dir, manifest).ok());
  EXPECT_THAT(std::string(LoadCheckpoint(dir, rank0).status().message()),
              HasSubstr("the manifest lists"));
}

TEST_F(CheckpointTest, MissingOrTornShardIsRefusedNamingTheFile) {
  std::string dir = Save(4);
  fs::resize_file(dir + "/" + ShardFileName(0), 10);
  EXPECT_THAT(std::string(LoadCheckpoint(dir).status().message()), HasSubstr(ShardFileName(0)));
  fs::remove(dir + "/" + ShardFileName(0));
  EXPECT_THAT(std::string(LoadCheckpoint(dir).status().message()),
              HasSubstr(ShardFileName(0) + " is missing"));
}

TEST_F(CheckpointTest, BadManifestIsRefused) {
  std::string dir = Save(4);
  std::string other = Save(5);
  fs::copy_file(other + "/manifest.json", dir + "/manifest.json",
                fs::copy_options::overwrite_existing);
  EXPECT_THAT(std::string(LoadCheckpoint(dir).status().message()),
              HasSubstr("step-4/manifest.json: manifest is for step 5, not 4"));
  ASSERT_TRUE(WriteFileAtomic(dir + "/manifest.json", "{\"step\": ").ok());
  EXPECT_THAT(std::string(LoadCheckpoint(dir).status().message()),
              HasSubstr("manifest.json: bad manifest"));
}

TEST_F(CheckpointTest, AManifestOverTheCapIsRefusedBeforeItIsRead) {
  std::string dir = Save(4);
  fs::resize_file(dir + "/manifest.json", kMaxManifestBytes + 1);  // sparse: no 64 MiB written
  absl::Status status = LoadCheckpoint(dir).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("manifest.json: 67108865 bytes exceeds the limit of 67108864 bytes"));
}

TEST_F(CheckpointTest, LatestFallsBackToAnOlderGoodCheckpoint) {
  Save(10);
  std::string newest = Save(20);
  std::string shard = newest + "/" + ShardFileName(0);
  FlipByte(shard, fs::file_size(shard) - 1);
  absl::StatusOr<LatestManifest> latest = LatestVerifiedCheckpoint(root_, "job1");
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->manifest.step(), 10);
  ASSERT_EQ(latest->skipped.size(), 1u);
  EXPECT_THAT(latest->skipped[0], HasSubstr("step-20/" + ShardFileName(0)));

  EXPECT_EQ(LatestVerifiedCheckpoint(root_, "job1", 15)->manifest.step(), 10);
  EXPECT_EQ(LatestVerifiedCheckpoint(root_, "job1", 9).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(LatestVerifiedCheckpoint(root_, "other").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(CheckpointTest, PruneKeepsTheNewestCommitted) {
  for (int step : {1, 2, 3, 4, 5}) Save(step);
  Save(0, /*commit=*/false);  // old and torn: removed
  Save(6, /*commit=*/false);  // newer than every kept one: maybe in progress, left alone
  ASSERT_TRUE(PruneCheckpoints(root_, "job1", 3).ok());
  EXPECT_THAT(*ListCommittedSteps(root_, "job1"), ElementsAre(5, 4, 3));
  EXPECT_FALSE(fs::exists(StepDir(root_, "job1", 0)));
  EXPECT_FALSE(fs::exists(StepDir(root_, "job1", 2)));
  EXPECT_TRUE(fs::exists(StepDir(root_, "job1", 6)));
  ASSERT_TRUE(PruneCheckpoints(root_, "job1", 5).ok());  // fewer than keep: nothing goes
  EXPECT_THAT(*ListCommittedSteps(root_, "job1"), ElementsAre(5, 4, 3));
  EXPECT_FALSE(PruneCheckpoints(root_, "job1", 0).ok());
}

}  // namespace
}  // namespace pp::common
