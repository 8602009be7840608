// `ppctl up`'s data folder: the one given with --data_dir (kept), or a temporary one removed when
// the WorkDir goes away.
#ifndef PP_CLIENT_WORK_DIR_H_
#define PP_CLIENT_WORK_DIR_H_

#include <string>

#include "absl/status/statusor.h"

namespace pp::client {

// $TMPDIR, or /tmp when it is unset or empty.
std::string TempRoot();

class WorkDir {
 public:
  // `keep` empty: a new folder $TMPDIR/ppctl-up-XXXXXX, removed by the destructor. Otherwise
  // `keep` itself, created if needed and never removed.
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
