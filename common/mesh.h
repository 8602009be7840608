// The (data, pipeline, tensor) mesh of a job and the placement of its ranks on hosts: arithmetic
// both daemons need (the coordinator places ranks, a worker checks and joins its groups). Pure.
//
// Contract:
// - Global rank = (dp * PP + pp) * TP + tp. TP is the fastest axis, so a TP group is TP
//   consecutive ranks, then the stages of one pipeline, then the replicas.
// - PlaceRanks puts whole TP groups on one host whenever a host has room, then keeps a pipeline's
//   TP groups together, and only then spreads replicas: the chattiest group gets the fastest links.
#ifndef PP_COMMON_MESH_H_
#define PP_COMMON_MESH_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pp/v1/job.pb.h"

namespace pp::common {

struct MeshCoord {
  int dp = 0;
  int pp = 0;
  int tp = 0;
};

enum class Axis { kData, kPipeline, kTensor };

class Mesh {
 public:
  // InvalidArgument unless every size is >= 1 and their product fits an int.
  static absl::StatusOr<Mesh> Create(int dp, int pp, int tp);

  int dp() const { return dp_; }
  int pp() const { return pp_; }
  int tp() const { return tp_; }
  int size() const { return dp_ * pp_ * tp_; }

  absl::StatusOr<int> Rank(const MeshCoord& coord) const;
  absl::StatusOr<MeshCoord> Coord(int rank) const;
  // The global ranks that share every coordinate of `rank` but `axis`, ascending; a rank's index
  // in its group is its coordinate on that axis.
  absl::StatusOr<std::vector<int>> Group(int rank, Axis axis) const;
  // "dp2 x pp2 x tp2".
  std::string ToString() const;

 private:
  Mesh(int dp, int pp, int tp) : dp_(dp), pp_(pp), tp_(tp) {}
  int dp_, pp_, tp_;
};

// pipeline * tensor * data of a spec whose defaults are applied.
int WorldSize(const pp::v1::JobSpec& spec);

// The (data, pipeline, tensor) mesh of a spec whose defaults are applied.
absl::StatusOr<Mesh> MeshOf(const pp::v1::JobSpec& spec);

// worker_hosts[w]: the host of worker w (empty: unknown; unknown hosts count as one host each).
// Returns the worker of each global rank. InvalidArgument unless there are exactly mesh.size()
// workers.
absl::StatusOr<std::vector<int>> PlaceRanks(const Mesh& mesh,
                                            const std::vector<std::string>& worker_hosts);

}  // namespace pp::common

#endif  // PP_COMMON_MESH_H_
