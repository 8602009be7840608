// libFuzzer harness: a job spec as a client submits it (proto3 JSON or text format) through the
// coordinator's own path, common/job_spec.h ParseJobSpec, then PlanJobSpec (coordinator/planning.h:
// ApplyDefaults, ValidateJobSpec, the planner's PlanSchedule and PartitionUnits).
// Bounds, so that a legitimately large spec does not time the harness out: the input is capped
// (kMaxInput), and a spec whose planning work is large (pipeline x chunks x microbatches or
// n_layers above kMaxPlanWork) is validated but not planned. PP_FUZZ_UNBOUNDED=1 lifts the
// planning bound: a valid spec that then allocates gigabytes or runs for seconds is a finding.
// data.path is replaced by a small token file of the harness and model.init_from is cleared, so
// no input opens a file of its choice (a FIFO would block).
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/job_spec.h"
#include "coordinator/planning.h"

namespace {

constexpr size_t kMaxInput = 16 << 10;
constexpr int64_t kMaxPlanWork = 1 << 14;

const std::string& DataFile() {
  static const std::string* path = [] {
    auto* p = new std::string((std::filesystem::temp_directory_path() /
                               ("pp-fuzz-job-spec-" + std::to_string(getpid()) + ".bin"))
                                  .string());
    std::ofstream out(*p, std::ios::binary | std::ios::trunc);
    for (int i = 0; i < 4096; ++i) out.put(static_cast<char>('a' + i % 26));
    std::atexit([] { std::remove(DataFile().c_str()); });
    return p;
  }();
  return *path;
}

bool Unbounded() {
  static const bool unbounded = [] {
    const char* env = std::getenv("PP_FUZZ_UNBOUNDED");
    return env != nullptr && std::string(env) == "1";
  }();
  return unbounded;
}

// Work the planner does for this spec, saturating (the fields are int32, their product is not).
int64_t PlanWork(pp::v1::JobSpec spec) {
  pp::common::ApplyDefaults(&spec);
  const pp::v1::ParallelSpec& p = spec.parallel();
  const int64_t stages = int64_t{p.pipeline()} * p.chunks();
  const int64_t actions = stages * spec.train().microbatches();
  const int64_t units = int64_t{spec.model().n_layers()} * (p.partition() == "params" ? stages : 1);
  return std::max({actions, units, stages});
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > kMaxInput) return 0;
  absl::StatusOr<pp::v1::JobSpec> spec =
      pp::common::ParseJobSpec(absl::string_view(reinterpret_cast<const char*>(data), size));
  if (!spec.ok()) return 0;
  if (!spec->data().path().empty()) spec->mutable_data()->set_path(DataFile());
  // Nor a folder of its choice: what model.init_from reads is hf_config_fuzzer's to cover.
  spec->mutable_model()->clear_init_from();
  if (!Unbounded() && PlanWork(*spec) > kMaxPlanWork) {
    pp::v1::JobSpec defaulted = *spec;
    pp::common::ApplyDefaults(&defaulted);
    (void)pp::common::ValidateJobSpec(defaulted);
    return 0;
  }
  absl::StatusOr<pp::coordinator::PlannedJob> planned = pp::coordinator::PlanJobSpec(*spec);
  if (std::getenv("PP_FUZZ_VERBOSE") != nullptr) {  // seeds: how far does this input get?
    std::fprintf(stderr, "plan: %s\n", planned.status().ToString().c_str());
  }
  if (!planned.ok()) return 0;
  // What the coordinator relies on next: one program per pipeline rank, units per stage.
  const pp::v1::ParallelSpec& p = planned->spec.parallel();
  if (planned->schedule.ranks_size() != p.pipeline() ||
      static_cast<int64_t>(planned->stage_units.size()) != int64_t{p.pipeline()} * p.chunks()) {
    std::abort();
  }
  return 0;
}
