// What the recovery run (recovery_run.h) measured in one mode, how a kill's figures are read
// from the job's events, and the table it prints.
// Contract: pure functions over recorded values; times are seconds, those of JobEvent.time_unix.
#ifndef PP_BENCH_CHAOS_RECOVERY_FIGURES_H_
#define PP_BENCH_CHAOS_RECOVERY_FIGURES_H_

#include <string>
#include <vector>

#include "pp/v1/coordinator.pb.h"
#include "pp/v1/job.pb.h"

namespace pp::chaos {

// One kill -9 of a worker of the faulted job. Seconds count from the kill; -1: not seen.
struct KillSample {
  int step = 0;  // the job's last completed step when it came
  std::string worker;
  int newest_before = 0;       // the newest checkpoint committed before it (0: none)
  double noticed = -1;         // ppcoord restarted or resized the job (RESTARTED, RESIZED)
  std::string backoff;         // the restart's backoff, as EVENT_RESTARTED says it ("2s")
  double backoff_seconds = 0;  // the same in seconds (0 when none was said)
  double placed = -1;          // the job placed again (the first PLACED or RESIZED after it)
  int placed_workers = 0;      // on how many workers (GetJob after the commit)
  double committed = -1;       // the next checkpoint: kill-to-next-commit
  int commit_step = 0;
  double grown = -1;  // elastic: from the worker's restart to the job on every worker
};

// A job the run trained, once it ended (or its wait gave up).
struct JobResult {
  std::string id;
  pp::v1::Job last;    // GetJob at the end
  bool ended = false;  // SUCCEEDED, FAILED or CANCELLED within the run's bound
  double seconds = 0;  // from SubmitJob to its final event
  bool bitwise = false;
  std::string detail;  // why not SUCCEEDED or not bitwise
};

struct ModeResult {
  std::string mode;    // spare | elastic
  std::string title;   // the cluster and job, for the table's header
  JobResult baseline;  // without failures
  JobResult faulted;   // a kill in each window of kill_every steps
  std::vector<KillSample> kills;
  std::vector<std::string> problems;  // each a line for the table: a kill not recovered from...
  double wall_seconds = 0;
};

// Reads `sample`'s figures from `events` for a kill at `kill_unix`: newest_before from the
// CHECKPOINT events up to it, then noticed, placed and the first CHECKPOINT after placed of a
// step newer than newest_before. Keeps `step`, `worker`, `placed_workers` and `grown`.
void ReadKill(const std::vector<pp::v1::JobEvent>& events, double kill_unix, KillSample* sample);

// Whether the job ended successfully, bit for bit, with no problem recorded.
bool Passed(const ModeResult& result);

// The mode's table: the header, one line per kill, the figures, the jobs, "result: PASS|FAIL".
std::string ModeTable(const ModeResult& result, int kill_every);

}  // namespace pp::chaos

#endif  // PP_BENCH_CHAOS_RECOVERY_FIGURES_H_
