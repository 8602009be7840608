// The recovery run: how fast a training job gets going again after kill -9 of one of its workers,
// and what a kill every N steps costs it, in two modes, each on a loopback cluster of its own
// (ppcoord + ppworker processes):
//  - spare: one worker more than the job needs; the job restarts from its newest checkpoint on
//    its own layout with the spare in the killed worker's place; the killed ppworker is then
//    started again, so the spare pool refills before the next kill;
//  - elastic: no spare; the job has spec.elastic, so ppcoord re-plans it onto the workers left
//    (fewer pipeline stages) and grows it back once the killed ppworker, started again, has been
//    idle spec.elastic.grow_after_seconds.
// Per mode: a job without failures (the baseline), then the same job with a kill due at a seeded
// random step of each window of `kill_every` steps; a kill waits until the job is whole again
// (spare: the restarted worker IDLE; elastic: grown back) and its placement trained a step, so
// one due earlier comes at the first step after. Figures: kill-to-next-commit (from the kill to
// the first checkpoint committed after the job was placed again, of a step newer than any
// committed before the kill; a checkpoint every step) per kill, min / median / max; goodput
// (train.steps per wall second, submit to end) of the faulted job over the baseline's.
// Contract: prints one table per mode to stdout and returns whether every job SUCCEEDED with final
// weights bit for bit the uninterrupted reference's, and every kill was recovered from within
// recovery_timeout (a mode whose job did not recover says so, starts the killed worker again and
// stops killing, so the job can still end). Every wait is bounded; every process it starts is
// gone when RunRecovery returns.
#ifndef PP_BENCH_CHAOS_RECOVERY_RUN_H_
#define PP_BENCH_CHAOS_RECOVERY_RUN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace pp::chaos {

struct RecoveryOptions {
  std::string bin_dir;  // ppcoord, ppworker
  std::string dir;      // the run's folder (one cluster folder per mode, the corpus)
  uint64_t seed = 1;
  std::vector<std::string> modes = {"spare", "elastic"};
  int workers = 4;       // the job's workers = its pipeline stages (at most n_layers + 2)
  int steps = 600;       // train.steps of every job
  int kill_every = 100;  // one kill due in each window of this many steps...
  int kills = 5;         // ...for at most this many windows (those ending before the last step)
  absl::Duration recovery_timeout = absl::Seconds(60);  // per kill: to the next commit
  absl::Duration job_timeout = absl::Minutes(5);        // per job: from its last kill to its end
  // elastic mode's spec.elastic
  int min_workers = 1;
  double grace_seconds = 0.5;
  double grow_after_seconds = 2;
};

bool RunRecovery(const RecoveryOptions& options);

}  // namespace pp::chaos

#endif  // PP_BENCH_CHAOS_RECOVERY_RUN_H_
