#include "common/file_io.h"
#include "common/sha256.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

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

// Runs `open` on a thread and waits at most 10 s. A reader blocked on a FIFO is released by opening
// the write end, so the test fails instead of hanging when the open blocks.
absl::Status OpenWithDeadline(const std::function<absl::Status()>& open, const std::string& fifo,
                              bool* blocked) {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  absl::Status status;
  std::thread opener([&] {
    absl::Status result = open();
    std::lock_guard<std::mutex> lock(mu);
    status = result;
    done = true;
    cv.notify_all();
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    *blocked = !cv.wait_for(lock, std::chrono::seconds(10), [&] { return done; });
  }
  if (*blocked) {
    int writer = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (writer >= 0) ::close(writer);
  }
  opener.join();
  return status;
}

TEST_F(FileIoTest, OnlyRegularFilesOpenAndAFifoNeverBlocks) {
  std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const auto& open : std::vector<std::function<absl::Status()>>{
           [&] { return RegularFile::Open(fifo).status(); },
           [&] { return Sha256File(fifo).status(); },
           [&] { return ReadFile(fifo).status(); }}) {
    bool blocked = false;
    absl::Status status = OpenWithDeadline(open, fifo, &blocked);
    EXPECT_FALSE(blocked);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(status.message(), fifo + ": not a regular file (a FIFO)");
  }
  EXPECT_EQ(RegularFile::Open(dir_).status().message(), dir_ + ": not a regular file (a folder)");
  EXPECT_EQ(RegularFile::Open("/dev/null").status().message(),
            "/dev/null: not a regular file (a character device)");
  EXPECT_EQ(RegularFile::Open(dir_ + "/none").status().code(), absl::StatusCode::kNotFound);

  std::string path = dir_ + "/r";
  ASSERT_TRUE(WriteFileAtomic(path, "regular").ok());
  absl::StatusOr<RegularFile> file = RegularFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->size(), 7u);
  EXPECT_EQ(::fcntl(file->fd(), F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  uint8_t bytes[3];
  ASSERT_TRUE(file->ReadAt(2, 3, bytes).ok());
  EXPECT_EQ(std::string(reinterpret_cast<char*>(bytes), 3), "gul");
}

TEST_F(FileIoTest, AReadPastATruncationIsDataLossNamingTheFile) {
  std::string path = dir_ + "/t";
  ASSERT_TRUE(WriteFileAtomic(path, "0123456789").ok());
  absl::StatusOr<RegularFile> file = RegularFile::Open(path);
  ASSERT_TRUE(file.ok());
  fs::resize_file(path, 4);
  uint8_t bytes[4];
  EXPECT_TRUE(file->ReadAt(0, 4, bytes).ok());
  absl::Status status = file->ReadAt(2, 4, bytes);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(status.message()), HasSubstr(path + ": file ended at byte 4"));
}

TEST_F(FileIoTest, ReadFileRefusesAFileOverTheCapBeforeReading) {
  std::string path = dir_ + "/big";
  ASSERT_TRUE(WriteFileAtomic(path, "12345").ok());
  EXPECT_EQ(*ReadFile(path, 5), "12345");
  absl::StatusOr<std::string> refused = ReadFile(path, 4);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr(path + ": 5 bytes exceeds the limit of 4 bytes"));
}

}  // namespace
}  // namespace pp::common
