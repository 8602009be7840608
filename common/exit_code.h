// Exit codes of the daemons (ppcoord, ppworker) and ppctl: 0 done (a handled stop signal
// included: a daemon that shuts down cleanly on SIGTERM exits 0, never 128+signal), 1 a runtime
// failure (cannot bind, the job store does not open, a job failed), 2 a usage error (a bad flag or
// argument, found before anything starts).
#ifndef PP_COMMON_EXIT_CODE_H_
#define PP_COMMON_EXIT_CODE_H_

#include "absl/status/status.h"

namespace pp::common {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// Every flag parser and options check here reports bad input as InvalidArgument: that is a
// usage error; any other error is a runtime failure.
inline int ExitCodeFor(const absl::Status& status) {
  if (status.ok()) return kExitOk;
  return absl::IsInvalidArgument(status) ? kExitUsage : kExitFailure;
}

}  // namespace pp::common

#endif  // PP_COMMON_EXIT_CODE_H_
