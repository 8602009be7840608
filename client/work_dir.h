// `ppctl up`'s data folder: the one given with --data_dir (kept), or a temporary one removed when
// the WorkDir goes away. Either is this user's alone: the job store, checkpoints, logs and the
// run's secrets go in it, and whoever may write into the folder may swap any of them.
#ifndef PP_CLIENT_WORK_DIR_H_
#define PP_CLIENT_WORK_DIR_H_

#include <string>

#include "absl/status/statusor.h"

namespace pp::client {

// $TMPDIR, or /tmp when it is unset or empty.
std::string TempRoot();

class WorkDir {
 public:
  // `keep` empty: a new folder $TMPDIR/ppctl-up-XXXXXX (0700), removed by the destructor.
  // Otherwise `keep` itself, never removed: created 0700 when missing (its parents as usual);
  // an existing one must be a folder this user owns that neither group nor others may write
  // (FailedPrecondition saying which and what to do). path() is then its real path, so a
  // symlink swapped later does not move the run.
  static absl::StatusOr<WorkDir> Open(const std::string& keep);
  WorkDir(WorkDir&& other) noexcept;
  WorkDir(const WorkDir&) = delete;
  WorkDir& operator=(const WorkDir&) = delete;
  ~WorkDir();

  const std::string& path() const { return path_; }  // absolute
  bool temporary() const { return remove_; }

 private:
  WorkDir(std::string path, bool remove) : path_(std::move(path)), remove_(remove) {}
  std::string path_;
  bool remove_;
};

}  // namespace pp::client

#endif  // PP_CLIENT_WORK_DIR_H_
