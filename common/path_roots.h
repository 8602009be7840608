// Allowed folders for the files a job names (--data_root, --checkpoint_root): a path is inside a
// root when, after resolving symlinks and "..", it is the root or lies below it.
// Contract: CheckUnderRoots is OK for any path when `roots` is empty (no rule); otherwise a path
// outside every root is InvalidArgument "FIELD PATH is outside the allowed ROOTS_FLAG (r1, r2)".
// Resolution uses std::filesystem::weakly_canonical, so a path that does not exist yet (a
// checkpoint folder) is judged by its longest existing prefix; a symlink inside a root that
// points out of it is outside. Roots themselves are resolved the same way. Thread-safe.
// OpenUnderRoots is how a daemon opens a file a job names: CheckUnderRoots, then the resolved
// path opened without following any symlink (common/file_io.h RegularFile::OpenResolved), so what
// is read is what was checked even when a symlink is swapped in meanwhile; a FIFO, folder or
// device is refused without blocking. Its errors start with `field` and name the path, never the
// file's bytes.
#ifndef PP_COMMON_PATH_ROOTS_H_
#define PP_COMMON_PATH_ROOTS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/file_io.h"

namespace pp::common {

absl::Status CheckUnderRoots(absl::string_view field, const std::string& path,
                             const std::vector<std::string>& roots, absl::string_view roots_flag);

absl::StatusOr<RegularFile> OpenUnderRoots(absl::string_view field, const std::string& path,
                                           const std::vector<std::string>& roots,
                                           absl::string_view roots_flag);

}  // namespace pp::common

#endif  // PP_COMMON_PATH_ROOTS_H_
