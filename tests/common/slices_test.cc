// Sliced checkpoint shards (common/checkpoint.h): tensor-parallel ranks write slices of a named
// tensor under its name, marked in their shard's metadata, and loading assembles the whole tensor
// or refuses slices that leave gaps, overlap or are malformed, naming the tensor.
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pp::common {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// w (4,2) = 0..7 row-major, split by rows as two parts (like qkv): rank r holds, of each half of
// the rows, row r: slice {dim 0, parts 2, offset r, length 1}.
struct Piece {
  ShardSlice slice;
  Tensor tensor;
};

Piece RowSlice(int offset) {
  Piece p{{0, 2, offset, 1, {4, 2}}, {std::string("w"), {2, 2}, {}}};
  for (int part = 0; part < 2; ++part) {
    const int row = part * 2 + offset;
    p.tensor.data.push_back(static_cast<float>(row * 2));
    p.tensor.data.push_back(static_cast<float>(row * 2 + 1));
  }
  return p;
}

class SlicesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() /
            absl::StrCat("slices_test_", ::getpid(), "_",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // One shard per piece (rank r = index), plus a whole tensor "b" in shard 0, committed.
  absl::StatusOr<Checkpoint> WriteAndLoad(const std::vector<Piece>& pieces,
                                          const std::string& bad_slice = "") {
    pp::v1::CheckpointManifest manifest;
    manifest.set_job_id("job");
    manifest.set_step(1);
    for (size_t r = 0; r < pieces.size(); ++r) {
      std::vector<Tensor> tensors = {pieces[r].tensor};
      if (r == 0) tensors.push_back({"b", {2}, {5.0f, 6.0f}});
      const std::string encoded = bad_slice.empty() ? EncodeSlice(pieces[r].slice) : bad_slice;
      absl::StatusOr<pp::v1::CheckpointShard> shard =
          WriteShard(dir_, ShardFileName(static_cast<int>(r)), tensors, {{SliceKey("w"), encoded}});
      if (!shard.ok()) return shard.status();
      *manifest.add_shards() = *shard;
    }
    if (absl::Status s = CommitManifest(dir_, manifest); !s.ok()) return s;
    return LoadCheckpoint(dir_);
  }

  std::string dir_;
};

TEST_F(SlicesTest, AssemblesTheWholeTensor) {
  absl::StatusOr<Checkpoint> loaded = WriteAndLoad({RowSlice(1), RowSlice(0)});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const Tensor& w = loaded->tensors.at("w");
  EXPECT_EQ(w.shape, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(w.data, (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(loaded->tensors.at("b").data, (std::vector<float>{5, 6}));
}

TEST_F(SlicesTest, RefusesGapsAndOverlaps) {
  absl::StatusOr<Checkpoint> gap = WriteAndLoad({RowSlice(0)});
  EXPECT_THAT(std::string(gap.status().message()), HasSubstr("slices of tensor \"w\""));
  fs::remove_all(dir_);
  absl::StatusOr<Checkpoint> overlap = WriteAndLoad({RowSlice(0), RowSlice(0)});
  EXPECT_THAT(std::string(overlap.status().message()), HasSubstr("overlap or leave gaps"));
}

TEST_F(SlicesTest, RefusesMalformedAndMisfittingSlices) {
  absl::StatusOr<Checkpoint> malformed = WriteAndLoad({RowSlice(0), RowSlice(1)}, "0 2 x 1 4 2");
  EXPECT_THAT(std::string(malformed.status().message()), HasSubstr("malformed slice"));
  fs::remove_all(dir_);
  absl::StatusOr<Checkpoint> misfit = WriteAndLoad({RowSlice(0), RowSlice(1)}, "0 2 1 2 4 2");
  EXPECT_THAT(std::string(misfit.status().message()), HasSubstr("does not fit"));
}

}  // namespace
}  // namespace pp::common
