#include "worker/daemon/shard_writer.h"

#include <chrono>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/checkpoint.h"
#include "common/step_math.h"

namespace pp::daemon {

absl::Status ShardWriter::Save(int step, compute::ModelCompute::ShardContents shard) {
  if (absl::Status previous = Wait(); !previous.ok()) return previous;
  if (!env_.async_checkpoints) return Write(step, shard);
  thread_ = std::thread([this, step, shard = std::move(shard)] { status_ = Write(step, shard); });
  return absl::OkStatus();
}

absl::Status ShardWriter::Wait() {
  if (thread_.joinable()) thread_.join();
  return std::exchange(status_, absl::OkStatus());
}

absl::Status ShardWriter::Write(int step, const compute::ModelCompute::ShardContents& contents) {
  const auto start = std::chrono::steady_clock::now();
  if (step == env_.pause_shard_step) absl::SleepFor(env_.pause_shard_for);
  const pp::v1::TrainSpec& train = plan_.spec().train();
  // Where the next step starts: the state a resume must reproduce.
  std::map<std::string, std::string> metadata = {
      {"job", plan_.job_id()},
      {"rank", absl::StrCat(plan_.rank())},
      {"step", absl::StrCat(step)},
      {"data_position",
       absl::StrCat(common::DataPositionAtStep(step, common::GlobalMicrobatches(plan_.spec()),
                                               train.microbatch_size()))},
      {"rng_seed", absl::StrCat(train.seed())},
      {"rng_counter", "0"},  // randomness is only drawn at initialisation
  };
  metadata.insert(contents.metadata.begin(), contents.metadata.end());
  pp::v1::CheckpointReport report;
  report.set_job_id(plan_.job_id());
  report.set_attempt(plan_.attempt());
  report.set_rank(plan_.rank());
  report.set_step(step);
  report.set_shard(common::ShardFileName(plan_.rank()));
  absl::StatusOr<pp::v1::CheckpointShard> shard =
      common::WriteShard(common::StepDir(plan_.checkpoint_dir(), plan_.job_id(), step),
                         report.shard(), contents.tensors, metadata);
  report.set_ok(shard.ok());
  if (shard.ok()) {
    report.set_bytes(shard->bytes());
    report.set_sha256(shard->sha256());
    *report.mutable_slices() = shard->slices();
    *report.mutable_tensors() = shard->tensors();
  } else {
    report.set_error(std::string(shard.status().message()));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  log_.Line(shard.ok() ? absl::StrFormat("checkpoint step %d: shard written, %d bytes in %.2f s",
                                         step, report.bytes(), seconds)
                       : absl::StrCat("checkpoint step ", step,
                                      ": shard failed: ", shard.status().message()));
  reporter_.ReportCheckpoint(report, seconds);
  return shard.status();
}

}  // namespace pp::daemon
