// Mesh coordinates and groups, placement on hosts, replicas' microbatch shares.
#include <set>

#include "common/mesh.h"
#include "gtest/gtest.h"
#include "worker/parallel/parallel.h"

namespace pp::parallel {
namespace {

using common::Axis;
using common::Mesh;
using common::MeshCoord;
using common::PlaceRanks;

TEST(MeshTest, RanksAndCoordinatesRoundTripWithTensorFastest) {
  absl::StatusOr<Mesh> mesh = Mesh::Create(2, 3, 2);
  ASSERT_TRUE(mesh.ok());
  EXPECT_EQ(mesh->size(), 12);
  EXPECT_EQ(mesh->ToString(), "dp2 x pp3 x tp2");
  for (int rank = 0; rank < mesh->size(); ++rank) {
    absl::StatusOr<MeshCoord> c = mesh->Coord(rank);
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(*mesh->Rank(*c), rank);
  }
  EXPECT_EQ(*mesh->Rank({0, 0, 1}), 1);
  EXPECT_EQ(*mesh->Rank({0, 1, 0}), 2);
  EXPECT_EQ(*mesh->Rank({1, 0, 0}), 6);
}

TEST(MeshTest, GroupsVaryOneCoordinate) {
  Mesh mesh = *Mesh::Create(2, 2, 2);
  EXPECT_EQ(*mesh.Group(5, Axis::kTensor), (std::vector<int>{4, 5}));
  EXPECT_EQ(*mesh.Group(5, Axis::kPipeline), (std::vector<int>{5, 7}));
  EXPECT_EQ(*mesh.Group(5, Axis::kData), (std::vector<int>{1, 5}));
  // Every rank is in exactly one group per axis: the groups partition the mesh.
  for (Axis axis : {Axis::kData, Axis::kPipeline, Axis::kTensor}) {
    std::set<std::vector<int>> groups;
    for (int r = 0; r < mesh.size(); ++r) groups.insert(*mesh.Group(r, axis));
    std::multiset<int> members;
    for (const auto& g : groups) members.insert(g.begin(), g.end());
    EXPECT_EQ(members.size(), 8u);
    EXPECT_EQ(std::set<int>(members.begin(), members.end()).size(), 8u);
  }
}

TEST(MeshTest, BadSizesAndRanksAreErrors) {
  EXPECT_FALSE(Mesh::Create(0, 1, 1).ok());
  EXPECT_FALSE(Mesh::Create(1, 1, -2).ok());
  Mesh mesh = *Mesh::Create(1, 2, 2);
  EXPECT_FALSE(mesh.Coord(4).ok());
  EXPECT_FALSE(mesh.Coord(-1).ok());
  EXPECT_FALSE(mesh.Rank({0, 2, 0}).ok());
  EXPECT_NE(mesh.Group(9, Axis::kData).status().message().find("rank 9"), std::string::npos);
}

std::vector<std::string> HostsOf(const std::vector<int>& workers,
                                 const std::vector<std::string>& hosts) {
  std::vector<std::string> out;
  for (int w : workers) out.push_back(hosts[w]);
  return out;
}

TEST(PlaceRanksTest, TensorGroupsShareAHostThenPipelines) {
  // 8 workers on two hosts, listed interleaved.
  const std::vector<std::string> hosts = {"a", "b", "a", "b", "a", "b", "a", "b"};
  Mesh mesh = *Mesh::Create(2, 2, 2);
  absl::StatusOr<std::vector<int>> placed = PlaceRanks(mesh, hosts);
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_EQ(std::set<int>(placed->begin(), placed->end()).size(), 8u);  // a permutation
  const std::vector<std::string> h = HostsOf(*placed, hosts);
  for (int r = 0; r < 8; r += 2) EXPECT_EQ(h[r], h[r + 1]) << "TP group of rank " << r;
  // A replica's pipeline (ranks 0-3, then 4-7) stays on one host.
  EXPECT_EQ(h[0], h[2]);
  EXPECT_EQ(h[4], h[6]);
  EXPECT_NE(h[0], h[4]);
}

TEST(PlaceRanksTest, UnevenHostsSplitOnlyTheGroupsThatCannotFit) {
  // Hosts of 3, 3 and 2 workers hold at most 3 whole TP-2 groups; the fourth must straddle.
  const std::vector<std::string> hosts = {"a", "b", "c", "a", "b", "c", "a", "b"};
  Mesh mesh = *Mesh::Create(1, 4, 2);
  absl::StatusOr<std::vector<int>> placed = PlaceRanks(mesh, hosts);
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(std::set<int>(placed->begin(), placed->end()).size(), 8u);
  const std::vector<std::string> h = HostsOf(*placed, hosts);
  int whole = 0;
  for (int r = 0; r < 8; r += 2) whole += h[r] == h[r + 1];
  EXPECT_EQ(whole, 3);
}

TEST(PlaceRanksTest, UnknownHostsAndWrongCountsAreHandled) {
  Mesh mesh = *Mesh::Create(2, 1, 2);
  absl::StatusOr<std::vector<int>> placed = PlaceRanks(mesh, {"", "", "", ""});
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(std::set<int>(placed->begin(), placed->end()).size(), 4u);
  absl::Status wrong = PlaceRanks(mesh, {"a", "a", "a"}).status();
  EXPECT_EQ(wrong.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.message().find("needs 4 workers"), std::string::npos);
}

TEST(ReplicaMicrobatchesTest, SharesAreContiguousAndCoverTheStep) {
  std::vector<int> seen;
  for (int r = 0; r < 3; ++r) {
    absl::StatusOr<MicrobatchRange> range = ReplicaMicrobatches(r, 3, 6);
    ASSERT_TRUE(range.ok());
    EXPECT_EQ(range->end - range->first, 2);
    for (int j = range->first; j < range->end; ++j) seen.push_back(j);
  }
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_FALSE(ReplicaMicrobatches(0, 4, 6).ok());
  EXPECT_FALSE(ReplicaMicrobatches(2, 2, 4).ok());
}

}  // namespace
}  // namespace pp::parallel
