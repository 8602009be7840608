// What a job left behind, read the way the tests compare it with the reference trainer: its
// per-step losses from ppcoord's store, and the tensors of one of its committed checkpoints.
#ifndef PP_TESTS_SUPPORT_RESULTS_H_
#define PP_TESTS_SUPPORT_RESULTS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pp/v1/job.pb.h"

namespace pp::testing_support {

// The spec the single-process reference trainer runs to compare with a job of `spec`: one
// process (D = TP = DP = 1) fed every replica's microbatches of a step (train.microbatches x
// parallel.data), defaults applied.
pp::v1::JobSpec SingleProcessSpec(const pp::v1::JobSpec& spec);

// Every tensor's values (weights and AdamW moments) in the committed checkpoint
// <root>/<job>/step-<step>, whatever layout wrote it.
absl::StatusOr<std::map<std::string, std::vector<float>>> CheckpointValues(const std::string& root,
                                                                           const std::string& job,
                                                                           int step);

// Per-step losses of `job` from ppcoord's store (<data_dir>/ppcoord.db), step 1 first; DataLoss
// when a step is missing.
absl::StatusOr<std::vector<double>> StoredLosses(const std::string& data_dir,
                                                 const std::string& job);

// OK when jobs `a` and `b` stored the same losses, bit for bit, and their checkpoints of `step`
// hold the same tensors with the same bits; otherwise an error naming the first difference.
absl::Status SameBits(const std::string& data_dir, const std::string& root, const std::string& a,
                      const std::string& b, int step);

}  // namespace pp::testing_support

#endif  // PP_TESTS_SUPPORT_RESULTS_H_
