// Data-parallel microbatch shares and gradient buckets, and the Collectives interface the tensor-
// and data-parallel groups talk through. The mesh itself (coordinates, groups, placement on hosts)
// is common/mesh.h: the coordinator needs it too.
//
// Contract:
// - Data parallel: replica r of R runs microbatches [r*M/R, (r+1)*M/R) of the step's M (M counts
//   every replica's microbatches; StageOptions.microbatches takes this M, so an all-reduce SUM of
//   the replicas' gradients is the step's gradient).
// - AssignBuckets is a pure function: gradient tensors go into buckets of about bucket_bytes in the
//   order backward produces them (reverse model order, stage by stage as the rank's weight-gradient
//   backwards finish them), and each bucket says after which of those backwards it is complete, so
//   its all-reduce can start while the remaining backwards run.
// - Collectives: a group's AllReduceSum leaves the same bits on every rank (the reduction order is
//   fixed by the implementation, not by who calls first), so replicas that start equal stay equal.
//   AllReduceSum works on backend memory (what kernels::Ops allocates), complete when it is called
//   (a GPU group runs on a stream of its own: callers synchronize their Ops first), and leaves the
//   result complete when it returns; AllGather works on host memory (small control data such as
//   norm partial sums). Every rank of a group makes the same calls in
//   the same order; a peer that never arrives is an error after the group's timeout, not a hang.
#ifndef PP_WORKER_PARALLEL_PARALLEL_H_
#define PP_WORKER_PARALLEL_PARALLEL_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pp::parallel {

// ---- data parallel: microbatch shares, gradient buckets -----------------------------------------

struct MicrobatchRange {
  int first = 0;  // [first, end)
  int end = 0;
};
// Replica dp_rank's share of the step's M microbatches. InvalidArgument unless dp divides M.
absl::StatusOr<MicrobatchRange> ReplicaMicrobatches(int dp_rank, int dp, int microbatches);

struct GradTensor {
  std::string name;
  int64_t bytes = 0;
  int stage = 0;  // the stage (model chunk) holding it
};

struct Bucket {
  std::vector<std::string> names;  // in the order backward finishes them
  int64_t bytes = 0;
  // Index into weight_grad_stages: after that backward every tensor of the bucket is final.
  int ready_after = -1;
};

// tensors: this rank's gradient tensors in model (forward) order. weight_grad_stages[k]: the stage
// of the rank's k-th weight-gradient backward (a full B or a W) in program order. A bucket closes
// before a tensor that would take it past bucket_bytes, so it exceeds bucket_bytes only when it
// holds one tensor. Buckets come in launch order (ready_after ascending). InvalidArgument for
// bucket_bytes < 1, a duplicate name, a negative size, or a tensor whose stage has no backward.
absl::StatusOr<std::vector<Bucket>> AssignBuckets(const std::vector<GradTensor>& tensors,
                                                  const std::vector<int>& weight_grad_stages,
                                                  int64_t bucket_bytes);

// ---- collectives --------------------------------------------------------------------------------

class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // data (n) on every rank -> the elementwise sum over ranks, the same bits on every rank.
  virtual absl::Status AllReduceSum(float* data, size_t n) = 0;
  // in (bytes) on every rank -> out (size * bytes), rank r's input at offset r * bytes.
  virtual absl::Status AllGather(const void* in, size_t bytes, void* out) = 0;
};

// A group of `size` members for threads of one process, one member per thread, on host memory
// (the CPU backend; tests and single-process runs). Sums run in rank order. A member waiting
// longer than `timeout` for its peers fails, and so does every later call of the group.
std::vector<std::unique_ptr<Collectives>> MakeInProcessGroup(
    int size, absl::Duration timeout = absl::Seconds(60));

// Gradient-norm partial sums (tensor name -> sum of squares) of one rank of a tensor-parallel
// group -> those of the whole tensors: names in `sharded` are summed over the group in rank order,
// the others (replicated tensors) keep rank 0's value. Every rank ends with the same bits.
// InvalidArgument when the ranks hold different tensor names.
absl::Status AllReduceSumSquares(Collectives& group, const std::set<std::string>& sharded,
                                 std::map<std::string, double>& sums);

}  // namespace pp::parallel

#endif  // PP_WORKER_PARALLEL_PARALLEL_H_
