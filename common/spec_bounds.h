// Upper bounds on what a job spec may ask for: every size field, and every product of fields that
// the planner, the coordinator or a worker later multiplies, allocates or sends in one message.
// The table, with the reason for each limit, is docs/jobs.md "Limits".
//
// Contract: CheckSpecBounds is pure and allocates nothing that grows with the spec. Sizes in bytes
// are protobuf's (ByteSizeLong, a size_t) compared unconverted with the limits. Products are
// taken in int64 with overflow checks, so one that does not even fit int64 counts as over its
// limit. A refusal is InvalidArgument whose message starts with the field (for a product, the
// fields joined by " x ") and names the limit, e.g.
//   "parallel.tensor: 65536 is over the limit 4096 (...)".
// REQUIRES: ApplyDefaults ran and the spec passed the field checks of ValidateJobSpec (every size
// >= 1, a known schedule with its chunk rule); ValidateJobSpec calls it right after them, so any
// validated spec is within these bounds.
#ifndef PP_COMMON_SPEC_BOUNDS_H_
#define PP_COMMON_SPEC_BOUNDS_H_

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "pp/v1/job.pb.h"

namespace pp::common {

// Fields.
inline constexpr int64_t kMaxNameBytes = 256;
inline constexpr int64_t kMaxPathBytes = 4096;  // PATH_MAX on Linux
inline constexpr int64_t kMaxVocabSize = int64_t{1} << 20;
inline constexpr int64_t kMaxSeqLen = int64_t{1} << 15;
inline constexpr int64_t kMaxDModel = int64_t{1} << 14;
inline constexpr int64_t kMaxLayers = 1024;
inline constexpr int64_t kMaxChunks = 1024;
inline constexpr int64_t kMaxAxis = 4096;  // parallel.pipeline, parallel.tensor, parallel.data
inline constexpr int64_t kMaxMicrobatchSize = int64_t{1} << 16;
inline constexpr int64_t kMaxThreads = 256;
inline constexpr int64_t kMaxBucketBytes = int64_t{1} << 30;
inline constexpr int64_t kMaxGeneratedTokens = int64_t{1} << 30;
inline constexpr int64_t kMaxCheckpointsKept = 1000;
// Files of a job's data (data, every mix source, eval.data), globs expanded: every worker holds
// each one open for the job's life (one descriptor each, beside its sockets, under RLIMIT_NOFILE),
// and the resolved list travels in the spec. 4096 shards of llm.c's 100M tokens are 400B tokens.
inline constexpr int64_t kMaxDataFiles = 4096;
// The sum of data.mix's weights: the period L of the mix's pattern, which every reader builds
// once (two int32 per slot, 512 KiB at most).
inline constexpr int64_t kMaxMixWeight = int64_t{1} << 16;
// Batches of one evaluation: each is one step's forward passes, so an evaluation costs at most
// about a third of this many training steps.
inline constexpr int64_t kMaxEvalBatches = 1024;
// A schedule carried as CSV (parallel.schedule_file, or all of parallel.program's rows).
inline constexpr int64_t kMaxScheduleCsvBytes = int64_t{1} << 20;
// The whole spec as protobuf encodes it (ByteSizeLong): a carried schedule at its limit and 64 KiB
// for every other field. ppcoord keeps each job's spec in memory and in its store, lists it
// (coordinator/list_page.h pages by bytes) and sends it in every task plan and checkpoint
// manifest, each one 4 MiB gRPC message.
inline constexpr int64_t kMaxSpecBytes = kMaxScheduleCsvBytes + (int64_t{64} << 10);

// Products.
inline constexpr int64_t kMaxWorldSize = 4096;  // pipeline x tensor x data ranks
// Actions in one step over every rank: world x the longest rank program. Each rank's program
// (in its TaskPlan) and every rank's measured trace of a step (ReportStep, GetTrace) must fit
// one gRPC message, 4 MiB by default; an action takes at most 14 bytes in a program and 34 with
// its two timestamps in a trace.
inline constexpr int64_t kMaxActionsPerStep = int64_t{1} << 16;
inline constexpr int64_t kMaxSequencesPerStep = int64_t{1} << 24;  // data x microbatches x B
// Elements of any one weight or activation tensor (the kernels take int32 sizes). The field limits
// keep the position embedding and the block weights below it; the token embedding, a
// microbatch's MLP activation, logits and attention scores are checked.
inline constexpr int64_t kMaxTensorElements = (int64_t{1} << 31) - 1;
inline constexpr int64_t kMaxParameters = int64_t{1} << 36;

// The product of `factors`, or nullopt when it does not fit int64.
std::optional<int64_t> CheckedProduct(std::initializer_list<int64_t> factors);

// An upper bound on the actions of any rank's lowered program for `schedule` with D ranks, V
// chunks and M microbatches: V x M x (compute actions per stage and microbatch: 2 for F and B, 3
// when the backward is split into I and W) plus, with D > 1, up to 4 sends and receives around
// them. nullopt when it does not fit int64.
std::optional<int64_t> MaxActionsPerRank(const std::string& schedule, int64_t D, int64_t V,
                                         int64_t M);

// The same bound for a schedule carried as torch CSV (common/job_spec.h CarriedScheduleCsv): 3 x
// the computes of its longest row (an overlapped "(a;b)" cell counts two), as lowering adds at
// most a receive and a send per compute and a file with comm cells holds them already.
int64_t MaxCarriedActionsPerRank(absl::string_view csv);

// The first field of no known number anywhere in `message` (protobuf keeps such fields when it
// parses, and serves them back): InvalidArgument naming the path of its message (`path`, "" for
// the spec itself, which is named "spec") and its number. Allocates only for the paths of the
// nested messages.
absl::Status CheckNoUnknownFields(const google::protobuf::Message& message, absl::string_view path);

// No unknown field anywhere in the spec, and at most kMaxSpecBytes in all. Needs no defaults: the
// first thing ppcoord checks of a spec a request carries.
absl::Status CheckSpecBytes(const pp::v1::JobSpec& spec);

// Every bound above, in the order of docs/jobs.md "Limits" (CheckSpecBytes first).
absl::Status CheckSpecBounds(const pp::v1::JobSpec& spec);

// Parameters of each partition unit (n_layers + 2 entries) of the GPT: the embedding wte + wpe;
// a block's ln_1, qkv, proj, ln_2, fc and mlp proj, 12C^2 + 13C; the head's ln_f and an untied
// lm_head. What partition "params" balances and calibration shares the optimizer's time by.
std::vector<double> UnitParameters(const pp::v1::ModelSpec& model);

}  // namespace pp::common

#endif  // PP_COMMON_SPEC_BOUNDS_H_
