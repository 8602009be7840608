#include "coordinator/plan/recompute.h"

#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/recompute.h"
#include "coordinator/plan/plan.h"

namespace pp::plan {
namespace {

// The largest rank's estimate, for people: "rank 0 peaks at 61.2 MiB".
std::string LargestRank(const std::vector<RankMemory>& memory) {
  const RankMemory* largest = nullptr;
  for (const RankMemory& r : memory) {
    if (largest == nullptr || r.bytes.total > largest->bytes.total) largest = &r;
  }
  if (largest == nullptr) return "no rank";
  return absl::StrCat("rank ", largest->rank, " peaks at ", FormatBytes(largest->bytes.total));
}

double Sum(const std::vector<int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0);
}

}  // namespace

absl::StatusOr<RecomputeShares> RecomputeSharesOf(const pp::v1::JobSpec& spec,
                                                  const std::vector<int>& stage_units) {
  absl::StatusOr<common::Recompute> mode = common::RecomputeFromName(spec.parallel().recompute());
  if (!mode.ok()) return mode.status();
  if (*mode == common::Recompute::kNone) return RecomputeShares{};
  pp::v1::JobSpec without = spec;
  without.mutable_parallel()->set_recompute("none");
  absl::StatusOr<std::vector<int64_t>> held = HeldBytesPerMicrobatch(spec, stage_units);
  if (!held.ok()) return held.status();
  absl::StatusOr<std::vector<int64_t>> all = HeldBytesPerMicrobatch(without, stage_units);
  if (!all.ok()) return all.status();
  RecomputeShares shares;
  shares.dropped = Sum(*all) > 0 ? 1 - Sum(*held) / Sum(*all) : 0;
  if (*mode == common::Recompute::kFull) {
    shares.forward = 1;
  } else {
    const std::vector<double> units = UnitCosts(spec.model());
    const double T = spec.model().seq_len(), C = spec.model().d_model();
    shares.forward = spec.model().n_layers() * 4 * T * C /
                     std::accumulate(units.begin(), units.end(), 0.0);
  }
  return shares;
}

absl::StatusOr<RecomputeChoice> ChooseRecompute(pp::v1::JobSpec spec,
                                                const std::vector<int>& stage_units,
                                                const pp::v1::Schedule& schedule,
                                                const MemoryFits& fits) {
  std::string tried;
  absl::Status refusal;
  for (const char* mode : {"none", "selective", "full"}) {
    spec.mutable_parallel()->set_recompute(mode);
    absl::StatusOr<std::vector<RankMemory>> memory =
        EstimateMemory(spec, stage_units, schedule);
    if (!memory.ok()) return memory.status();
    refusal = fits(*memory);
    if (refusal.ok()) {
      std::string reason = absl::StrCat("recompute auto chose ", mode, ": ", tried,
                                        tried.empty() ? "" : "; ", mode, " fits (",
                                        LargestRank(*memory), ")");
      return RecomputeChoice{mode, *std::move(memory), std::move(reason)};
    }
    absl::StrAppend(&tried, tried.empty() ? "" : "; ", mode, " does not fit (",
                    LargestRank(*memory), ")");
  }
  return absl::Status(refusal.code(),
                      absl::StrCat(refusal.message(), " (recompute auto tried none, selective and "
                                                      "full: ", tried, ")"));
}

}  // namespace pp::plan
