#include <unistd.h>

#include <algorithm>
#include "common/safetensors.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "common/sha256.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pp::common {
namespace {

using ::testing::HasSubstr;

// A file from a hand-written header and a data buffer of `data_bytes` bytes.
std::string Build(const std::string& header, size_t data_bytes) {
  uint64_t length = header.size();
  std::string out(reinterpret_cast<const char*>(&length), 8);
  out += header;
  out.append(data_bytes, '\x01');
  return out;
}

void ExpectRefused(const std::string& bytes, const std::string& message_part) {
  absl::StatusOr<SafetensorsFile> file = ParseSafetensors(bytes, "bad.safetensors");
  ASSERT_FALSE(file.ok()) << "accepted; expected: " << message_part;
  EXPECT_THAT(std::string(file.status().message()), HasSubstr("bad.safetensors"));
  EXPECT_THAT(std::string(file.status().message()), HasSubstr(message_part));
}

std::vector<Tensor> SampleTensors() {
  return {{"h.0.attn.qkv.weight", {3, 2}, {1.5f, -2.0f, 0.25f, 1e-30f, -0.0f, 3.0e38f}},
          {"h.0.ln_1.bias", {2}, {7.0f, -7.0f}},
          {"scalar", {}, {42.0f}},
          {"empty", {0, 4}, {}}};
}

TEST(SafetensorsTest, RoundTripIsBitwiseAndKeepsMetadata) {
  std::vector<Tensor> tensors = SampleTensors();
  tensors[0].data[0] = std::numeric_limits<float>::quiet_NaN();
  std::map<std::string, std::string> metadata = {{"step", "12"}, {"quote\"d", "a\nb"}};
  absl::StatusOr<std::string> bytes = SerializeSafetensors(tensors, metadata);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  uint64_t header_length;
  std::memcpy(&header_length, bytes->data(), 8);
  EXPECT_EQ(header_length % 8, 0u);  // data stays 8-byte aligned

  absl::StatusOr<SafetensorsFile> file = ParseSafetensors(*bytes);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata, metadata);
  ASSERT_EQ(file->tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {  // written order is offset order
    EXPECT_EQ(file->tensors[i].name, tensors[i].name);
    EXPECT_EQ(file->tensors[i].shape, tensors[i].shape);
    ASSERT_EQ(file->tensors[i].data.size(), tensors[i].data.size());
    if (tensors[i].data.empty()) continue;
    EXPECT_EQ(0, std::memcmp(file->tensors[i].data.data(), tensors[i].data.data(),
                             tensors[i].data.size() * sizeof(float)));
  }
}

// Checkpoint shards are compared by sha256, so the header must not depend on hash-map order:
// its keys come out sorted.
TEST(SafetensorsTest, HeaderKeysAreSorted) {
  std::vector<Tensor> tensors;
  for (const char* name : {"h.9.mlp.fc.bias", "wte.weight", "h.10.ln_1.bias", "a", "lm_head.weight",
                           "h.0.attn.qkv.weight", "zz", "ln_f.bias"}) {
    tensors.push_back({name, {1}, {1.0f}});
  }
  absl::StatusOr<std::string> bytes = SerializeSafetensors(tensors, {{"b", "1"}, {"a", "2"}});
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  std::vector<std::string> names;
  for (const Tensor& t : tensors) names.push_back(t.name);
  names.push_back("__metadata__");
  std::sort(names.begin(), names.end());
  size_t last = 0;
  for (const std::string& name : names) {
    const size_t at = bytes->find("\"" + name + "\"");
    ASSERT_NE(at, std::string::npos) << name;
    EXPECT_GT(at, last) << name << " is out of order in the header";
    last = at;
  }
}

TEST(SafetensorsTest, WriteAndReadFile) {
  std::string dir = ::testing::TempDir() + "/st_file_" + std::to_string(::getpid());
  ASSERT_TRUE(MakeDirs(dir).ok());
  std::string path = dir + "/a.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, SampleTensors()).ok());
  absl::StatusOr<SafetensorsFile> file = ReadSafetensors(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->tensors.size(), 4u);
  EXPECT_EQ(file->tensors[1].data, (std::vector<float>{7.0f, -7.0f}));
  // No temporary files are left next to the result.
  int entries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    ++entries;
    EXPECT_EQ(entry.path().filename(), "a.safetensors");
  }
  EXPECT_EQ(entries, 1);
  absl::StatusOr<SafetensorsFile> missing = ReadSafetensors(dir + "/nope.safetensors");
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("nope.safetensors"));
}

TEST(SafetensorsTest, Bf16RoundsToNearestEvenAndWidensExactly) {
  // 1 + 2^-8 is halfway between bf16 1 and 1 + 2^-7: ties go to the even mantissa (1).
  // 1 + 3*2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: ties go to 1 + 2^-6.
  std::vector<Tensor> tensors = {
      {"w",
       {5},
       {1.0f + 1.0f / 256, 1.0f + 3.0f / 256, -2.5f, 1.0f + 1.0f / 128 + 1.0f / 1024,
        std::numeric_limits<float>::infinity()}}};
  absl::StatusOr<std::string> bytes = SerializeSafetensors(tensors, {}, DType::kBF16);
  ASSERT_TRUE(bytes.ok());
  EXPECT_THAT(*bytes, HasSubstr("\"BF16\""));
  absl::StatusOr<SafetensorsFile> file = ParseSafetensors(*bytes);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->tensors[0].data,
            (std::vector<float>{1.0f, 1.0f + 1.0f / 64, -2.5f, 1.0f + 1.0f / 128,
                                std::numeric_limits<float>::infinity()}));
}

TEST(SafetensorsTest, RefusesTruncatedLength) { ExpectRefused("abc", "truncated"); }

TEST(SafetensorsTest, RefusesHeaderLongerThanFile) {
  std::string bytes = Build(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4);
  bytes.resize(20);
  ExpectRefused(bytes, "truncated: header length");
}

TEST(SafetensorsTest, RefusesOversizedHeaderLength) {
  std::string bytes(16, '\0');
  uint64_t huge = uint64_t{1} << 62;
  std::memcpy(bytes.data(), &huge, 8);
  ExpectRefused(bytes, "exceeds the limit");
}

TEST(SafetensorsTest, RefusesTruncatedData) {
  ExpectRefused(Build(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 5),
                "out of bounds");
}

TEST(SafetensorsTest, RefusesBadJson) {
  ExpectRefused(Build(R"({"a": {"dtype": "F32", )", 0), "bad JSON header");
  ExpectRefused(Build("not json", 0), "does not start with '{'");
  ExpectRefused(Build(R"({"a": 3})", 0), "tensor \"a\": entry is not a JSON object");
}

TEST(SafetensorsTest, RefusesDuplicateNames) {
  ExpectRefused(Build(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                      R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                      8),
                "bad JSON header: a name appears twice");
  absl::StatusOr<std::string> written =
      SerializeSafetensors({{"x", {1}, {1.0f}}, {"x", {1}, {2.0f}}});
  EXPECT_THAT(std::string(written.status().message()), HasSubstr("duplicate tensor name \"x\""));
}

TEST(SafetensorsTest, RefusesWrongDtype) {
  ExpectRefused(Build(R"({"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})", 4),
                "tensor \"a\": unsupported dtype \"F16\"");
  ExpectRefused(Build(R"({"a":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})", 4),
                "dtype is not a string");
}

TEST(SafetensorsTest, RefusesShapeOffsetMismatch) {
  ExpectRefused(Build(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", 20),
                "tensor \"a\": shape [2,3] of F32 needs 24 bytes but data_offsets span 20");
}

TEST(SafetensorsTest, RefusesBadShapesAndOffsets) {
  ExpectRefused(Build(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4),
                "shape dimension is not a non-negative integer");
  ExpectRefused(Build(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4),
                "shape dimension is not a non-negative integer");
  ExpectRefused(Build(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4]}})", 4),
                "data_offsets is not a list [begin, end]");
  ExpectRefused(Build(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}})", 4),
                "end before begin");
  ExpectRefused(Build(R"({"a":{"dtype":"F32","shape":[1]}})", 4),
                "tensor \"a\": missing data_offsets");
  ExpectRefused(Build(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", 4),
                "unexpected key \"x\"");
  ExpectRefused(Build(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],)"
                      R"("data_offsets":[0,4]}})",
                      4),
                "too large");
}

TEST(SafetensorsTest, RefusesOverlappingOffsets) {
  ExpectRefused(Build(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                      12),
                "tensor \"b\" [4, 12) overlaps tensor \"a\" [0, 8)");
}

TEST(SafetensorsTest, RefusesNonContiguousOffsets) {
  ExpectRefused(Build(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                      R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                      12),
                "tensor \"b\" begins at 8 leaving a gap after byte 4");
}

TEST(SafetensorsTest, RefusesTrailingBytes) {
  ExpectRefused(Build(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 9),
                "data buffer has 9 bytes but the tensors cover 4");
}

TEST(SafetensorsTest, RefusesBadMetadata) {
  ExpectRefused(Build(R"({"__metadata__":{"k":1}})", 0),
                "__metadata__ value of \"k\" is not a string");
  ExpectRefused(Build(R"({"__metadata__":[1]})", 0), "__metadata__ is not a JSON object");
}

TEST(SafetensorsTest, WriterRefusesShapeDataMismatch) {
  const std::string path =
      ::testing::TempDir() + "/x_" + std::to_string(::getpid()) + ".safetensors";
  absl::Status status = WriteSafetensors(path, {{"w", {2, 2}, {1.0f, 2.0f, 3.0f}}});
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("tensor \"w\": shape [2,2] does not match its 3 values"));
}

// Every truncation of a valid file is refused without reading past the end (ASan would see it).
TEST(SafetensorsTest, EveryTruncationIsRefused) {
  absl::StatusOr<std::string> bytes = SerializeSafetensors(SampleTensors());
  ASSERT_TRUE(bytes.ok());
  for (size_t n = 0; n < bytes->size(); ++n) {
    // A copy of exactly n bytes, so reading beyond it is a real over-read.
    std::string prefix = bytes->substr(0, n);
    EXPECT_FALSE(ParseSafetensors(prefix).ok()) << "accepted a prefix of " << n << " bytes";
  }
}

TEST(Sha256Test, KnownVectorsAndFiles) {
  // FIPS 180-2 test vectors.
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  std::string path = ::testing::TempDir() + "/sha_input_" + std::to_string(::getpid());
  std::string big(3 << 20, 'x');  // several read chunks
  ASSERT_TRUE(WriteFileAtomic(path, big).ok());
  absl::StatusOr<std::string> hex = Sha256File(path);
  ASSERT_TRUE(hex.ok());
  EXPECT_EQ(*hex, Sha256Hex(big));
  EXPECT_THAT(std::string(Sha256File(path + ".missing").status().message()),
              HasSubstr(path + ".missing"));
}

}  // namespace
}  // namespace pp::common
