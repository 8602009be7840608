// The CKPT_DIR argument of `ppctl export` and `ppctl sample`: a committed step folder
// (<root>/<job>/step-<N>, holding manifest.json) or a job folder (<root>/<job>), which means its
// newest step that verifies (common::LatestVerifiedCheckpoint).
#ifndef PP_CLIENT_CHECKPOINT_ARG_H_
#define PP_CLIENT_CHECKPOINT_ARG_H_

#include <string>

#include "absl/status/statusor.h"

namespace pp::client {

// The step folder CKPT_DIR names. NotFound when it is neither a step folder nor a job folder with
// a committed step.
absl::StatusOr<std::string> ResolveCheckpointDir(const std::string& dir);

}  // namespace pp::client

#endif  // PP_CLIENT_CHECKPOINT_ARG_H_
