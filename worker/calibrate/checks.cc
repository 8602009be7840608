// The pure parts of calibrate.h: request checks, the timing spec, medians, means and link
// arithmetic.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/spec_bounds.h"
#include "worker/calibrate/calibrate.h"

namespace pp::calibrate {
namespace {

absl::Status Bad(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("calibrate request ", field, ": ", why));
}

// The spec as ValidateJobSpecFields knows it: "auto" is the coordinator's to resolve, so the worker
// checks the rest of the spec against the fixed schedule of the same chunk count.
pp::v1::JobSpec SpecToValidate(const pp::v1::JobSpec& spec) {
  pp::v1::JobSpec fixed = spec;
  pp::v1::ParallelSpec& parallel = *fixed.mutable_parallel();
  parallel.clear_schedule_file();
  parallel.clear_program();
  parallel.set_chunks(std::max(1, parallel.chunks()));  // "auto" may leave it 0: chosen
  parallel.set_schedule(parallel.chunks() > 1 ? "interleaved-1f1b" : "1f1b");
  common::ApplyDefaults(&fixed);
  return fixed;
}

absl::Status CheckSequences(const pp::v1::CalibrateRequest& request,
                            const pp::v1::JobSpec& validated) {
  if (request.sequences().empty()) return Bad("sequences", "is empty");
  if (request.sequences_size() > kMaxSequenceSizes) {
    return Bad("sequences", absl::StrCat(request.sequences_size(), " sizes, at most ",
                                         kMaxSequenceSizes));
  }
  for (int i = 0; i < request.sequences_size(); ++i) {
    const int s = request.sequences(i);
    const std::string field = absl::StrCat("sequences[", i, "]");
    if (s < 1 || s > common::kMaxMicrobatchSize) {
      return Bad(field, absl::StrCat(s, " is outside [1, ", common::kMaxMicrobatchSize, "]"));
    }
    // The activations and logits of a microbatch this size must stay within the limits too.
    pp::v1::JobSpec at_size = validated;
    at_size.mutable_train()->set_microbatch_size(s);
    if (absl::Status bounds = common::CheckSpecBounds(at_size); !bounds.ok()) {
      return Bad(field, absl::StrCat(s, " sequences: ", bounds.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckRequest(const pp::v1::CalibrateRequest& request) {
  if (request.world_size() < 1 || request.world_size() > common::kMaxWorldSize) {
    return Bad("world_size", absl::StrCat(request.world_size(), " is outside [1, ",
                                          common::kMaxWorldSize, "]"));
  }
  if (request.rank() < 0 || request.rank() >= request.world_size()) {
    return Bad("rank", absl::StrCat(request.rank(), " is outside world_size ",
                                    request.world_size()));
  }
  // NaN fails both comparisons, so it is refused too.
  if (!(request.budget_seconds() > 0 && request.budget_seconds() <= kMaxBudgetSeconds)) {
    return Bad("budget_seconds", absl::StrCat(request.budget_seconds(), " is outside (0, ",
                                              kMaxBudgetSeconds, "]"));
  }
  if (request.message_bytes() < 0 || request.message_bytes() > kMaxMessageBytes) {
    return Bad("message_bytes", absl::StrCat(request.message_bytes(), " is outside [0, ",
                                             kMaxMessageBytes, "]"));
  }
  if (request.rendezvous_prefix().empty() ||
      static_cast<int64_t>(request.rendezvous_prefix().size()) > kMaxPrefixBytes) {
    return Bad("rendezvous_prefix", absl::StrCat(request.rendezvous_prefix().size(),
                                                 " bytes, need 1 to ", kMaxPrefixBytes));
  }
  const pp::v1::JobSpec validated = SpecToValidate(request.spec());
  if (absl::Status s = common::ValidateJobSpecFields(validated); !s.ok()) {
    return Bad("spec", s.message());
  }
  return CheckSequences(request, validated);
}

pp::v1::JobSpec TimingSpec(const pp::v1::JobSpec& spec, int sequences) {
  pp::v1::JobSpec timing = SpecToValidate(spec);
  pp::v1::TrainSpec& train = *timing.mutable_train();
  train.set_microbatch_size(sequences);
  train.set_microbatches(1);
  pp::v1::ParallelSpec& parallel = *timing.mutable_parallel();
  parallel.set_data(1);
  parallel.set_tensor(1);
  // The planner adds recomputation's cost itself when it searches recompute modes.
  if (parallel.recompute() == "auto") parallel.set_recompute("none");
  timing.clear_eval();
  return timing;
}

int64_t MessageBytes(const pp::v1::CalibrateRequest& request) {
  if (request.message_bytes() > 0) return request.message_bytes();
  const int largest = *std::max_element(request.sequences().begin(), request.sequences().end());
  // Within kMaxTensorElements floats: CheckRequest bounded the activation at this size.
  return int64_t{largest} * request.spec().model().seq_len() * request.spec().model().d_model() *
         static_cast<int64_t>(sizeof(float));
}

double Mean(const std::vector<double>& samples) {
  double sum = 0;
  for (double s : samples) sum += s;
  return sum / static_cast<double>(samples.size());
}

Link LinkFromRoundTrips(const std::vector<double>& small, const std::vector<double>& stream,
                        int64_t bytes) {
  Link link;
  link.latency_seconds = Median(small) / 2;
  // A stream round is the bytes one way plus a 1-float echo: a small round trip more. The
  // fastest of each: a link's capacity is what it carries when nothing else delays it (on shared
  // cores a round that waited for a time slice measures the scheduler, not the link).
  const double round = *std::min_element(stream.begin(), stream.end());
  const double transfer = round - *std::min_element(small.begin(), small.end());
  // On loopback the bytes may not take measurably longer than a small round trip, and under
  // load the small round trips swing: a difference under half the stream's round is noise, and
  // the whole round then bounds the bandwidth from below. A zero time would give infinity.
  const double seconds = transfer > 0.5 * round ? transfer : round;
  link.bytes_per_second = seconds > 0 ? static_cast<double>(bytes) / seconds : 0;
  return link;
}

}  // namespace pp::calibrate
