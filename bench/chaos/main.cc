// chaos_bench: the chaos run and the load run of docs/testing.md ("Chaos and load"), each
// printing its table. Exit 0 when every pass criterion held: no job lost, every job's final
// weights bit for bit those of an uninterrupted run, no RPC error other than the expected ones,
// the trained job alive under load and (when --heartbeat_p99_ms is set) heartbeat p99 below it.
// The recovery run (--run=recovery, not part of all) prints restart latency and goodput under
// kill -9 of workers (recovery_run.h); it passes when every job ends bitwise equal and recovers.
//   build/bin/chaos_bench [--run=chaos|load|all|recovery] [--short_run] [--seed=N] [sizes...]
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <random>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/chaos/chaos_run.h"
#include "bench/chaos/load_run.h"
#include "bench/chaos/recovery_run.h"
#include "bench/chaos/sandbox.h"

ABSL_FLAG(std::string, run, "all", "chaos | load | all (chaos and load) | recovery");
ABSL_FLAG(bool, short_run, false,
          "the short version for ctest: small counts (each size flag left at 0 takes it)");
ABSL_FLAG(uint64_t, seed, 0, "seed of the fault schedule and the client mixes; 0: from the clock");
ABSL_FLAG(int32_t, workers, 0,
          "chaos: ppworker processes (default 4); recovery: the job's workers, its pipeline "
          "stages (default 4, or 2 when the model has fewer than 2 layers)");
ABSL_FLAG(int32_t, jobs, 0, "chaos: jobs trained (default 3)");
ABSL_FLAG(int32_t, steps, 0,
          "chaos: steps per job (default 400; short 120); recovery: default (kills + 1) x "
          "kill_every (600; short 300)");
ABSL_FLAG(int32_t, fault_seconds, 0, "chaos: faults are injected this long at most (default 120; short 30)");
ABSL_FLAG(int32_t, clients, 0, "load: concurrent clients (default 64; short 16)");
ABSL_FLAG(int32_t, rpcs, 0, "load: RPCs per client (default 1000; short 150)");
ABSL_FLAG(std::string, faults, "",
          "chaos: only the fault kinds whose name contains one of these comma-separated words "
          "(e.g. sqlite, or kill,disk); empty: all");
ABSL_FLAG(int32_t, tmpfs_mb, 64, "chaos: size of the checkpoint root's tmpfs");
ABSL_FLAG(int32_t, kills, 0, "recovery: kills of a worker per mode (default 5; short 2)");
ABSL_FLAG(int32_t, kill_every, 0,
          "recovery: one kill due at a random step of each window of this many steps (default "
          "100)");
ABSL_FLAG(std::string, modes, "spare,elastic", "recovery: comma-separated, spare and/or elastic");
ABSL_FLAG(int32_t, recovery_timeout_s, 0,
          "recovery: a kill not followed by a newer checkpoint within this many seconds is a "
          "failure (default 60; short 30)");
ABSL_FLAG(double, heartbeat_p99_ms, 0, "load: fail when heartbeat p99 is not below this; 0: report only");
ABSL_FLAG(std::string, bin_dir, "", "folder of ppcoord and ppworker; default: this binary's");
ABSL_FLAG(std::string, dir, "", "work folder (removed at the end); default: a fresh one in /tmp");
ABSL_FLAG(bool, keep_dir, false, "keep the work folder (the daemons' logs) at the end");

namespace {

namespace fs = std::filesystem;

int Or(int flag, int full, int short_value) {
  if (flag > 0) return flag;
  return absl::GetFlag(FLAGS_short_run) ? short_value : full;
}

std::string BinDir(const char* argv0) {
  if (!absl::GetFlag(FLAGS_bin_dir).empty()) return absl::GetFlag(FLAGS_bin_dir);
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return (ec ? fs::path(argv0) : self).parent_path().string();
}

bool Passed(const pp::chaos::Report& report, bool chaos) {
  bool ok = report.UnexpectedErrors() == 0 && report.training_ok;
  if (chaos) {
    ok = ok && !report.jobs.empty() &&
         report.JobsCompleted() == static_cast<int>(report.jobs.size()) && report.AllBitwise();
  } else {
    const double limit_ms = absl::GetFlag(FLAGS_heartbeat_p99_ms);
    ok = ok && !report.heartbeat_seconds.empty() &&
         (limit_ms <= 0 || pp::chaos::Percentile(report.heartbeat_seconds, 99) * 1e3 < limit_ms);
  }
  std::cout << report.Table() << "result: " << (ok ? "PASS" : "FAIL") << "\n" << std::endl;
  return ok;
}

bool RunChaos(const std::string& bin_dir, const fs::path& dir, uint64_t seed,
              const absl::Status& mounts) {
  pp::chaos::ChaosOptions options;
  options.bin_dir = bin_dir;
  options.dir = (dir / "chaos").string();
  options.seed = seed;
  options.workers = Or(absl::GetFlag(FLAGS_workers), 4, 4);
  options.jobs = Or(absl::GetFlag(FLAGS_jobs), 3, 3);
  options.steps = Or(absl::GetFlag(FLAGS_steps), 400, 120);
  options.fault_time = absl::Seconds(Or(absl::GetFlag(FLAGS_fault_seconds), 120, 30));
  options.tmpfs_ok = mounts.ok();
  options.tmpfs_note = std::string(mounts.message());
  options.tmpfs_bytes = int64_t{absl::GetFlag(FLAGS_tmpfs_mb)} << 20;
  options.only = absl::GetFlag(FLAGS_faults);
  return Passed(pp::chaos::RunChaos(options), /*chaos=*/true);
}

bool RunLoad(const std::string& bin_dir, const fs::path& dir, uint64_t seed) {
  pp::chaos::LoadOptions options;
  options.bin_dir = bin_dir;
  options.dir = (dir / "load").string();
  options.seed = seed;
  options.clients = Or(absl::GetFlag(FLAGS_clients), 64, 16);
  options.rpcs = Or(absl::GetFlag(FLAGS_rpcs), 1000, 150);
  return Passed(pp::chaos::RunLoad(options), /*chaos=*/false);
}

bool RunRecovery(const std::string& bin_dir, const fs::path& dir, uint64_t seed) {
  pp::chaos::RecoveryOptions options;
  options.bin_dir = bin_dir;
  options.dir = (dir / "recovery").string();
  options.seed = seed;
  options.modes = absl::StrSplit(absl::GetFlag(FLAGS_modes), ',', absl::SkipEmpty());
  for (const std::string& mode : options.modes) {
    if (mode != "spare" && mode != "elastic") {
      std::cerr << "--modes: want spare and/or elastic, got " << mode << "\n";
      return false;
    }
  }
  options.workers = absl::GetFlag(FLAGS_workers);  // 0: RunRecovery picks from the model
  options.kills = Or(absl::GetFlag(FLAGS_kills), 5, 2);
  options.kill_every = Or(absl::GetFlag(FLAGS_kill_every), 100, 100);
  options.steps = Or(absl::GetFlag(FLAGS_steps), (options.kills + 1) * options.kill_every,
                     (options.kills + 1) * options.kill_every);
  options.recovery_timeout = absl::Seconds(Or(absl::GetFlag(FLAGS_recovery_timeout_s), 60, 30));
  return pp::chaos::RunRecovery(options);
}

// The tmpfs needs a mount namespace of this process's own, entered before any thread starts.
absl::Status PrivateMounts(char** argv) {
  absl::Status mounts = pp::chaos::EnterPrivateMounts();
  if (mounts.ok()) return mounts;
  pp::chaos::ReexecUnderUnshare(argv);  // returns only when it could not
  return absl::FailedPreconditionError(absl::StrCat(mounts.message(), "; nor under unshare -rm"));
}

fs::path WorkDir() {
  const fs::path dir = absl::GetFlag(FLAGS_dir).empty()
                           ? fs::temp_directory_path() / absl::StrCat("pp_chaos_", getpid())
                           : fs::path(absl::GetFlag(FLAGS_dir));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const absl::Status mounts = PrivateMounts(argv);
  const std::string run = absl::GetFlag(FLAGS_run);
  if (run != "chaos" && run != "load" && run != "all" && run != "recovery") {
    std::cerr << "--run: want chaos, load, all or recovery, got " << run << "\n";
    return 2;
  }
  uint64_t seed = absl::GetFlag(FLAGS_seed);
  if (seed == 0) seed = std::random_device()() | 1;
  std::cout << "chaos_bench: seed " << seed << " (rerun with --seed=" << seed << ")" << std::endl;
  const fs::path dir = WorkDir();
  const std::string bin_dir = BinDir(argv[0]);
  bool ok = true;
  if (run == "chaos" || run == "all") ok = RunChaos(bin_dir, dir, seed, mounts) && ok;
  if (run == "load" || run == "all") ok = RunLoad(bin_dir, dir, seed) && ok;
  if (run == "recovery") ok = RunRecovery(bin_dir, dir, seed) && ok;
  std::error_code ec;
  if (!absl::GetFlag(FLAGS_keep_dir)) fs::remove_all(dir, ec);
  if (ec) std::cerr << "chaos_bench: cannot remove " << dir << ": " << ec.message() << "\n";
  return ok ? 0 : 1;
}
