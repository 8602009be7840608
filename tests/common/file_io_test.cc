#include "common/file_io.h"

#include <unistd.h>

#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pp::common {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class FileIoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/file_io_test_" + std::to_string(::getpid());
    fs::remove_all(dir_);
    ASSERT_TRUE(MakeDirs(dir_ + "/a/b").ok());
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_F(FileIoTest, AtomicWriteReplacesAndLeavesNoTemporaries) {
  std::string path = dir_ + "/a/b/f";
  ASSERT_TRUE(WriteFileAtomic(path, "first").ok());
  ASSERT_TRUE(WriteFileAtomic(path, std::string("second\0x", 8)).ok());
  EXPECT_EQ(*ReadFile(path), std::string("second\0x", 8));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_ + "/a/b"), fs::directory_iterator()), 1);
}

TEST_F(FileIoTest, FailedWriteNamesThePathAndKeepsTheOldFile) {
  absl::Status status = WriteFileAtomic(dir_ + "/missing/f", "x");
  EXPECT_THAT(std::string(status.message()), HasSubstr(dir_ + "/missing/f"));
  std::string path = dir_ + "/a/f";
  ASSERT_TRUE(WriteFileAtomic(path, "old").ok());
  ASSERT_TRUE(MakeDirs(dir_ + "/a/g").ok());
  // Renaming a file over a folder fails: the folder and the old file stay as they were.
  EXPECT_FALSE(WriteFileAtomic(dir_ + "/a/g", "new").ok());
  EXPECT_TRUE(fs::is_directory(dir_ + "/a/g"));
  EXPECT_EQ(*ReadFile(path), "old");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_ + "/a"), fs::directory_iterator()), 3);
}

TEST_F(FileIoTest, MappedFileViewsTheBytes) {
  std::string path = dir_ + "/m";
  ASSERT_TRUE(WriteFileAtomic(path, "mapped").ok());
  absl::StatusOr<MappedFile> file = MappedFile::Open(path);
  ASSERT_TRUE(file.ok());
  MappedFile moved = *std::move(file);
  EXPECT_EQ(moved.view(), "mapped");
  ASSERT_TRUE(WriteFileAtomic(path, "").ok());
  EXPECT_EQ(MappedFile::Open(path)->size(), 0u);
  EXPECT_THAT(std::string(MappedFile::Open(dir_).status().message()),
              HasSubstr("is not a regular file"));
  EXPECT_EQ(MappedFile::Open(dir_ + "/none").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace pp::common
