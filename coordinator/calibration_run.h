// The measuring half of parallel.schedule "auto" (internal): one calibration in flight on the
// workers a QUEUED job was placed on (CalibrationRun), and the calibrations measured so far, which
// a later "auto" job of the same model shape on the same workers reuses (CalibrationCache). The
// choice from a calibration, the start of the job and the re-plans are JobManager's
// (calibration.cc), which sends the Calibrate RPCs and feeds their answers in here.
//
// Threading: none of its own. JobManager keeps each under mu_ (jobs.h): the run in the job's
// JobRecord, the cache beside the jobs.
#ifndef PP_COORDINATOR_CALIBRATION_RUN_H_
#define PP_COORDINATOR_CALIBRATION_RUN_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "pp/v1/coordinator.pb.h"
#include "pp/v1/job.pb.h"

namespace pp::coordinator {

// The cache key of a calibration: the model shape, threads, precision, the measured sequence
// sizes and the workers in rank order.
std::string CalibrationKey(const pp::v1::JobSpec& spec, const std::vector<int>& sizes,
                           const std::vector<pp::v1::RankPlacement>& placement);

// Whether `calibration` measured the workers `placement` puts on its ranks.
bool SameWorkers(const pp::v1::Calibration& calibration,
                 const std::vector<pp::v1::RankPlacement>& placement);

// One calibration in flight: its workers are held BUSY for `attempt` while the job is QUEUED,
// and each rank answers once.
class CalibrationRun {
 public:
  // `placement` by pipeline rank; `serial` tells its RPCs' answers (Outbound::serial) from a
  // released run's.
  CalibrationRun(int attempt, std::vector<pp::v1::RankPlacement> placement, std::string key,
                 int64_t serial, absl::Time started);

  int attempt() const { return attempt_; }
  const std::vector<pp::v1::RankPlacement>& placement() const { return placement_; }
  const std::string& key() const { return key_; }  // in the CalibrationCache
  int64_t serial() const { return serial_; }

  // Records the answer of rank `rank` (on `worker`); once every rank answered, the calibration
  // (ranks in order, its seconds since `started` to `now`), else nullopt.
  // REQUIRES: 0 <= rank < placement().size().
  std::optional<pp::v1::Calibration> Answer(int rank, const std::string& worker,
                                            pp::v1::RankCalibration answer, absl::Time now);

 private:
  int attempt_;
  std::vector<pp::v1::RankPlacement> placement_;
  std::string key_;
  int64_t serial_;
  absl::Time started_;
  std::vector<std::optional<pp::v1::RankCalibration>> answers_;
};

// Calibrations by CalibrationKey: an "auto" job on the same workers and shape is not calibrated
// again. A re-plan measures again and replaces its entry; a trial's refit replaces it too.
class CalibrationCache {
 public:
  // nullptr when none was measured under `key`.
  const pp::v1::Calibration* Find(const std::string& key) const;
  void Put(const std::string& key, const pp::v1::Calibration& calibration) {
    by_key_[key] = calibration;
  }
  // A serial for the next CalibrationRun.
  int64_t NextSerial() { return ++serial_; }

 private:
  std::map<std::string, pp::v1::Calibration> by_key_;
  int64_t serial_ = 0;
};

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_CALIBRATION_RUN_H_
