#include "coordinator/calibration_run.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pp::coordinator {

std::string CalibrationKey(const pp::v1::JobSpec& spec, const std::vector<int>& sizes,
                           const std::vector<pp::v1::RankPlacement>& placement) {
  const pp::v1::ModelSpec& m = spec.model();
  std::vector<std::string> workers;
  for (const pp::v1::RankPlacement& p : placement) workers.push_back(p.worker());
  return absl::StrCat(m.vocab_size(), "/", m.seq_len(), "/", m.d_model(), "/", m.n_heads(), "/",
                      m.n_layers(), "/", m.tie_embeddings(), "/", spec.train().threads(), "/",
                      spec.train().precision(), "/", absl::StrJoin(sizes, ","), "/",
                      absl::StrJoin(workers, ","));
}

bool SameWorkers(const pp::v1::Calibration& calibration,
                 const std::vector<pp::v1::RankPlacement>& placement) {
  if (calibration.ranks_size() != static_cast<int>(placement.size())) return false;
  for (const pp::v1::RankCalibration& rank : calibration.ranks()) {
    if (rank.rank() < 0 || rank.rank() >= calibration.ranks_size() ||
        placement[rank.rank()].worker() != rank.worker()) {
      return false;
    }
  }
  return true;
}

CalibrationRun::CalibrationRun(int attempt, std::vector<pp::v1::RankPlacement> placement,
                               std::string key, int64_t serial, absl::Time started)
    : attempt_(attempt),
      placement_(std::move(placement)),
      key_(std::move(key)),
      serial_(serial),
      started_(started),
      answers_(placement_.size()) {}

std::optional<pp::v1::Calibration> CalibrationRun::Answer(int rank, const std::string& worker,
                                                          pp::v1::RankCalibration answer,
                                                          absl::Time now) {
  answers_[rank] = std::move(answer);
  answers_[rank]->set_rank(rank);
  answers_[rank]->set_worker(worker);
  for (const auto& a : answers_) {
    if (!a) return std::nullopt;
  }
  pp::v1::Calibration calibration;
  for (auto& a : answers_) *calibration.add_ranks() = *std::move(a);
  calibration.set_seconds(absl::ToDoubleSeconds(now - started_));
  return calibration;
}

const pp::v1::Calibration* CalibrationCache::Find(const std::string& key) const {
  auto it = by_key_.find(key);
  return it == by_key_.end() ? nullptr : &it->second;
}

}  // namespace pp::coordinator
