// worker/data/data.h "Documents": where each token's document starts in a packed window.
#include <cstdint>
#include <optional>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pp/v1/job.pb.h"
#include "worker/data/data.h"

namespace pp::data {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr int32_t kEot = 9;

// The starts of one row.
std::vector<int32_t> Starts(const std::vector<int32_t>& row, int32_t eot = kEot) {
  std::vector<int32_t> starts(row.size(), -1);
  DocumentStarts(row.data(), 1, static_cast<int64_t>(row.size()), eot, starts.data());
  return starts;
}

TEST(DocumentStartsTest, WithoutAnEndOfTextTheWindowIsOneDocument) {
  EXPECT_THAT(Starts({1, 2, 3, 4}), ElementsAre(0, 0, 0, 0));
}

TEST(DocumentStartsTest, TheEndOfTextIsTheLastTokenOfTheDocumentItEnds) {
  // "a b EOT c d": the EOT's target (c) is kept; c starts the next document.
  EXPECT_THAT(Starts({1, 2, kEot, 3, 4}), ElementsAre(0, 0, 0, 3, 3));
}

TEST(DocumentStartsTest, AnEndOfTextAtPositionZeroIsAOneTokenDocument) {
  EXPECT_THAT(Starts({kEot, 1, 2, 3}), ElementsAre(0, 1, 1, 1));
}

TEST(DocumentStartsTest, AnEndOfTextAtTheLastPositionEndsTheWindowsLastDocument) {
  EXPECT_THAT(Starts({1, 2, 3, kEot}), ElementsAre(0, 0, 0, 0));
  EXPECT_THAT(Starts({1, kEot, 3, kEot}), ElementsAre(0, 0, 2, 2));
}

TEST(DocumentStartsTest, ConsecutiveEndsOfTextMakeOneTokenDocuments) {
  // An empty document between two EOTs is the one-token document of the second EOT.
  EXPECT_THAT(Starts({1, kEot, kEot, kEot, 2}), ElementsAre(0, 0, 2, 3, 4));
  EXPECT_THAT(Starts({kEot, kEot, kEot}), ElementsAre(0, 1, 2));
}

TEST(DocumentStartsTest, RowsAreIndependentAndEveryRowStartsADocument) {
  // Two rows of T = 3: the second row's first token starts a document though the first row
  // does not end with an end of text.
  const std::vector<int32_t> inputs = {1, kEot, 2, 3, 4, kEot};
  std::vector<int32_t> starts(inputs.size(), -1);
  DocumentStarts(inputs.data(), 2, 3, kEot, starts.data());
  EXPECT_THAT(starts, ElementsAre(0, 0, 2, 0, 0, 0));
}

TEST(DocumentStartsTest, TheEndOfTextIdIsTheOneGiven) {
  EXPECT_THAT(Starts({0, 5, 0, 5}, 0), ElementsAre(0, 1, 1, 3));
  EXPECT_THAT(Starts({0, 5, 0, 5}, 5), ElementsAre(0, 0, 2, 2));
}

TEST(DocumentStartsTest, AMicrobatchHasStartsOnlyWhenDocumentsAreMasked) {
  Microbatch batch;
  batch.batch = 1;
  batch.seq_len = 3;
  batch.inputs = {kEot, 1, 2};
  batch.targets = {1, 2, 3};
  EXPECT_THAT(DocumentStarts(batch, std::nullopt), IsEmpty());
  EXPECT_THAT(DocumentStarts(batch, kEot), ElementsAre(0, 1, 1));
}

TEST(DocumentStartsTest, OnlyMaskedDocumentsHaveAnEndOfText) {
  pp::v1::JobSpec spec;
  EXPECT_EQ(DocumentEndOfText(spec), std::nullopt);
  spec.mutable_data()->set_documents("none");
  EXPECT_EQ(DocumentEndOfText(spec), std::nullopt);
  spec.mutable_data()->set_documents("mask");
  EXPECT_EQ(DocumentEndOfText(spec), 0);  // bytes: the byte \0
  spec.mutable_data()->set_end_of_text(50256);
  EXPECT_EQ(DocumentEndOfText(spec), 50256);
}

}  // namespace
}  // namespace pp::data
