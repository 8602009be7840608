// Streams of several files (llm.c shards, globs) and weighted mixes (worker/data/data.h): a
// stream reads as the concatenation of its files, windows straddling their boundaries; a mix's
// pattern gives every source exactly its weight in each period, as a pure function of s.
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "common/llmc_shard.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/data/data.h"

namespace pp::data {
namespace {

using ::testing::HasSubstr;

// Little-endian uint16 ids.
std::string Uint16(const std::vector<int>& ids) {
  std::string bytes;
  for (int id : ids) {
    bytes.push_back(static_cast<char>(id & 0xff));
    bytes.push_back(static_cast<char>(id >> 8));
  }
  return bytes;
}

class ShardsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/shards_test_" + std::to_string(::getpid());
    std::filesystem::remove_all(dir_);
    ASSERT_TRUE(common::MakeDirs(dir_).ok());
    // Three shards of 37, 5 and 50 ids, written in reverse name order.
    int next = 0;
    for (int n : {37, 5, 50}) {
      std::vector<int> ids;
      for (int i = 0; i < n; ++i) ids.push_back((next++ * 7919) % 50257);
      all_.insert(all_.end(), ids.begin(), ids.end());
      shard_ids_.push_back(ids);
    }
    for (int k = 2; k >= 0; --k) {
      Write(absl::StrCat("part-", k, ".bin"),
            common::LlmcHeader(static_cast<int64_t>(shard_ids_[k].size())) + Uint16(shard_ids_[k]));
    }
    Write("whole.u16", Uint16(all_));
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void Write(const std::string& name, const std::string& bytes) {
    ASSERT_TRUE(common::WriteFileAtomic(absl::StrCat(dir_, "/", name), bytes).ok()) << name;
  }
  pp::v1::DataSpec Glob() const {
    pp::v1::DataSpec spec;
    spec.set_format("llmc");
    spec.set_path(dir_ + "/part-*.bin");
    return spec;
  }

  std::string dir_;
  std::vector<std::vector<int>> shard_ids_;
  std::vector<int> all_;  // the shards' ids, concatenated
};

TEST_F(ShardsTest, AGlobOfShardsReadsAsTheirConcatenationAcrossBoundaries) {
  absl::StatusOr<TokenSource> source = TokenSource::Open(Glob());
  ASSERT_TRUE(source.ok()) << source.status();
  ASSERT_EQ(source->size(), 92);
  // Every range, including those over one or two boundaries (36..37, 41..42), and the whole.
  for (int64_t start = 0; start < 92; start += 3) {
    for (int64_t count : {int64_t{1}, int64_t{8}, 92 - start}) {
      if (start + count > 92) continue;
      std::vector<int32_t> got(static_cast<size_t>(count));
      ASSERT_TRUE(source->Read(start, count, got.data()).ok()) << start << "+" << count;
      EXPECT_EQ(got, std::vector<int32_t>(all_.begin() + start, all_.begin() + start + count))
          << start << "+" << count;
    }
  }
  // The same windows, bit for bit, as one uint16 file of the same ids.
  pp::v1::DataSpec whole;
  whole.set_format("uint16");
  whole.set_path(dir_ + "/whole.u16");
  absl::StatusOr<TokenSource> one = TokenSource::Open(whole);
  ASSERT_TRUE(one.ok()) << one.status();
  for (int64_t position = 0; position < 200; position += 8) {
    absl::StatusOr<Microbatch> a = ReadMicrobatch(*source, position, 1, 4, 16);
    absl::StatusOr<Microbatch> b = ReadMicrobatch(*one, position, 1, 4, 16);
    ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
    EXPECT_EQ(a->inputs, b->inputs);
    EXPECT_EQ(a->targets, b->targets);
  }
}

TEST_F(ShardsTest, AShardThatIsNotOneIsRefusedNamingFieldAndFile) {
  Write("part-1.bin", common::LlmcHeader(6) + Uint16(shard_ids_[1]));  // says 6, holds 5
  const std::string message(TokenSource::Open(Glob(), "eval.data").status().message());
  EXPECT_EQ(message, "eval.data.path: " + dir_ + "/part-1.bin: not an llm.c token shard: the " +
                         "header says 6 tokens (1036 bytes), the file has 1034 bytes (truncated)");
  pp::v1::DataSpec none = Glob();
  none.set_path(dir_ + "/nothing-*.bin");
  EXPECT_EQ(TokenSource::Open(none).status().message(),
            "data.path: " + dir_ + "/nothing-*.bin matches no file");
}

TEST(MixPatternTest, EveryPeriodHoldsEachSourceExactlyItsWeightEvenlySpread) {
  for (const std::vector<int32_t>& weights :
       std::vector<std::vector<int32_t>>{{1}, {1, 1}, {3, 1}, {5, 2, 1}, {1, 7, 7}, {64, 1, 3}}) {
    const MixPattern mix(weights);
    int64_t period = 0;
    for (int32_t w : weights) period += w;
    ASSERT_EQ(mix.period(), period);
    std::vector<int64_t> next(weights.size(), 0);  // each source's s_i in order: 0, 1, 2, ...
    for (int64_t s = 0; s < 5 * period; ++s) {
      const MixPattern::Draw draw = mix.At(s);
      ASSERT_LT(draw.source, static_cast<int>(weights.size()));
      EXPECT_EQ(draw.sequence, next[draw.source]++) << "s " << s;
      if ((s + 1) % period == 0) {
        for (size_t i = 0; i < weights.size(); ++i) {
          EXPECT_EQ(next[i], (s + 1) / period * weights[i]) << "source " << i << ", s " << s;
        }
      }
    }
  }
  // {3, 1}: source 0 at 1/6, 1/2, 5/6 of a period, source 1 at 1/2 (the tie goes to 0).
  const MixPattern three_one({3, 1});
  std::vector<int> order;
  for (int64_t s = 0; s < 4; ++s) order.push_back(three_one.At(s).source);
  EXPECT_EQ(order, (std::vector<int>{0, 0, 1, 0}));
}

TEST(MixPatternTest, ADrawIsAPureFunctionOfTheWeightsAndTheSequence) {
  const std::vector<int32_t> weights = {5, 2, 9};
  const MixPattern a(weights), b(weights);
  // s = q W + r: source(r) and (q w_i + rank(r)), for huge s too.
  for (int64_t s : std::vector<int64_t>{0, 15, 16, int64_t{1} << 40, (int64_t{1} << 55) + 7}) {
    const MixPattern::Draw da = a.At(s), db = b.At(s), dr = a.At(s % 16);
    EXPECT_EQ(da.source, db.source);
    EXPECT_EQ(da.sequence, db.sequence);
    EXPECT_EQ(da.source, dr.source);
    EXPECT_EQ(da.sequence, s / 16 * weights[da.source] + dr.sequence);
  }
}

TEST_F(ShardsTest, AMixReadsEachSourcesOwnWindowsByThePattern) {
  pp::v1::JobSpec spec;
  spec.mutable_model()->set_seq_len(8);
  pp::v1::WeightedData* shards = spec.mutable_data()->add_mix();
  shards->set_weight(2);
  *shards->mutable_data() = Glob();
  pp::v1::WeightedData* text = spec.mutable_data()->add_mix();
  text->set_weight(1);
  text->mutable_data()->set_format("generated");
  text->mutable_data()->set_generated_seed(4);
  text->mutable_data()->set_generated_tokens(300);
  absl::StatusOr<TrainData> data = TrainData::Open(spec);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->windows(), (92 - 8) + (300 - 8));
  const TokenSource corpus = TokenSource::Generated(4, 300);
  const MixPattern mix({2, 1});
  std::map<int, int> drawn;
  for (int64_t s = 0; s < 60; ++s) {
    const MixPattern::Draw draw = mix.At(s);
    ++drawn[draw.source];
    std::vector<int32_t> got(9), want(9);
    ASSERT_TRUE(data->ReadWindow(s, 8, got.data()).ok());
    if (draw.source == 0) {
      const int64_t start = WindowStart(draw.sequence, 92, 8);
      want.assign(all_.begin() + start, all_.begin() + start + 9);
    } else {
      ASSERT_TRUE(corpus.Read(WindowStart(draw.sequence, 300, 8), 9, want.data()).ok());
    }
    EXPECT_EQ(got, want) << "s " << s;
  }
  EXPECT_EQ(drawn[0], 40);
  EXPECT_EQ(drawn[1], 20);
}

TEST_F(ShardsTest, OneStreamTrainsOnTheWindowsItAlwaysHad) {
  pp::v1::JobSpec spec;
  spec.mutable_model()->set_seq_len(8);
  *spec.mutable_data() = Glob();
  spec.mutable_eval()->set_holdout_fraction(0.25);
  absl::StatusOr<TrainData> data = TrainData::Open(spec);
  absl::StatusOr<TokenSource> source = TokenSource::Open(Glob());
  ASSERT_TRUE(data.ok() && source.ok()) << data.status() << source.status();
  const WindowRange range = TrainWindows(92, 8, 0.25);
  EXPECT_EQ(data->windows(), range.count);
  for (int64_t position = 0; position < 100; position += 4) {
    absl::StatusOr<Microbatch> a = ReadMicrobatch(*data, position, 1, 2, 8);
    absl::StatusOr<Microbatch> b = ReadMicrobatch(*source, range, position, 1, 2, 8);
    ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
    EXPECT_EQ(a->inputs, b->inputs);
    EXPECT_EQ(a->targets, b->targets);
  }
  spec.mutable_model()->set_seq_len(92);
  EXPECT_THAT(std::string(TrainData::Open(spec).status().message()),
              HasSubstr("data: holds 92 tokens, need at least seq_len + 1 = 93"));
}

}  // namespace
}  // namespace pp::data
