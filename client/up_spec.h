// `ppctl up`'s job: the embedded default spec (a small GPT on a text every Debian machine has) or
// a spec file, defaulted and validated before any process starts.
#ifndef PP_CLIENT_UP_SPEC_H_
#define PP_CLIENT_UP_SPEC_H_

#include <string>

#include "absl/status/statusor.h"
#include "pp/v1/job.pb.h"

namespace pp::client {

// The embedded default for `workers` pipeline ranks: about two minutes on two cores, and the loss
// falls from ln(256) = 5.55 to about 1.6.
pp::v1::JobSpec DefaultUpSpec(int workers);

// The spec at `path` (empty: DefaultUpSpec) with an absolute data path, as submitted. Errors name
// the file: it cannot be read or parsed, it does not validate, or it needs more than `workers`
// workers (pipeline x tensor x data).
absl::StatusOr<pp::v1::JobSpec> LoadUpSpec(const std::string& path, int workers);

}  // namespace pp::client

#endif  // PP_CLIENT_UP_SPEC_H_
