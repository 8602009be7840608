#include "common/epoch.h"

#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/step_math.h"

namespace pp::common {

int64_t TrainWindowCount(const pp::v1::JobSpec& spec, int64_t n_tokens) {
  // Eval on its own file (eval.data) holds nothing out: fraction 0 keeps all W starts.
  return SplitWindows(n_tokens, spec.model().seq_len(), spec.eval().holdout_fraction())
      .train_starts;
}

pp::v1::EpochPosition EpochAt(int64_t position, int64_t train_windows) {
  pp::v1::EpochPosition epoch;
  epoch.set_completed(position / train_windows);
  epoch.set_sequence(position % train_windows);
  epoch.set_windows(train_windows);
  epoch.set_epoch(static_cast<double>(epoch.completed()) +
                  static_cast<double>(epoch.sequence()) / static_cast<double>(train_windows));
  return epoch;
}

pp::v1::EpochPosition EpochAtStep(const pp::v1::JobSpec& spec, int64_t step,
                                  int64_t train_windows) {
  if (train_windows < 1) return {};
  return EpochAt(DataPositionAtStep(step, GlobalMicrobatches(spec), spec.train().microbatch_size()),
                 train_windows);
}

int64_t EpochStartStep(int64_t epoch, int64_t train_windows, int64_t sequences_per_step) {
  // epoch x K reaches 2^125 at most: no overflow in 128 bits.
  const __int128 sequences = static_cast<__int128>(epoch) * train_windows;
  return static_cast<int64_t>((sequences + sequences_per_step - 1) / sequences_per_step);
}

std::string EpochText(const pp::v1::EpochPosition& epoch) {
  if (epoch.windows() < 1) return "";
  const int64_t hundredths =
      static_cast<int64_t>(static_cast<__int128>(epoch.sequence()) * 100 / epoch.windows());
  return absl::StrFormat("%d.%02d", epoch.completed(), hundredths);
}

absl::StatusOr<pp::v1::JobSpec> ResolveEpochs(pp::v1::JobSpec spec, int64_t train_windows) {
  pp::v1::TrainSpec& train = *spec.mutable_train();
  if (train.epochs() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("train.epochs: must be >= 0, got ", train.epochs()));
  }
  if ((train.steps() != 0) == (train.epochs() != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "train.steps, train.epochs: set exactly one of them, got steps ", train.steps(),
        " and epochs ", train.epochs()));
  }
  if (train.epochs() == 0) return spec;
  const int64_t per_step = GlobalMicrobatches(spec) * train.microbatch_size();
  const int64_t steps = EpochStartStep(train.epochs(), train_windows, per_step);
  if (steps > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "train.epochs: ", train.epochs(), " epochs of ", train_windows, " windows at ", per_step,
        " sequences per step take ", steps, " steps, more than ",
        std::numeric_limits<int32_t>::max()));
  }
  train.set_steps(static_cast<int32_t>(steps));
  return spec;
}

}  // namespace pp::common
