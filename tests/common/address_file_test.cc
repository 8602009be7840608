// common/address_file.h: the one-line JSON the daemons write with --address_file, replaced
// atomically, and read back by ppctl up and the tests.
#include "common/address_file.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/file_io.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pp::common {
namespace {

using ::testing::HasSubstr;

class AddressFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           absl::StrCat("address_file_", ::getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name = "addr.json") const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

TEST_F(AddressFileTest, WritesOneLineOfJsonAndReadsItBack) {
  ASSERT_TRUE(WriteAddressFile(path(), {"127.0.0.1:41000", "127.0.0.1:41001"}).ok());
  absl::StatusOr<std::string> text = ReadFile(path());
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "{\"grpc\":\"127.0.0.1:41000\",\"metrics\":\"127.0.0.1:41001\"}\n");
  absl::StatusOr<DaemonAddresses> read = ReadAddressFile(path());
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->grpc, "127.0.0.1:41000");
  EXPECT_EQ(read->metrics, "127.0.0.1:41001");
}

TEST_F(AddressFileTest, MissingFileIsNotFoundAndBadContentIsRejected) {
  absl::StatusOr<DaemonAddresses> missing = ReadAddressFile(path());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);

  for (const std::string& content :
       {std::string("{\"grpc\":\"h:1\""),   // cut short
        std::string("{\"grpc\":\"h:1\"}"),  // no metrics
        std::string("{\"grpc\":1,\"metrics\":\"h:2\"}"), std::string("")}) {
    std::ofstream(path()) << content;
    absl::StatusOr<DaemonAddresses> bad = ReadAddressFile(path());
    ASSERT_FALSE(bad.ok()) << content;
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << content;
    EXPECT_THAT(bad.status().message(), HasSubstr(absl::StrCat("address file ", path())))
        << content;
  }
}

TEST_F(AddressFileTest, WriteFailureNamesTheFile) {
  const std::string in_missing_folder = (dir_ / "no-such-folder" / "addr.json").string();
  absl::Status status = WriteAddressFile(in_missing_folder, {"h:1", "h:2"});
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr(in_missing_folder));
}

// A reader polling the file while it is rewritten sees the old or the new addresses, complete,
// and the folder holds no temporary file afterwards.
TEST_F(AddressFileTest, ReplacingIsAtomicForAPollingReader) {
  // Long hosts make a torn write visible: the line is far longer than one small write.
  const std::string host_a(2000, 'a'), host_b(2000, 'b');
  const DaemonAddresses a{host_a + ":1", host_a + ":2"}, b{host_b + ":3", host_b + ":4"};
  ASSERT_TRUE(WriteAddressFile(path(), a).ok());
  std::atomic<bool> done = false;
  std::atomic<int> reads = 0, torn = 0;
  std::thread reader([&] {
    while (!done) {
      absl::StatusOr<DaemonAddresses> got = ReadAddressFile(path());
      ++reads;
      const bool whole = got.ok() && ((got->grpc == a.grpc && got->metrics == a.metrics) ||
                                      (got->grpc == b.grpc && got->metrics == b.metrics));
      if (!whole) ++torn;
    }
  });
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(WriteAddressFile(path(), i % 2 == 0 ? b : a).ok());
  const absl::Time end = absl::Now() + absl::Seconds(10);
  while (reads < 50 && absl::Now() < end) std::this_thread::yield();
  done = true;
  reader.join();
  EXPECT_EQ(torn, 0) << "of " << reads << " reads";
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    ++files;
    EXPECT_EQ(entry.path().filename(), "addr.json");
  }
  EXPECT_EQ(files, 1);
  absl::StatusOr<DaemonAddresses> last = ReadAddressFile(path());
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->grpc, a.grpc);  // the last write (i = 99) wrote a
}

}  // namespace
}  // namespace pp::common
