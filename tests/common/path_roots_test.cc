// CheckUnderRoots: a path inside a root after symlinks and ".." are resolved, and nothing else;
// OpenUnderRoots opens what was checked, a regular file, whatever is swapped in meanwhile.
#include "common/path_roots.h"

#include <sys/stat.h>
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

absl::StatusOr<RegularFile> OpenIn(const fs::path& root, const fs::path& path) {
  return OpenUnderRoots("data.path", path.string(), {root.string()}, "data_root");
}

TEST_F(PathRootsTest, OpenUnderRootsFollowsSymlinksThatStayInsideOnly) {
  const fs::path data = base_ / "data";
  fs::create_symlink("sub/corpus.txt", data / "inside.txt");
  fs::create_symlink(base_ / "data2" / "secret.txt", data / "out.txt");
  absl::StatusOr<RegularFile> inside = OpenIn(data, data / "inside.txt");
  ASSERT_TRUE(inside.ok()) << inside.status();
  EXPECT_EQ(inside->size(), 1u);
  EXPECT_EQ(inside->path(), (data / "inside.txt").string());
  const absl::Status out = OpenIn(data, data / "out.txt").status();
  EXPECT_EQ(out.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.message(), HasSubstr("data.path \"" + (data / "out.txt").string() +
                                       "\" is outside the allowed --data_root"));
  EXPECT_TRUE(OpenUnderRoots("data.path", (data / "out.txt").string(), {}, "data_root").ok())
      << "no roots, no rule";
}

TEST_F(PathRootsTest, OpenUnderRootsRefusesFifosFoldersAndMissingFilesNamingTheField) {
  const fs::path data = base_ / "data";
  ASSERT_EQ(::mkfifo((data / "fifo").c_str(), 0600), 0);
  for (const auto& [name, want] : {std::pair<std::string, std::string>{"fifo", "a FIFO"},
                                   {"sub", "a folder"},
                                   {"absent.bin", "No such file"}}) {
    const absl::Status status = OpenIn(data, data / name).status();
    EXPECT_FALSE(status.ok()) << name;
    EXPECT_THAT(status.message(), HasSubstr("data.path: ")) << name;
    EXPECT_THAT(status.message(), HasSubstr(want)) << name;
  }
}

// A symlink put in after the path was resolved (here: resolved by hand, as OpenUnderRoots does)
// is not followed, at the file or at a folder on the way.
TEST_F(PathRootsTest, OpenResolvedRefusesASymlinkAnywhereOnThePath) {
  const fs::path data = base_ / "data";
  fs::create_symlink(base_ / "data2" / "secret.txt", data / "swapped.txt");
  fs::create_symlink(base_ / "data2", data / "swapped-dir");
  for (const fs::path& path : {data / "swapped.txt", data / "swapped-dir" / "secret.txt"}) {
    const absl::Status status = RegularFile::OpenResolved(path.string(), path.string()).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << path;
    EXPECT_THAT(status.message(), HasSubstr("a symbolic link")) << path;
  }
  EXPECT_TRUE(RegularFile::OpenResolved((data / "sub" / "corpus.txt").string(), "c").ok());
}

}  // namespace
}  // namespace pp::common
