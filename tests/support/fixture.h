// The gtest fixture of the tests that run jobs on the real daemons (tests/e2e/integration,
// tests/e2e/recovery, tests/e2e/mesh): a folder of the test's own with a generated corpus in it, a
// loopback cluster of the binaries in PP_BIN_DIR started on demand, job specs built from shared
// settings, and the comparison of a finished job with the single-process reference trainer.
// Contract: the folder is fresh at SetUp and gone after TearDown, the cluster's processes are
// stopped before it goes, and a failed test prints the daemons' log tails.
#ifndef PP_TESTS_SUPPORT_FIXTURE_H_
#define PP_TESTS_SUPPORT_FIXTURE_H_

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"
#include "pp/v1/coordinator.pb.h"
#include "pp/v1/job.pb.h"
#include "tests/support/cluster.h"

namespace pp::testing_support {

// A fresh folder for the running test, <tmp>/pp_<suite>_<test>_<pid>, emptied if a crashed run
// left it.
std::filesystem::path FreshTestDir();

// How close a distributed run must come to the reference trainer.
enum class Match {
  // Every loss and every weight bit for bit: the CPU runtime's contract for pipeline layouts.
  kBitwise,
  // Losses within 1e-5 relative per step, weights within 1e-4 of their tensor's largest value:
  // data and tensor parallelism sum the gradients in another order than one accumulation.
  kClose,
};

class ClusterTest : public ::testing::Test {
 protected:
  // The corpus: data::GenerateCorpus(corpus_seed, corpus_bytes).
  explicit ClusterTest(uint64_t corpus_seed = 7, int64_t corpus_bytes = 20000)
      : corpus_seed_(corpus_seed), corpus_bytes_(corpus_bytes) {}

  void SetUp() override;
  void TearDown() override;

  // ppcoord with fast failure detection (a worker is DOWN 2 s after its last heartbeat) and
  // `workers` workers w0, w1, ... registered and IDLE.
  void StartCluster(int workers);

  // The settings every spec of these tests shares (a byte vocabulary; 1F1B with V=1; AdamW with
  // lr 1e-3, weight decay 0.1 and a small grad_clip, 0.5, so that clipping, the cross-stage norm,
  // matters in every step; the test's corpus) with `text`, a JobSpec in text format, merged over.
  pp::v1::JobSpec SpecFrom(absl::string_view text) const;

  // Submits `spec`; its job id once it SUCCEEDED (within 60 s), or "" after recording a failure.
  std::string Run(const pp::v1::JobSpec& spec);
  // Resumes an ended job as `request` asks; the job once it SUCCEEDED again (within 60 s).
  absl::StatusOr<pp::v1::Job> ResumeToEnd(const pp::v1::ResumeJobRequest& request);

  // Compares `job`'s per-step losses (ppcoord's store) and its final weights (its checkpoint of
  // step spec.train.steps, whatever layout wrote it) with the reference trainer's run of `spec`
  // on one process, fed every replica's microbatches (train.microbatches x parallel.data).
  void ExpectMatchesReference(const pp::v1::JobSpec& spec, const std::string& job, Match match);

  std::filesystem::path dir_;
  std::string corpus_;  // the corpus file
  std::unique_ptr<Cluster> cluster_;

 private:
  uint64_t corpus_seed_;
  int64_t corpus_bytes_;
};

}  // namespace pp::testing_support

#endif  // PP_TESTS_SUPPORT_FIXTURE_H_
