// The faults that are not signals: a full disk (a small tmpfs as the checkpoint root, filled by a
// ballast file) and a held SQLite lock on ppcoord's store.
// Contract: EnterPrivateMounts must run while the process has one thread (before gRPC or any
// child starts): it moves the process into a mount namespace of its own (as root; otherwise a
// user namespace too, unprivileged), so the tmpfs is seen by the children it starts and vanishes
// with them. Every function returns an error instead of pretending when the machine refuses.
#ifndef PP_BENCH_CHAOS_SANDBOX_H_
#define PP_BENCH_CHAOS_SANDBOX_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pp::chaos {

// REQUIRES: a single-threaded process for the unprivileged way (a library that starts threads
// when it loads, as OpenBLAS does, rules it out: then ReexecUnderUnshare).
absl::Status EnterPrivateMounts();

// Runs this program again under `unshare -rm` (a user and a mount namespace, root in them), once:
// returns only when that cannot be done (already tried, no unshare binary, exec refused).
void ReexecUnderUnshare(char** argv);

// A tmpfs of `bytes` on `dir` (created if missing). REQUIRES: EnterPrivateMounts succeeded.
absl::Status MountTmpfs(const std::string& dir, int64_t bytes);

// Detaches the tmpfs on `dir` (its files go with it).
void Unmount(const std::string& dir);

// Writes <dir>/ballast until the file system is full (ENOSPC): the bytes written.
absl::StatusOr<int64_t> FillDisk(const std::string& dir);
// Removes the ballast FillDisk wrote.
void FreeDisk(const std::string& dir);

// Opens the SQLite database `db` and holds BEGIN EXCLUSIVE on it for `hold` (taking the lock
// waits up to 10 s for ppcoord's own transactions), then commits. Blocks the caller.
absl::Status HoldSqliteLock(const std::string& db, absl::Duration hold);

}  // namespace pp::chaos

#endif  // PP_BENCH_CHAOS_SANDBOX_H_
