// Epochs: passes over a job's training windows (docs/jobs.md "Data windows"), the one definition
// that ppcoord, the workers, the single-process trainer and ppctl use. Pure, exact int64 (products
// in 128 bits), no I/O.
//
// Definition. Training draws sequence s from a range of K window starts (worker/data/data.h), and
// every start is used once per K sequences; K = TrainWindowCount below (W = N - T starts of N
// tokens, fewer with eval.holdout_fraction, common::SplitWindows). A step whose data position is
// pos (sequences consumed before it, common::DataPositionAtStep = step x S with S = R x M x B
// sequences per step, the same on every layout and resume) stands at
//   completed = floor(pos / K)     complete passes
//   sequence  = pos mod K          sequences into the current pass
//   epoch     = completed + sequence / K
// Epoch n (0-based) starts at the first step whose position reaches n x K:
//   EpochStartStep(n) = ceil(n x K / S)
// and `train.epochs: n` trains exactly that many steps.
// Several files (data.paths, a glob) are one stream, their concatenation: N is their tokens
// together, and K as above. A weighted mix (data.mix, sources i with K_i = N_i - T starts each
// and weights w_i summing to L) defines K = sum K_i: the sequences of one epoch are as many as
// the windows of all sources. Source i is drawn w_i / L of the time, so it makes
// K x w_i / (L x K_i) passes over its own windows per epoch: exactly one each only when the
// weights are proportional to the K_i. No source's windows are held out (eval.holdout_fraction
// is refused beside a mix). common/data_spec.h CheckDataFiles counts K this way at submit; the
// readers of worker/data/data.h use the same ranges.
#ifndef PP_COMMON_EPOCH_H_
#define PP_COMMON_EPOCH_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "pp/v1/job.pb.h"

namespace pp::common {

// K for a training stream of `n_tokens` tokens under `spec` (model.seq_len, eval's holdout).
// REQUIRES n_tokens >= seq_len + 1 (ValidateSpecFiles checked it); >= 1 for a valid spec.
int64_t TrainWindowCount(const pp::v1::JobSpec& spec, int64_t n_tokens);

// The epoch of data position `position` with K = `train_windows`. REQUIRES position >= 0,
// train_windows >= 1.
pp::v1::EpochPosition EpochAt(int64_t position, int64_t train_windows);

// The epoch of the start of `step` (completed steps) of a job with K = `train_windows`; an empty
// EpochPosition (windows 0) when train_windows is 0 (unknown).
pp::v1::EpochPosition EpochAtStep(const pp::v1::JobSpec& spec, int64_t step, int64_t train_windows);

// ceil(epoch x K / S): the first step of epoch `epoch`, in int64. REQUIRES epoch >= 0,
// train_windows >= 1, sequences_per_step >= 1; exact for every such int64 input whose result
// fits int64 (an int32 epoch always does).
int64_t EpochStartStep(int64_t epoch, int64_t train_windows, int64_t sequences_per_step);

// "2.50": the epoch to two decimals, truncated (a pass 99.9% done reads 1.99, never 2.00); what
// ppctl prints. Empty when `epoch` has no windows (K unknown).
std::string EpochText(const pp::v1::EpochPosition& epoch);

// `train.epochs` resolved at submit: train.steps = EpochStartStep(train.epochs) (the documented
// step count of `epochs: n`), train.epochs kept. InvalidArgument naming the field unless exactly
// one of train.steps and train.epochs is set (>= 1), or when the steps exceed an int32.
// Unchanged when train.epochs is 0. REQUIRES train_windows >= 1.
absl::StatusOr<pp::v1::JobSpec> ResolveEpochs(pp::v1::JobSpec spec, int64_t train_windows);

}  // namespace pp::common

#endif  // PP_COMMON_EPOCH_H_
