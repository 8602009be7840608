// CheckUnderRoots: a path inside a root after symlinks and ".." are resolved, and nothing else.
#include "common/path_roots.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pp::common {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class PathRootsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::temp_directory_path() / ("pp_path_roots_" + std::to_string(getpid()));
    fs::remove_all(base_);
    fs::create_directories(base_ / "data" / "sub");
    fs::create_directories(base_ / "data2");
    std::ofstream(base_ / "data" / "sub" / "corpus.txt") << "x";
    std::ofstream(base_ / "data2" / "secret.txt") << "y";
  }
  void TearDown() override { fs::remove_all(base_); }

  absl::Status Check(const fs::path& path) const {
    return CheckUnderRoots("data.path", path.string(), {(base_ / "data").string()}, "data_root");
  }

  fs::path base_;
};

TEST_F(PathRootsTest, NoRootsAllowsEverything) {
  EXPECT_TRUE(CheckUnderRoots("data.path", "/etc/passwd", {}, "data_root").ok());
}

TEST_F(PathRootsTest, FilesBelowARootAndNotYetMadeOnesAreInside) {
  EXPECT_TRUE(Check(base_ / "data" / "sub" / "corpus.txt").ok());
  EXPECT_TRUE(Check(base_ / "data").ok());
  EXPECT_TRUE(Check(base_ / "data" / "new" / "step-5").ok());
  EXPECT_TRUE(Check(base_ / "data" / "sub" / ".." / "sub" / "corpus.txt").ok());
}

TEST_F(PathRootsTest, DotDotSiblingsWithAPrefixAndSymlinksOutAreOutside) {
  fs::create_symlink(base_ / "data2" / "secret.txt", base_ / "data" / "link.txt");
  for (const fs::path& path :
       {base_ / "data" / ".." / "data2" / "secret.txt", base_ / "data2" / "secret.txt",
        base_ / "data" / "link.txt", fs::path("/etc/passwd"), fs::path("")}) {
    const absl::Status status = Check(path);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << path;
    EXPECT_THAT(status.message(), HasSubstr("is outside the allowed --data_root (" +
                                            (base_ / "data").string() + ")"));
  }
}

}  // namespace
}  // namespace pp::common
