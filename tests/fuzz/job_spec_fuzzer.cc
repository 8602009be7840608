// libFuzzer harness: a job spec as a client submits it (proto3 JSON or text format) through the
// coordinator's own path, common/job_spec.h ParseJobSpec, then PlanClientSpec
// (coordinator/planning.h: ApplyDefaults, the field and file checks, the planner's PlanSchedule
// and PartitionUnits).
// Bounds, so that a legitimately large spec does not time the harness out: the input is capped
// (kMaxInput), and a spec whose planning work is large (pipeline x chunks x microbatches or
// n_layers above kMaxPlanWork) is validated but not planned. PP_FUZZ_UNBOUNDED=1 lifts the
// planning bound: a valid spec that then allocates gigabytes or runs for seconds is a finding.
// Every data file a spec names (data and eval.data: path, paths, mix sources, tokenizer) is
// replaced by one of the harness's folder (a byte file, an llm.c shard; a glob becomes a glob
// over that folder) and model.init_from is cleared, so no input opens a file or lists a folder of
// its choice (a FIFO would block, a glob over / would take long).
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/llmc_shard.h"
#include "coordinator/plan/plan.h"
#include "coordinator/planning.h"

namespace {

constexpr size_t kMaxInput = 16 << 10;
constexpr int64_t kMaxPlanWork = 1 << 14;

// The harness's data folder: 0.bin, 4096 letters; 1.bin, an llm.c shard of 2048 ids below 256.
const std::string& DataDir() {
  static const std::string* dir = [] {
    auto* d = new std::string((std::filesystem::temp_directory_path() /
                               ("pp-fuzz-job-spec-" + std::to_string(getpid())))
                                  .string());
    std::filesystem::create_directories(*d);
    std::ofstream bytes(*d + "/0.bin", std::ios::binary | std::ios::trunc);
    for (int i = 0; i < 4096; ++i) bytes.put(static_cast<char>('a' + i % 26));
    std::ofstream shard(*d + "/1.bin", std::ios::binary | std::ios::trunc);
    shard << pp::common::LlmcHeader(2048);
    for (int i = 0; i < 2048; ++i) shard.put(static_cast<char>('a' + i % 26)).put('\0');
    std::atexit([] { std::filesystem::remove_all(DataDir()); });
    return d;
  }();
  return *dir;
}

// A path of the harness's in place of `path`, of the file that `format` reads; a glob stays one.
std::string Confined(const std::string& path, const std::string& format) {
  const bool glob = path.find_first_of("*?[") != std::string::npos;
  if (format == "llmc") return DataDir() + (glob ? "/1*.bin" : "/1.bin");
  return DataDir() + (glob ? "/*.bin" : "/0.bin");
}

// `inherited`: the format a mix gives its sources whose own is empty.
void Confine(pp::v1::DataSpec* data, const std::string& inherited = "") {
  const std::string format = data->format().empty() ? inherited : data->format();
  if (!data->path().empty()) data->set_path(Confined(data->path(), format));
  for (std::string& path : *data->mutable_paths()) path = Confined(path, format);
  for (pp::v1::WeightedData& source : *data->mutable_mix()) {
    Confine(source.mutable_data(), format);
  }
  if (!data->tokenizer().empty()) data->set_tokenizer(DataDir());
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
  if (pp::common::IsAutoSchedule(p)) {  // the search plans up to max_chunks and 16 values of M
    const int64_t stages = int64_t{p.pipeline()} * std::max(p.chunks(), p.auto_plan().max_chunks());
    const int64_t batch = int64_t{spec.train().microbatches()} * spec.train().microbatch_size();
    const int64_t M = std::min<int64_t>(batch, p.auto_plan().max_microbatches());
    return std::max(stages * M * 16, int64_t{spec.model().n_layers()} * stages);
  }
  const int64_t stages = int64_t{p.pipeline()} * p.chunks();
  const int64_t actions = stages * spec.train().microbatches();
  const int64_t units = int64_t{spec.model().n_layers()} * (p.partition() == "params" ? stages : 1);
  return std::max({actions, units, stages});
}

// "auto": the choice from a uniform calibration (every unit 1 ms a sequence, 1 GB/s links) is a
// spec ppcoord can plan, with the global batch kept. A refusal is fine; a crash or a choice that
// does not plan is a finding.
void CheckAutoChoice(const pp::v1::JobSpec& spec) {
  pp::v1::Calibration calibration;
  const std::vector<int> sizes = pp::plan::CalibrationSequences(spec);
  for (int r = 0; r < spec.parallel().pipeline(); ++r) {
    pp::v1::RankCalibration* rank = calibration.add_ranks();
    rank->set_rank(r);
    rank->set_link_latency_seconds(1e-4);
    rank->set_link_bytes_per_second(1e9);
    for (const char* kind : {"embedding", "block", "head"}) {
      for (int n : sizes) {
        pp::v1::UnitCost* c = rank->add_units();
        c->set_unit(kind);
        c->set_sequences(n);
        c->set_forward(1e-3 * n);
        c->set_backward(2e-3 * n);
        c->set_backward_input(1e-3 * n);
        c->set_backward_weight(1e-3 * n);
      }
    }
  }
  absl::StatusOr<pp::plan::CalibratedPlan> choice = pp::plan::ChooseCalibrated(spec, calibration);
  if (!choice.ok()) return;
  const pp::v1::TrainSpec& chosen = choice->spec.train();
  if (int64_t{chosen.microbatches()} * chosen.microbatch_size() !=
          int64_t{spec.train().microbatches()} * spec.train().microbatch_size() ||
      !pp::coordinator::PlanJobSpec(choice->spec).ok()) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > kMaxInput) return 0;
  absl::StatusOr<pp::v1::JobSpec> spec =
      pp::common::ParseJobSpec(absl::string_view(reinterpret_cast<const char*>(data), size));
  if (!spec.ok()) return 0;
  Confine(spec->mutable_data());
  if (spec->eval().has_data()) Confine(spec->mutable_eval()->mutable_data());
  // Nor a folder of its choice: what model.init_from reads is hf_config_fuzzer's to cover.
  spec->mutable_model()->clear_init_from();
  if (!Unbounded() && PlanWork(*spec) > kMaxPlanWork) {
    pp::v1::JobSpec defaulted = *spec;
    pp::common::ApplyDefaults(&defaulted);
    (void)pp::common::ValidateJobSpec(defaulted);
    return 0;
  }
  absl::StatusOr<pp::coordinator::PlannedJob> planned =
      pp::coordinator::PlanClientSpec(*spec, /*data_roots=*/{}, /*fits=*/nullptr);
  if (std::getenv("PP_FUZZ_VERBOSE") != nullptr) {  // seeds: how far does this input get?
    std::fprintf(stderr, "plan: %s\n", planned.status().ToString().c_str());
  }
  if (!planned.ok()) return 0;
  // What the coordinator relies on next: one program per pipeline rank, units per stage (of the
  // provisional layout an "auto" spec is placed with).
  const bool auto_schedule = pp::common::IsAutoSchedule(planned->spec.parallel());
  const pp::v1::JobSpec laid_out =
      auto_schedule ? pp::plan::ProvisionalSpec(planned->spec) : planned->spec;
  const pp::v1::ParallelSpec& p = laid_out.parallel();
  if (planned->schedule.ranks_size() != p.pipeline() ||
      static_cast<int64_t>(planned->stage_units.size()) != int64_t{p.pipeline()} * p.chunks()) {
    std::abort();
  }
  if (auto_schedule) CheckAutoChoice(planned->spec);
  return 0;
}
