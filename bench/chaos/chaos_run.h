// The chaos run: a loopback cluster (ppcoord + N ppworker processes) trains several jobs with
// checkpoints while seeded random faults hit it: kill -9 and SIGSTOP/SIGCONT of workers and of
// ppcoord (also while a checkpoint is being written), a full checkpoint disk, a held SQLite lock
// on ppcoord's store. What was killed is started again (ppcoord on the same data folder). Every
// job must end SUCCEEDED with final weights bit for bit those of an uninterrupted run.
// Contract: bounded in time (fault_time, then job_timeout); every process it starts is gone when
// RunChaos returns. REQUIRES: the caller ran EnterPrivateMounts when tmpfs_ok.
#ifndef PP_BENCH_CHAOS_CHAOS_RUN_H_
#define PP_BENCH_CHAOS_CHAOS_RUN_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "bench/chaos/report.h"

namespace pp::chaos {

struct ChaosOptions {
  std::string bin_dir;  // ppcoord, ppworker
  std::string dir;      // the run's folder (cluster logs, data folder, corpus)
  uint64_t seed = 1;
  int workers = 4;
  int jobs = 3;
  int steps = 120;
  int checkpoint_every = 10;
  absl::Duration fault_time = absl::Seconds(30);  // faults are injected this long at most
  absl::Duration mean_gap = absl::Seconds(1);     // between two faults
  absl::Duration job_timeout = absl::Minutes(3);  // for the jobs to end after the last fault
  bool tmpfs_ok = false;                          // a private mount namespace is available
  std::string tmpfs_note;                         // why not, when not
  int64_t tmpfs_bytes = 64 << 20;                 // the checkpoint root's size
  // Comma-separated words: only the fault kinds whose name contains one (case-insensitive),
  // e.g. "sqlite" or "kill,disk"; empty: every kind.
  std::string only;
};

Report RunChaos(const ChaosOptions& options);

}  // namespace pp::chaos

#endif  // PP_BENCH_CHAOS_CHAOS_RUN_H_
