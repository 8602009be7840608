// Loading, defaulting and validating a pp.v1.JobSpec (proto/pp/v1/job.proto).
// Contract: LoadJobSpec parses only (proto3 JSON when the first non-blank character is '{', text
// format otherwise); ApplyDefaults fills the documented zero-means-default fields; ValidateJobSpec
// (call after ApplyDefaults) returns InvalidArgument whose message starts with the offending field
// path, e.g. "model.n_heads: 5 does not divide model.d_model 128". It also opens the data file
// (must exist and hold at least seq_len+1 tokens; uint16 tokens must be < vocab_size). The
// schedule names and chunk rules are those of the schedule table (common/schedules.h); its rules
// that depend on microbatch counts (ScheduleRule::constraints) are for the planner to apply.
// Every size, and every product of sizes, is bounded before the data file is opened
// (common/spec_bounds.h).
#ifndef PP_COMMON_JOB_SPEC_H_
#define PP_COMMON_JOB_SPEC_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pp/v1/job.pb.h"

namespace pp::common {

// `origin` names the text in errors (a path, or "<spec>").
absl::StatusOr<pp::v1::JobSpec> ParseJobSpec(absl::string_view text,
                                             absl::string_view origin = "<spec>");
absl::StatusOr<pp::v1::JobSpec> LoadJobSpec(const std::string& path);

// parallel.chunks/tensor/data 0 -> 1, parallel.partition "" -> "cost", train.beta1 0 -> 0.9,
// train.beta2 0 -> 0.95, train.eps 0 -> 1e-8, train.threads 0 -> 1,
// train.precision "" -> "fp32", checkpoint.keep 0 -> 3,
// data.format "" -> "bytes", data.generated_tokens 0 -> 1 MiB (generated format only).
void ApplyDefaults(pp::v1::JobSpec* spec);

absl::Status ValidateJobSpec(const pp::v1::JobSpec& spec);

}  // namespace pp::common

#endif  // PP_COMMON_JOB_SPEC_H_
