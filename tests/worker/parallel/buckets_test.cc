// AssignBuckets properties on a rank holding two model chunks (interleaved backward order).
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/parallel/parallel.h"

namespace pp::parallel {
namespace {

// Tensors of chunk 0 (units 0-1) and chunk 1 (units 2-3) with uneven sizes, in model order.
std::vector<GradTensor> TwoChunks() {
  std::vector<GradTensor> t;
  const int64_t sizes[] = {4096, 1024, 64, 64, 3072, 96, 1024, 32, 64, 64, 4096, 128, 4096, 32};
  for (int i = 0; i < 14; ++i) t.push_back({absl::StrCat("t", i), sizes[i], i < 7 ? 0 : 1});
  return t;
}

// Four microbatches, full backward: chunk 1 then chunk 0 per microbatch; the last chunk-1
// backward is action 6, the last chunk-0 one action 7.
const std::vector<int> kBackwards = {1, 0, 1, 0, 1, 0, 1, 0};

int LastBackward(int stage) {
  int last = -1;
  for (int k = 0; k < static_cast<int>(kBackwards.size()); ++k) {
    if (kBackwards[k] == stage) last = k;
  }
  return last;
}

TEST(BucketsTest, EveryGradientInExactlyOneBucketInBackwardOrder) {
  const std::vector<GradTensor> tensors = TwoChunks();
  for (int64_t cap : {1, 100, 3000, 5000, 1 << 20}) {
    absl::StatusOr<std::vector<Bucket>> buckets = AssignBuckets(tensors, kBackwards, cap);
    ASSERT_TRUE(buckets.ok()) << buckets.status();
    std::map<std::string, int> index;  // name -> model position
    for (size_t i = 0; i < tensors.size(); ++i) index[tensors[i].name] = static_cast<int>(i);
    std::vector<int> order;
    std::multiset<std::string> seen;
    for (const Bucket& b : *buckets) {
      int64_t bytes = 0;
      for (const std::string& n : b.names) {
        seen.insert(n);
        order.push_back(index.at(n));
        bytes += tensors[index.at(n)].bytes;
      }
      EXPECT_EQ(b.bytes, bytes);
      // Size bound: over the cap only as a single tensor.
      EXPECT_TRUE(b.bytes <= cap || b.names.size() == 1) << "cap " << cap << " bucket " << b.bytes;
    }
    EXPECT_EQ(seen.size(), tensors.size());
    EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()).size(), tensors.size());
    // Reverse backward order: chunk 1 (finished first) from its end, then chunk 0 from its end.
    std::vector<int> expected = {13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0};
    EXPECT_EQ(order, expected) << "cap " << cap;
  }
}

TEST(BucketsTest, ReadyAfterIsTheLastBackwardTouchingTheBucket) {
  const std::vector<GradTensor> tensors = TwoChunks();
  std::map<std::string, int> stage;
  for (const GradTensor& t : tensors) stage[t.name] = t.stage;
  absl::StatusOr<std::vector<Bucket>> buckets = AssignBuckets(tensors, kBackwards, 5000);
  ASSERT_TRUE(buckets.ok());
  ASSERT_GT(buckets->size(), 2u);
  int previous = -1;
  bool early = false;
  for (const Bucket& b : *buckets) {
    int last = -1;
    for (const std::string& n : b.names) last = std::max(last, LastBackward(stage[n]));
    EXPECT_EQ(b.ready_after, last);
    EXPECT_GE(b.ready_after, previous);  // launch order
    previous = b.ready_after;
    early = early || b.ready_after < static_cast<int>(kBackwards.size()) - 1;
  }
  EXPECT_TRUE(early) << "chunk 1's buckets can start before chunk 0's last backward";
}

TEST(BucketsTest, BadInputsAreErrors) {
  std::vector<GradTensor> tensors = TwoChunks();
  EXPECT_FALSE(AssignBuckets(tensors, kBackwards, 0).ok());
  absl::Status missing = AssignBuckets(tensors, {1, 1}, 100).status();
  EXPECT_NE(missing.message().find("'t0' of stage 0"), std::string::npos) << missing;
  tensors.push_back(tensors[3]);
  EXPECT_NE(AssignBuckets(tensors, kBackwards, 100).status().message().find("twice"),
            std::string::npos);
  tensors.pop_back();
  tensors[0].bytes = -1;
  EXPECT_FALSE(AssignBuckets(tensors, kBackwards, 100).ok());
}

}  // namespace
}  // namespace pp::parallel
