// Data and tensor parallelism on GPUs: whole tasks (ModelCompute + executor + NCCL groups), one
// rank per thread and per GPU, planned the way ppcoord plans them (MeshRanks, BuildTaskPlans),
// against the single-GPU reference trainer on the same step's microbatches: per-step losses within
// 1e-4 relative. Each task also checks at its end that its data-parallel replicas hold bitwise
// identical weights and moments. Needs two CUDA devices: exits 77 (skipped) with fewer.
//
//   gpu_mesh_test            (tests/gpu/run.sh runs it on a GPU machine)
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/job_spec.h"
#include "common/mesh.h"
#include "coordinator/placement.h"
#include "coordinator/plan/plan.h"
#include "kernels/cuda/plugin.h"
#include "worker/comm/transport.h"
#include "worker/daemon/task.h"
#include "worker/data/data.h"
#include "worker/trainer/trainer.h"

namespace pp {
namespace {

namespace fs = std::filesystem;

constexpr int kSteps = 3;

// The step losses, from whichever rank reports them.
class LossReporter : public daemon::TaskReporter {
 public:
  pp::v1::ReportResponse ReportStep(const pp::v1::StepReport& report,
                                    const executor::StepResult&) override {
    absl::MutexLock lock(&mu_);
    if (report.has_loss()) losses_[report.step()] = report.loss();
    return {};
  }
  void ReportCheckpoint(const pp::v1::CheckpointReport&, double) override {}
  std::map<int, double> losses() {
    absl::MutexLock lock(&mu_);
    return losses_;
  }

 private:
  absl::Mutex mu_;
  std::map<int, double> losses_;
};

pp::v1::JobSpec Spec(const std::string& corpus, int data, int tensor) {
  pp::v1::JobSpec spec;
  spec.set_name("gpu-mesh");
  spec.mutable_model()->set_vocab_size(256);
  spec.mutable_model()->set_seq_len(64);
  spec.mutable_model()->set_d_model(128);
  spec.mutable_model()->set_n_heads(4);
  spec.mutable_model()->set_n_layers(2);
  spec.mutable_parallel()->set_pipeline(1);
  spec.mutable_parallel()->set_data(data);
  spec.mutable_parallel()->set_tensor(tensor);
  spec.mutable_parallel()->set_schedule("1f1b");
  spec.mutable_train()->set_steps(kSteps);
  spec.mutable_train()->set_microbatches(4 / data);  // per replica: 4 in all
  spec.mutable_train()->set_microbatch_size(2);
  spec.mutable_train()->set_lr(1e-3);
  spec.mutable_train()->set_grad_clip(1.0);
  spec.mutable_data()->set_path(corpus);
  common::ApplyDefaults(&spec);
  return spec;
}

// One rank per GPU, as ppcoord would place them; true when every rank succeeded and the losses
// match the single-GPU reference.
bool RunMesh(const std::string& corpus, const fs::path& dir, int data, int tensor) {
  const pp::v1::JobSpec spec = Spec(corpus, data, tensor);
  const std::string name = absl::StrCat("dp", data, " x tp", tensor);
  if (absl::Status valid = common::ValidateJobSpec(spec); !valid.ok()) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), std::string(valid.message()).c_str());
    return false;
  }
  absl::StatusOr<pp::v1::Schedule> schedule = plan::PlanSchedule(
      "1f1b", 1, 1, spec.train().microbatches(), pp::v1::CostModel());
  absl::StatusOr<std::vector<int>> units = plan::PartitionUnits(spec.model(), 1, "uniform", {}, {});
  if (!schedule.ok() || !units.ok()) {
    std::fprintf(stderr, "%s: planning failed\n", name.c_str());
    return false;
  }
  pp::v1::Job job;
  job.set_id("gpu-mesh");
  job.set_attempt(1);
  *job.mutable_spec() = spec;
  const std::vector<int> stage_to_rank(schedule->stage_to_rank().begin(),
                                       schedule->stage_to_rank().end());
  const common::Mesh mesh = *common::MeshOf(spec);  // the spec is valid
  for (pp::v1::RankPlacement& p : coordinator::MeshRanks(mesh, stage_to_rank)) {
    p.set_worker(absl::StrCat("gpu", p.rank()));
    *job.add_placement() = std::move(p);
  }
  const std::vector<pp::v1::TaskPlan> plans =
      coordinator::BuildTaskPlans(job, *schedule, *units, (dir / "checkpoints").string());

  std::unique_ptr<comm::KvStore> kv = comm::NewMemoryKvStore();
  LossReporter reporter;
  std::vector<absl::Status> status(plans.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < plans.size(); ++r) {
    threads.emplace_back([&, r] {
      daemon::TaskEnv env;
      env.kv = kv.get();
      env.device = absl::StrCat("cuda:", r);
      env.comm_timeout = absl::Seconds(60);
      env.rehearse = true;  // as ppworker does on cuda:N
      daemon::Task task(plans[r], env);
      status[r] = task.Run(reporter);
    });
  }
  for (std::thread& t : threads) t.join();
  bool ok = true;
  for (size_t r = 0; r < plans.size(); ++r) {
    if (!status[r].ok()) {
      std::fprintf(stderr, "%s rank %zu: %s\n", name.c_str(), r,
                   std::string(status[r].message()).c_str());
      ok = false;
    }
  }
  if (!ok) return false;

  pp::v1::JobSpec single = spec;
  single.mutable_parallel()->set_data(1);
  single.mutable_parallel()->set_tensor(1);
  single.mutable_train()->set_microbatches(4);
  trainer::TrainOptions options;
  options.device = "cuda:0";
  absl::StatusOr<trainer::TrainResult> reference = trainer::Train(single, options);
  if (!reference.ok()) {
    std::fprintf(stderr, "%s reference: %s\n", name.c_str(),
                 std::string(reference.status().message()).c_str());
    return false;
  }
  const std::map<int, double> losses = reporter.losses();
  if (losses.size() != reference->losses.size()) {
    std::fprintf(stderr, "%s: %zu step losses reported, want %zu\n", name.c_str(), losses.size(),
                 reference->losses.size());
    return false;
  }
  for (int k = 1; k <= kSteps; ++k) {
    const double got = losses.at(k), want = reference->losses[k - 1];
    const bool close = std::fabs(got - want) <= 1e-4 * std::fabs(want);
    std::printf("%s step %d: loss %.6f, single GPU %.6f%s\n", name.c_str(), k, got, want,
                close ? "" : "  <- differs");
    ok = ok && close;
  }
  return ok;
}

int Main() {
  int devices = 0;
  absl::StatusOr<const kernels::CudaPlugin*> plugin = kernels::LoadCudaPlugin();
  PpCudaError error{};
  if (plugin.ok() && (*plugin)->device_count(&devices, &error) != 0) devices = 0;
  if (devices < 2) {
    std::printf("gpu_mesh_test: %d CUDA device(s), need 2: skipped\n", devices);
    return 77;
  }
  const fs::path dir = fs::temp_directory_path() / absl::StrCat("gpu_mesh_test_", ::getpid());
  fs::create_directories(dir);
  const std::string corpus = (dir / "corpus.txt").string();
  std::ofstream(corpus) << data::GenerateCorpus(11, 200000);
  bool ok = RunMesh(corpus, dir, /*data=*/2, /*tensor=*/1);
  ok = RunMesh(corpus, dir, /*data=*/1, /*tensor=*/2) && ok;
  fs::remove_all(dir);
  std::printf("gpu_mesh_test: %s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace pp

int main() { return pp::Main(); }
