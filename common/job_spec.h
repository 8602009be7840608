// Loading, defaulting and validating a pp.v1.JobSpec (proto/pp/v1/job.proto).
// Contract: LoadJobSpec parses only (proto3 JSON when the first non-blank character is '{', text
// format otherwise); ApplyDefaults fills the documented zero-means-default fields. Validation (call
// after ApplyDefaults) returns InvalidArgument whose message starts with the offending field path,
// e.g. "model.n_heads: 5 does not divide model.d_model 128", in two parts:
// - ValidateJobSpecFields reads no file: cheap and bounded, so ppcoord may run it under its lock.
// - ValidateSpecFiles (REQUIRES: ValidateJobSpecFields OK) opens every file the spec names under
//   `data_roots` (common/path_roots.h OpenUnderRoots: inside a root, no symlink followed that was
//   not checked, regular files only): the data files as common/data_spec.h CheckDataFiles checks
//   them (globs expanded, formats, ids below the real vocabulary, which reads uint16 and llmc
//   files whole, in 1 MiB chunks, not mapped; seq_len+1 tokens a stream; an eval holdout leaving
//   windows on both sides); model.init_from's config.json must be the spec's model. It blocks on
//   the disk as long as that takes: never call it under a lock that others wait on. Its errors
//   name the field and the path, never the files' bytes.
// The data section's rules (data, eval.data: path, paths, mix, globs) are common/data_spec.h's.
// - ValidateJobSpec is both.
// The schedule names and chunk rules are those of the schedule table (program/schedules.h); its
// rules that depend on microbatch counts (ScheduleKind::constraints) are for the planner to apply.
// Every size, and every product of sizes, is bounded before a file is opened
// (common/spec_bounds.h).
#ifndef PP_COMMON_JOB_SPEC_H_
#define PP_COMMON_JOB_SPEC_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pp/v1/job.pb.h"

namespace pp::common {

// `origin` names the text in errors (a path, or "<spec>").
absl::StatusOr<pp::v1::JobSpec> ParseJobSpec(absl::string_view text,
                                             absl::string_view origin = "<spec>");
absl::StatusOr<pp::v1::JobSpec> LoadJobSpec(const std::string& path);

// parallel.chunks/tensor/data 0 -> 1 (with schedule "auto", chunks 0 stays: V is chosen; the
// partition stays empty and parallel.auto_plan's zeros take their documented values),
// parallel.partition "" -> "cost", train.beta1 0 -> 0.9,
// train.beta2 0 -> 0.95, train.eps 0 -> 1e-8, train.threads 0 -> 1,
// train.precision "" -> "fp32", checkpoint.keep 0 -> 3,
// and the data section's (common/data_spec.h ApplyDataDefaults: data.format "" -> "bytes", a mix
// source's format "" -> the mix's, data.generated_tokens 0 -> 1 MiB for format generated).
void ApplyDefaults(pp::v1::JobSpec* spec);

absl::Status ValidateJobSpecFields(const pp::v1::JobSpec& spec);
absl::Status ValidateSpecFiles(const pp::v1::JobSpec& spec,
                               const std::vector<std::string>& data_roots);
// ValidateSpecFiles, and on success K, the training windows of an epoch (common/epoch.h; of a mix
// the sum over its sources): ppcoord counts K once, here, and never under its lock. Give it a
// spec whose globs are resolved (common/data_spec.h ResolveDataGlobs), so that K counts the files
// the job will read.
absl::StatusOr<int64_t> CheckSpecFiles(const pp::v1::JobSpec& spec,
                                       const std::vector<std::string>& data_roots);
// Empty `data_roots`: a file may lie anywhere.
absl::Status ValidateJobSpec(const pp::v1::JobSpec& spec,
                             const std::vector<std::string>& data_roots = {});

// The torch CSV (coordinator/plan/torch_csv.h) a spec carries: parallel.schedule_file, or
// parallel.program's rows joined by "\n". Empty when the spec names a generated schedule.
std::string CarriedScheduleCsv(const pp::v1::ParallelSpec& parallel);
bool CarriesSchedule(const pp::v1::ParallelSpec& parallel);
// The field that carries it, for errors: "parallel.program" or "parallel.schedule_file".
const char* CarriedScheduleField(const pp::v1::ParallelSpec& parallel);

// The files a spec makes ppcoord and the workers read, as (field, path): every data.path,
// data.paths[i], data.mix[i].data.path(s), data.tokenizer, eval.data.path(s) and model.init_from
// where set (common/data_spec.h DataInputPaths), globs as written. Every one must lie under
// --data_root. In a stored spec globs are resolved, so this lists every file a job reads.
std::vector<std::pair<std::string, std::string>> SpecInputPaths(const pp::v1::JobSpec& spec);

// The token ids in use: model.real_vocab_size, or model.vocab_size when it is 0 (no padding).
// Data ids and sampled ids are below it; logits at and past it are padding (job.proto ModelSpec).
int32_t RealVocabSize(const pp::v1::ModelSpec& model);

// Whether the spec asks ppcoord to choose its schedule (parallel.schedule "auto").
bool IsAutoSchedule(const pp::v1::ParallelSpec& parallel);

// parallel.schedule, or kScheduleFileName (program/schedules.h) for a spec that carries its
// schedule: what logs, checkpoint layouts and ppctl print.
std::string ScheduleLabel(const pp::v1::ParallelSpec& parallel);

}  // namespace pp::common

#endif  // PP_COMMON_JOB_SPEC_H_
