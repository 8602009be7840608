#include "worker/data/data.h"

#include <unistd.h>

#include <filesystem>
#include <numeric>
#include <cmath>
#include <set>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "common/step_math.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pp::data {
namespace {

using ::testing::HasSubstr;

int32_t At(const TokenSource& source, int64_t i) {
  int32_t token = -1;
  EXPECT_TRUE(source.Read(i, 1, &token).ok());
  return token;
}

pp::v1::DataSpec FileSpec(const std::string& path, const std::string& format) {
  pp::v1::DataSpec spec;
  spec.set_path(path);
  spec.set_format(format);
  return spec;
}

TEST(DataTest, StrideIsCoprimeAndNearTheGoldenRatio) {
  for (int64_t n : {2, 3, 65, 66, 1000, 1115394, 1 << 20}) {
    for (int64_t t : {1, 8, 64}) {
      if (n < t + 1) continue;
      int64_t w = n - t;
      int64_t p = WindowStride(n, t);
      EXPECT_EQ(std::gcd(p, w), 1) << n << " " << t;
      EXPECT_GE(p, std::max<int64_t>(1, w * 40503 / 65536));
      EXPECT_LT(p, std::max<int64_t>(2, w * 40503 / 65536 + 64));
    }
  }
}

TEST(DataTest, WindowsFollowTheDocumentedFormula) {
  // N = 1000 tokens, T = 10: W = 990 starts, floor(990 * 40503 / 65536) = 611 and gcd(611, 990)
  // = 1.
  EXPECT_EQ(WindowStride(1000, 10), 611);
  EXPECT_EQ(WindowStart(0, 1000, 10), 0);
  EXPECT_EQ(WindowStart(1, 1000, 10), 611);
  EXPECT_EQ(WindowStart(2, 1000, 10), 1222 % 990);
  // Huge sequence numbers do not overflow: (s * P) mod W in exact arithmetic.
  int64_t s = int64_t{1} << 62;
  EXPECT_EQ(WindowStart(s, 1000, 10),
            static_cast<int64_t>(static_cast<unsigned __int128>(s) * 611 % 990));
  // Every start once per W sequences.
  std::set<int64_t> starts;
  for (int64_t i = 0; i < 990; ++i) starts.insert(WindowStart(i, 1000, 10));
  EXPECT_EQ(starts.size(), 990u);
  EXPECT_EQ(*starts.rbegin(), 989);
}

// The held-out split (common::SplitWindows): training reads only [0, W - H - T), evaluation only
// [W - H, W); no token of any trained window lies in any evaluated window, and each range is
// used whole.
TEST(DataTest, NoHeldOutWindowIsEverTrained) {
  for (auto [n, t, f] : {std::tuple<int64_t, int64_t, double>{1000, 10, 0.1},
                         {35000, 64, 0.1},
                         {5000, 32, 0.5},
                         {200, 8, 0.25}}) {
    SCOPED_TRACE(absl::StrCat("n=", n, " t=", t, " f=", f));
    const WindowRange train = TrainWindows(n, t, f);
    const WindowRange eval = HeldOutWindows(n, t, f);
    const int64_t starts = n - t;
    const int64_t held = static_cast<int64_t>(std::floor(starts * f));
    EXPECT_EQ(eval.count, held);
    EXPECT_EQ(eval.first, starts - held);
    EXPECT_EQ(train.count, starts - held - t);
    std::set<int64_t> trained, evaluated;
    for (int64_t s = 0; s < 3 * train.count; ++s) trained.insert(WindowStart(s, train));
    for (int64_t e = 0; e < 3 * eval.count; ++e) evaluated.insert(WindowStart(e, eval));
    EXPECT_EQ(static_cast<int64_t>(trained.size()), train.count);
    EXPECT_EQ(static_cast<int64_t>(evaluated.size()), eval.count);
    // A window at start a reads tokens [a, a + t].
    EXPECT_LT(*trained.rbegin() + t, *evaluated.begin());
    EXPECT_EQ(*evaluated.rbegin(), starts - 1);
  }
  // No holdout: training reads every start, exactly as before.
  EXPECT_EQ(TrainWindows(1000, 10, 0).count, 990);
  for (int64_t s = 0; s < 50; ++s) {
    EXPECT_EQ(WindowStart(s, TrainWindows(1000, 10, 0)), WindowStart(s, 1000, 10));
  }
}

TEST(DataTest, MicrobatchesOfARangeReadOnlyItsWindows) {
  TokenSource source = TokenSource::Generated(3, 4000);
  const WindowRange eval = HeldOutWindows(source.size(), 16, 0.1);
  absl::StatusOr<Microbatch> mb = ReadMicrobatch(source, eval, 0, 1, 4, 16);
  ASSERT_TRUE(mb.ok()) << mb.status();
  std::vector<int32_t> window(17);
  for (int64_t row = 0; row < 4; ++row) {
    const int64_t start = WindowStart(4 + row, eval);
    EXPECT_GE(start, eval.first);
    ASSERT_TRUE(source.Read(start, 17, window.data()).ok());
    EXPECT_EQ(std::vector<int32_t>(mb->inputs.begin() + row * 16, mb->inputs.begin() + row * 16 + 16),
              std::vector<int32_t>(window.begin(), window.end() - 1));
  }
  EXPECT_FALSE(ReadMicrobatch(source, WindowRange{0, 0}, 0, 0, 1, 16).ok());
  EXPECT_FALSE(ReadMicrobatch(source, WindowRange{3980, 10}, 0, 0, 1, 16).ok());
}

TEST(DataTest, MicrobatchReadsTheWindowsOfItsSequences) {
  TokenSource source = TokenSource::Generated(3, 5000);
  const int64_t m = 4, b = 3, t = 16;
  for (int64_t step : {0, 1, 7}) {
    for (int64_t j = 0; j < m; ++j) {
      absl::StatusOr<Microbatch> mb =
          ReadMicrobatch(source, common::DataPositionAtStep(step, m, b), j, b, t);
      ASSERT_TRUE(mb.ok()) << mb.status();
      ASSERT_EQ(mb->inputs.size(), static_cast<size_t>(b * t));
      for (int64_t row = 0; row < b; ++row) {
        int64_t start = WindowStart((step * m + j) * b + row, source.size(), t);
        for (int64_t i = 0; i < t; ++i) {
          EXPECT_EQ(mb->inputs[row * t + i], At(source, start + i));
          EXPECT_EQ(mb->targets[row * t + i], At(source, start + i + 1));
        }
      }
    }
  }
}

TEST(DataTest, ResumingFromAPositionReadsTheSameTokens) {
  TokenSource source = TokenSource::Generated(5, 3000);
  // Step 5, microbatch 2 of a run with M=4, B=2 read directly, and via a saved position.
  absl::StatusOr<Microbatch> straight =
      ReadMicrobatch(source, common::DataPositionAtStep(5, 4, 2), 2, 2, 32);
  int64_t saved_position = common::DataPositionAtStep(3, 4, 2) + 2 * 4 * 2;  // saved at step 3, +2 steps
  absl::StatusOr<Microbatch> resumed = ReadMicrobatch(source, saved_position, 2, 2, 32);
  ASSERT_TRUE(straight.ok() && resumed.ok());
  EXPECT_EQ(straight->inputs, resumed->inputs);
  EXPECT_EQ(straight->targets, resumed->targets);
}

TEST(DataTest, GeneratedCorpusIsDeterministicAndTextLike) {
  std::string a = GenerateCorpus(42, 20000);
  EXPECT_EQ(a.size(), 20000u);
  EXPECT_EQ(a, GenerateCorpus(42, 20000));
  EXPECT_EQ(GenerateCorpus(42, 100), a.substr(0, 100));
  EXPECT_NE(a, GenerateCorpus(43, 20000));
  int letters = 0, spaces = 0;
  for (unsigned char c : a) {
    EXPECT_TRUE(c == ' ' || c == '\n' || c == '.' || c == ',' || std::isalpha(c)) << int(c);
    letters += std::isalpha(c) != 0;
    spaces += c == ' ';
  }
  EXPECT_GT(letters, 14000);
  EXPECT_GT(spaces, 2000);
  EXPECT_THAT(a, HasSubstr(".\n"));
  EXPECT_TRUE(GenerateCorpus(1, 0).empty());

  pp::v1::DataSpec spec;
  spec.set_format("generated");
  spec.set_generated_seed(42);
  spec.set_generated_tokens(20000);
  absl::StatusOr<TokenSource> source = TokenSource::Open(spec);
  ASSERT_TRUE(source.ok());
  TokenSource moved = *std::move(source);  // the generated bytes survive a move
  ASSERT_EQ(moved.size(), 20000);
  for (int64_t i = 0; i < moved.size(); i += 997) EXPECT_EQ(At(moved, i), (unsigned char)a[i]);
}

TEST(DataTest, ByteAndUint16Files) {
  std::string dir = ::testing::TempDir() + "/data_test_" + std::to_string(::getpid());
  ASSERT_TRUE(pp::common::MakeDirs(dir).ok());
  std::string bytes = std::string("\x00\x01\xff\x80", 4) + "hello";
  ASSERT_TRUE(pp::common::WriteFileAtomic(dir + "/b.bin", bytes).ok());
  absl::StatusOr<TokenSource> b = TokenSource::Open(FileSpec(dir + "/b.bin", "bytes"));
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(b->size(), 9);
  EXPECT_EQ(At(*b, 0), 0);
  EXPECT_EQ(At(*b, 2), 255);
  EXPECT_EQ(At(*b, 3), 128);
  EXPECT_EQ(At(*b, 4), 'h');

  absl::StatusOr<TokenSource> u = TokenSource::Open(FileSpec(dir + "/b.bin", "uint16"));
  EXPECT_THAT(std::string(u.status().message()), HasSubstr("odd size (9 bytes)"));
  ASSERT_TRUE(pp::common::WriteFileAtomic(dir + "/u.bin", bytes.substr(0, 4) + "\x34\x12").ok());
  u = TokenSource::Open(FileSpec(dir + "/u.bin", "uint16"));
  ASSERT_TRUE(u.ok()) << u.status();
  ASSERT_EQ(u->size(), 3);
  EXPECT_EQ(At(*u, 0), 0x0100);  // little-endian
  EXPECT_EQ(At(*u, 1), 0x80ff);
  EXPECT_EQ(At(*u, 2), 0x1234);

  // N = 3, T = 1: W = 2, P = 1. Position 5, microbatch 1, B = 2: sequences 7 and 8 start at 1, 0.
  absl::StatusOr<Microbatch> mb = ReadMicrobatch(*u, 5, 1, 2, 1);
  ASSERT_TRUE(mb.ok()) << mb.status();
  EXPECT_EQ(mb->inputs, (std::vector<int32_t>{0x80ff, 0x0100}));
  EXPECT_EQ(mb->targets, (std::vector<int32_t>{0x1234, 0x80ff}));
  EXPECT_FALSE(ReadMicrobatch(*u, 0, 0, 1, 3).ok());  // 3 tokens < T+1 = 4

  EXPECT_THAT(
      std::string(TokenSource::Open(FileSpec(dir + "/none.bin", "bytes")).status().message()),
      HasSubstr("none.bin"));
  EXPECT_THAT(std::string(TokenSource::Open(FileSpec(dir + "/b.bin", "utf8")).status().message()),
              HasSubstr("data.format: unknown value \"utf8\""));
}

TEST(DataTest, AFileTruncatedAfterOpenFailsTheReadNamingTheFile) {
  std::string dir = ::testing::TempDir() + "/data_trunc_" + std::to_string(::getpid());
  ASSERT_TRUE(pp::common::MakeDirs(dir).ok());
  std::string path = dir + "/t.bin";
  ASSERT_TRUE(pp::common::WriteFileAtomic(path, pp::data::GenerateCorpus(9, 1 << 16)).ok());
  absl::StatusOr<TokenSource> source = TokenSource::Open(FileSpec(path, "bytes"));
  ASSERT_TRUE(source.ok()) << source.status();
  ASSERT_TRUE(ReadMicrobatch(*source, 0, 0, 4, 64).ok());
  // Shrinks below the page holding the windows: a mapped reader would take a SIGBUS here.
  std::filesystem::resize_file(path, 16);
  absl::StatusOr<Microbatch> mb = ReadMicrobatch(*source, 0, 0, 4, 64);
  EXPECT_EQ(mb.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(mb.status().message()), HasSubstr(path + ": file ended at byte"));
  std::filesystem::remove_all(dir);
}

TEST(DataTest, RefusesBadArguments) {
  TokenSource source = TokenSource::Generated(1, 100);
  EXPECT_THAT(std::string(ReadMicrobatch(source, 0, 0, 0, 8).status().message()),
              HasSubstr("batch 0"));
  EXPECT_THAT(std::string(ReadMicrobatch(source, 0, 0, 1, 100).status().message()),
              HasSubstr("data holds 100 tokens, need at least seq_len + 1 = 101"));
}

}  // namespace
}  // namespace pp::data
