// The two side effects every part of ppcoord's job manager shares (internal): the daemon's log line
// and the wall clock that jobs, events and checkpoints are stamped with.
#ifndef PP_COORDINATOR_LOG_H_
#define PP_COORDINATOR_LOG_H_

#include <iostream>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace pp::coordinator {

// One line on stderr: "ppcoord: <line>".
inline void Log(const std::string& line) { std::cerr << "ppcoord: " + line + "\n"; }

// Now, in seconds since the unix epoch.
inline double NowUnix() { return absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()); }

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_LOG_H_
