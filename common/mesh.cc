#include "common/mesh.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/spec_bounds.h"

namespace pp::common {

absl::StatusOr<Mesh> Mesh::Create(int dp, int pp, int tp) {
  if (dp < 1 || pp < 1 || tp < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("mesh sizes must be >= 1, got data=", dp, " pipeline=", pp, " tensor=", tp));
  }
  // Ranks are ints: a product past INT_MAX would wrap, and a wrapped size places nothing.
  if (const std::optional<int64_t> size = CheckedProduct({dp, pp, tp});
      !size || *size > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mesh data=", dp, " x pipeline=", pp, " x tensor=", tp, " has more ranks than an int"));
  }
  return Mesh(dp, pp, tp);
}

absl::StatusOr<int> Mesh::Rank(const MeshCoord& c) const {
  if (c.dp < 0 || c.dp >= dp_ || c.pp < 0 || c.pp >= pp_ || c.tp < 0 || c.tp >= tp_) {
    return absl::InvalidArgumentError(absl::StrCat("coordinate (dp ", c.dp, ", pp ", c.pp, ", tp ",
                                                   c.tp, ") is outside ", ToString()));
  }
  return (c.dp * pp_ + c.pp) * tp_ + c.tp;
}

absl::StatusOr<MeshCoord> Mesh::Coord(int rank) const {
  if (rank < 0 || rank >= size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is outside ", ToString(), " (", size(), " ranks)"));
  }
  return MeshCoord{rank / (pp_ * tp_), rank / tp_ % pp_, rank % tp_};
}

absl::StatusOr<std::vector<int>> Mesh::Group(int rank, Axis axis) const {
  absl::StatusOr<MeshCoord> coord = Coord(rank);
  if (!coord.ok()) return coord.status();
  const int n = axis == Axis::kData ? dp_ : axis == Axis::kPipeline ? pp_ : tp_;
  std::vector<int> group;
  for (int i = 0; i < n; ++i) {
    MeshCoord c = *coord;
    (axis == Axis::kData ? c.dp : axis == Axis::kPipeline ? c.pp : c.tp) = i;
    group.push_back(*Rank(c));
  }
  return group;
}

std::string Mesh::ToString() const { return absl::StrCat("dp", dp_, " x pp", pp_, " x tp", tp_); }

int WorldSize(const pp::v1::JobSpec& spec) {
  const pp::v1::ParallelSpec& p = spec.parallel();
  return p.pipeline() * std::max(1, p.tensor()) * std::max(1, p.data());
}

absl::StatusOr<Mesh> MeshOf(const pp::v1::JobSpec& spec) {
  const pp::v1::ParallelSpec& p = spec.parallel();
  return Mesh::Create(std::max(1, p.data()), p.pipeline(), std::max(1, p.tensor()));
}

absl::StatusOr<std::vector<int>> PlaceRanks(const Mesh& mesh,
                                            const std::vector<std::string>& worker_hosts) {
  if (static_cast<int>(worker_hosts.size()) != mesh.size()) {
    return absl::InvalidArgumentError(absl::StrCat(mesh.ToString(), " needs ", mesh.size(),
                                                   " workers, got ", worker_hosts.size()));
  }
  // Free workers per host, hosts in order of first appearance, workers ascending.
  std::vector<std::vector<int>> free;
  std::map<std::string, int> host_index;
  for (int w = 0; w < static_cast<int>(worker_hosts.size()); ++w) {
    const std::string& host = worker_hosts[w];
    if (host.empty() || !host_index.count(host)) {
      if (!host.empty()) host_index[host] = static_cast<int>(free.size());
      free.emplace_back();
      free.back().push_back(w);
    } else {
      free[host_index[host]].push_back(w);
    }
  }
  auto take = [&](int host) {
    int w = free[host].front();
    free[host].erase(free[host].begin());
    return w;
  };
  const int tp = mesh.tp();
  std::vector<int> worker_of_rank;
  int current = 0;
  for (int group = 0; group < mesh.size() / tp; ++group) {
    if (static_cast<int>(free[current].size()) < tp) {
      // Best fit: the host with the fewest free workers that still holds a whole TP group.
      int best = -1;
      for (int h = 0; h < static_cast<int>(free.size()); ++h) {
        const int n = static_cast<int>(free[h].size());
        if (n >= tp && (best < 0 || n < static_cast<int>(free[best].size()))) best = h;
      }
      if (best >= 0) current = best;
    }
    for (int i = 0; i < tp; ++i) {
      // No host holds a whole group any more: fill from the current host, then the next ones.
      while (free[current].empty()) current = (current + 1) % static_cast<int>(free.size());
      worker_of_rank.push_back(take(current));
    }
  }
  return worker_of_rank;
}

}  // namespace pp::common
