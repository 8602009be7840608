// Allowed folders for the files a job names (--data_root, --checkpoint_root): a path is inside a
// root when, after resolving symlinks and "..", it is the root or lies below it.
// Contract: CheckUnderRoots is OK for any path when `roots` is empty (no rule); otherwise a path
// outside every root is InvalidArgument "FIELD PATH is outside the allowed ROOTS_FLAG (r1, r2)".
// Resolution uses std::filesystem::weakly_canonical, so a path that does not exist yet (a
// checkpoint folder) is judged by its longest existing prefix; a symlink inside a root that
// points out of it is outside. Roots themselves are resolved the same way. Thread-safe.
#ifndef PP_COMMON_PATH_ROOTS_H_
#define PP_COMMON_PATH_ROOTS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace pp::common {

absl::Status CheckUnderRoots(absl::string_view field, const std::string& path,
                             const std::vector<std::string>& roots, absl::string_view roots_flag);

}  // namespace pp::common

#endif  // PP_COMMON_PATH_ROOTS_H_
