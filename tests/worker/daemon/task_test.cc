// Whole tasks (ModelCompute + executor + Gloo) for every schedule the planner compiles, one rank
// per thread, rendezvous through a memory store: per-step losses and final weights must equal the
// single-process reference trainer's bit for bit.
#include "worker/daemon/task.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint.h"
#include "common/job_spec.h"
#include "common/mesh.h"
#include "common/safetensors.h"
#include "common/step_math.h"
#include "coordinator/placement.h"
#include "coordinator/plan/plan.h"
#include "gtest/gtest.h"
#include "worker/data/data.h"
#include "worker/trainer/trainer.h"

namespace pp::daemon {
namespace {

constexpr int kSteps = 3;

class RecordingReporter : public TaskReporter {
 public:
  pp::v1::ReportResponse ReportStep(const pp::v1::StepReport& report,
                                    const executor::StepResult&) override {
    steps.push_back(report);
    pp::v1::ReportResponse answer;
    answer.set_abort(!keep_going);
    answer.set_stop_after_step(stop_after_step);
    return answer;
  }
  // From the checkpoint writer thread; read after Run returned.
  void ReportCheckpoint(const pp::v1::CheckpointReport& report, double) override {
    checkpoints.push_back(report);
  }
  bool keep_going = true;
  int stop_after_step = 0;
  std::vector<pp::v1::StepReport> steps;
  std::vector<pp::v1::CheckpointReport> checkpoints;
};

class TaskTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("task_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ / "corpus.txt") << data::GenerateCorpus(7, 20000);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  pp::v1::JobSpec Spec(const std::string& schedule, int D, int V, int M) {
    pp::v1::JobSpec spec;
    spec.set_name("tiny");
    pp::v1::ModelSpec* model = spec.mutable_model();
    model->set_vocab_size(256);
    model->set_seq_len(16);
    model->set_d_model(32);
    model->set_n_heads(2);
    model->set_n_layers(6);
    spec.mutable_parallel()->set_pipeline(D);
    spec.mutable_parallel()->set_chunks(V);
    spec.mutable_parallel()->set_schedule(schedule);
    pp::v1::TrainSpec* train = spec.mutable_train();
    train->set_steps(kSteps);
    train->set_microbatches(M);
    train->set_microbatch_size(2);
    train->set_lr(1e-3);
    train->set_weight_decay(0.1);
    train->set_grad_clip(0.5);  // small: clipping happens
    train->set_seed(3);
    spec.mutable_data()->set_path((dir_ / "corpus.txt").string());
    common::ApplyDefaults(&spec);
    EXPECT_TRUE(common::ValidateJobSpec(spec).ok()) << common::ValidateJobSpec(spec);
    return spec;
  }

  // One TaskPlan per rank, the way the coordinator builds them.
  std::vector<pp::v1::TaskPlan> Plans(const pp::v1::JobSpec& spec) {
    const int D = spec.parallel().pipeline(), V = spec.parallel().chunks();
    absl::StatusOr<pp::v1::Schedule> schedule = plan::PlanSchedule(
        spec.parallel().schedule(), D, V, spec.train().microbatches(), pp::v1::CostModel());
    EXPECT_TRUE(schedule.ok()) << schedule.status();
    absl::StatusOr<std::vector<int>> units =
        plan::PartitionUnits(spec.model(), D * V, "uniform", {}, {});
    EXPECT_TRUE(units.ok()) << units.status();
    std::vector<pp::v1::TaskPlan> plans(D);
    int first = 0;
    for (int s = 0; s < D * V; ++s) {
      const int rank = schedule->stage_to_rank(s);
      pp::v1::StageLayers* layers = plans[rank].add_stages();
      layers->set_stage(s);
      layers->set_first_unit(first);
      layers->set_last_unit(first + (*units)[s] - 1);
      first += (*units)[s];
    }
    for (int r = 0; r < D; ++r) {
      pp::v1::TaskPlan& plan = plans[r];
      plan.set_job_id("job-" + spec.parallel().schedule());
      plan.set_attempt(1);
      plan.set_rank(r);
      plan.set_world_size(D);
      plan.set_pp_rank(r);
      *plan.mutable_spec() = spec;
      *plan.mutable_program() = schedule->ranks(r);
      *plan.mutable_stage_to_rank() = schedule->stage_to_rank();
      plan.set_checkpoint_dir((dir_ / "checkpoints").string());
      plan.set_rendezvous_prefix(plan.job_id() + "/1/");
    }
    return plans;
  }

  // One TaskPlan per rank of the spec's whole mesh (1f1b), as ppcoord builds them, under `job`.
  std::vector<pp::v1::TaskPlan> MeshPlans(const pp::v1::JobSpec& spec, const std::string& job) {
    const int D = spec.parallel().pipeline();
    absl::StatusOr<pp::v1::Schedule> schedule =
        plan::PlanSchedule("1f1b", D, 1, spec.train().microbatches(), pp::v1::CostModel());
    absl::StatusOr<std::vector<int>> units =
        plan::PartitionUnits(spec.model(), D, "uniform", {}, {});
    EXPECT_TRUE(schedule.ok() && units.ok());
    if (!schedule.ok() || !units.ok()) return {};
    pp::v1::Job placed;
    placed.set_id(job);
    placed.set_attempt(1);
    *placed.mutable_spec() = spec;
    const std::vector<int> stage_to_rank(schedule->stage_to_rank().begin(),
                                         schedule->stage_to_rank().end());
    for (pp::v1::RankPlacement& p : coordinator::MeshRanks(*common::MeshOf(spec), stage_to_rank)) {
      p.set_worker(absl::StrCat("w", p.rank()));
      *placed.add_placement() = std::move(p);
    }
    return coordinator::BuildTaskPlans(placed, *schedule, *units, (dir_ / "checkpoints").string());
  }

  struct Outcome {
    absl::Status status;
    RecordingReporter reporter;
    bool drained = false;
  };

  // Commits the step the ranks' checkpoint reports name, as ppcoord does; the step folder.
  std::string Commit(const std::string& job, const std::vector<Outcome>& outcomes, int step) {
    pp::v1::CheckpointManifest manifest;
    manifest.set_job_id(job);
    manifest.set_step(step);
    for (const Outcome& o : outcomes) {
      for (const pp::v1::CheckpointReport& r : o.reporter.checkpoints) {
        if (r.step() != step) continue;
        EXPECT_TRUE(r.ok()) << r.error();
        *manifest.add_shards() = common::ManifestShard(r);
      }
    }
    const std::string dir = common::StepDir((dir_ / "checkpoints").string(), job, step);
    EXPECT_TRUE(common::CommitManifest(dir, manifest).ok());
    return dir;
  }

  // Every model tensor of the final checkpoint (step kSteps) written by `outcomes`, by name, or
  // with `by_shard` as "SHARD:NAME" (tensor-parallel slices share their whole tensor's name).
  std::map<std::string, std::vector<float>> FinalWeights(const std::string& job,
                                                         const std::vector<Outcome>& outcomes,
                                                         bool by_shard = false) {
    std::map<std::string, std::vector<float>> weights;
    for (const Outcome& o : outcomes) {
      for (const pp::v1::CheckpointReport& r : o.reporter.checkpoints) {
        if (r.step() != kSteps) continue;
        auto shard = common::ReadSafetensors(
            (dir_ / "checkpoints" / job / ("step-" + std::to_string(kSteps)) / r.shard()).string());
        EXPECT_TRUE(shard.ok()) << shard.status();
        if (!shard.ok()) continue;
        for (common::Tensor& t : shard->tensors) {
          weights[by_shard ? r.shard() + ":" + t.name : t.name] = std::move(t.data);
        }
      }
    }
    return weights;
  }

  // Every rank in a thread; reporters answer `stop_after_step`.
  std::vector<Outcome> RunAll(const std::vector<pp::v1::TaskPlan>& plans, int stop_after_step = 0,
                              bool async_checkpoints = true, bool rehearse = true) {
    std::unique_ptr<comm::KvStore> kv = comm::NewMemoryKvStore();
    std::vector<Outcome> outcomes(plans.size());
    std::vector<std::thread> threads;
    for (size_t r = 0; r < plans.size(); ++r) {
      outcomes[r].reporter.stop_after_step = stop_after_step;
      threads.emplace_back([&, r] {
        TaskEnv env;
        env.kv = kv.get();
        env.comm_timeout = absl::Seconds(20);
        env.async_checkpoints = async_checkpoints;
        // What a GPU worker does first (ModelCompute::Rehearse): every schedule below must still
        // train bit for bit what the trainer trains.
        env.rehearse = rehearse;
        Task task(plans[r], env);
        outcomes[r].status = task.Run(outcomes[r].reporter);
        outcomes[r].drained = task.drained();
      });
    }
    for (auto& t : threads) t.join();
    return outcomes;
  }

  void ExpectMatchesTrainer(const pp::v1::JobSpec& spec) {
    std::vector<pp::v1::TaskPlan> plans = Plans(spec);
    std::vector<Outcome> outcomes = RunAll(plans);
    trainer::TrainOptions options;
    absl::StatusOr<trainer::TrainResult> reference = trainer::Train(spec, options);
    ASSERT_TRUE(reference.ok()) << reference.status();

    std::map<std::string, std::vector<float>> weights;
    int loss_reports = 0;
    for (size_t r = 0; r < outcomes.size(); ++r) {
      ASSERT_TRUE(outcomes[r].status.ok()) << outcomes[r].status;
      const RecordingReporter& rep = outcomes[r].reporter;
      ASSERT_EQ(rep.steps.size(), static_cast<size_t>(kSteps));
      for (int k = 0; k < kSteps; ++k) {
        EXPECT_EQ(rep.steps[k].step(), k + 1);
        EXPECT_EQ(rep.steps[k].trace().actions_size(), plans[r].program().actions_size());
        if (!rep.steps[k].has_loss()) continue;
        ++loss_reports;
        const double loss = rep.steps[k].loss();
        EXPECT_EQ(std::memcmp(&loss, &reference->losses[k], sizeof(double)), 0)
            << "step " << k + 1 << ": " << loss << " vs " << reference->losses[k];
      }
      ASSERT_EQ(rep.checkpoints.size(), 1u);
      EXPECT_TRUE(rep.checkpoints[0].ok()) << rep.checkpoints[0].error();
      EXPECT_EQ(rep.checkpoints[0].step(), kSteps);
      auto shard = common::ReadSafetensors(
          (dir_ / "checkpoints" / plans[r].job_id() / ("step-" + std::to_string(kSteps)) /
           rep.checkpoints[0].shard())
              .string());
      ASSERT_TRUE(shard.ok()) << shard.status();
      for (common::Tensor& t : shard->tensors) weights[t.name] = std::move(t.data);
    }
    EXPECT_EQ(loss_reports, kSteps);  // exactly one rank holds the loss
    ExpectBitwiseEqual(weights, reference->weights);
  }

  // Every tensor of `want` is in `got` with the same bits.
  static void ExpectBitwiseEqual(const std::map<std::string, std::vector<float>>& got,
                                 const std::map<std::string, std::vector<float>>& want) {
    for (const auto& [name, values] : want) {
      auto it = got.find(name);
      ASSERT_NE(it, got.end()) << name;
      ASSERT_EQ(it->second.size(), values.size()) << name;
      EXPECT_EQ(std::memcmp(it->second.data(), values.data(), values.size() * sizeof(float)), 0)
          << name;
    }
  }

  std::filesystem::path dir_;
};

TEST_F(TaskTest, GpipeMatchesTrainer) { ExpectMatchesTrainer(Spec("gpipe", 4, 1, 4)); }
TEST_F(TaskTest, OneFOneBMatchesTrainer) { ExpectMatchesTrainer(Spec("1f1b", 4, 1, 8)); }
TEST_F(TaskTest, InterleavedMatchesTrainer) {
  ExpectMatchesTrainer(Spec("interleaved-1f1b", 4, 2, 8));
}
TEST_F(TaskTest, ZbH1MatchesTrainer) { ExpectMatchesTrainer(Spec("zb-h1", 4, 1, 8)); }
TEST_F(TaskTest, ZbVMatchesTrainer) { ExpectMatchesTrainer(Spec("zb-v", 4, 2, 8)); }

// Packed variable-length microbatches (common/packing.h) with the rehearsal of rows of every power
// of two: the losses and weights of the trainer, bit for bit.
TEST_F(TaskTest, PackedMicrobatchesRehearsedMatchTrainer) {
  pp::v1::JobSpec spec = Spec("zb-v", 4, 2, 8);
  std::ifstream corpus(spec.data().path(), std::ios::binary);
  std::string text(std::istreambuf_iterator<char>(corpus), {});
  for (size_t at = 3, i = 0; at < text.size(); at += 1 + (i++ * 7) % 29) text[at] = '\0';
  const std::string path = (dir_ / "documents.bin").string();
  std::ofstream(path, std::ios::binary) << text;
  spec.mutable_data()->set_path(path);
  spec.mutable_data()->set_documents("mask");
  spec.mutable_model()->set_positions("document");
  spec.mutable_train()->set_microbatch_size(1);
  spec.mutable_train()->set_tokens_per_microbatch(40);
  ASSERT_TRUE(common::ValidateJobSpec(spec).ok()) << common::ValidateJobSpec(spec);
  ExpectMatchesTrainer(spec);
}

// A GPU worker rehearses its stages before the pipeline connects; on a mesh that runs the tensor-
// parallel collectives too, and must leave nothing behind: DP2 x PP2 x TP2 trains the same losses
// and weights, bit for bit, with and without it.
TEST_F(TaskTest, RehearsalChangesNothingOnAMesh) {
  pp::v1::JobSpec spec = Spec("1f1b", 2, 1, 4);
  spec.mutable_parallel()->set_data(2);
  spec.mutable_parallel()->set_tensor(2);
  ASSERT_TRUE(common::ValidateJobSpec(spec).ok()) << common::ValidateJobSpec(spec);
  std::map<bool, std::vector<double>> losses;
  std::map<bool, std::map<std::string, std::vector<float>>> weights;
  for (const bool rehearse : {false, true}) {
    const std::string job = rehearse ? "rehearsed" : "plain";
    const std::vector<pp::v1::TaskPlan> plans = MeshPlans(spec, job);
    ASSERT_EQ(plans.size(), 8u);
    const std::vector<Outcome> outcomes = RunAll(plans, 0, true, rehearse);
    for (const Outcome& o : outcomes) {
      ASSERT_TRUE(o.status.ok()) << o.status;
      for (const pp::v1::StepReport& step : o.reporter.steps) {
        if (step.has_loss()) losses[rehearse].push_back(step.loss());
      }
    }
    weights[rehearse] = FinalWeights(job, outcomes, /*by_shard=*/true);
  }
  ASSERT_FALSE(losses[false].empty());
  ASSERT_EQ(losses[true].size(), losses[false].size());
  EXPECT_EQ(
      std::memcmp(losses[true].data(), losses[false].data(), losses[false].size() * sizeof(double)),
      0);
  ASSERT_FALSE(weights[false].empty());
  EXPECT_EQ(weights[true].size(), weights[false].size());
  ExpectBitwiseEqual(weights[true], weights[false]);
}

TEST_F(TaskTest, MissingPeerFailsTheTaskWithinTheTimeout) {
  std::vector<pp::v1::TaskPlan> plans = Plans(Spec("1f1b", 2, 1, 2));
  std::unique_ptr<comm::KvStore> kv = comm::NewMemoryKvStore();
  TaskEnv env;
  env.kv = kv.get();
  env.comm_timeout = absl::Milliseconds(500);
  Task task(plans[0], env);
  RecordingReporter reporter;
  absl::Status status = task.Run(reporter);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_NE(status.message().find("job job-1f1b rank 0"), std::string::npos) << status;
  EXPECT_NE(status.message().find("rendezvous"), std::string::npos) << status;
}

TEST_F(TaskTest, BadPlanIsRefused) {
  std::vector<pp::v1::TaskPlan> plans = Plans(Spec("1f1b", 2, 1, 2));
  plans[0].set_rank(5);
  TaskEnv env;
  std::unique_ptr<comm::KvStore> kv = comm::NewMemoryKvStore();
  env.kv = kv.get();
  RecordingReporter reporter;
  absl::Status status = Task(plans[0], env).Run(reporter);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("rank 5 outside world size 2"), std::string::npos) << status;
}

TEST_F(TaskTest, StopAtACommonStepThenResumeOnAnotherLayoutIsBitwiseEqual) {
  // 1F1B on D=4 stops after step 1 (a drain), checkpointing there; interleaved 1F1B on D=2, V=2
  // resumes from that checkpoint and finishes.
  const pp::v1::JobSpec first = Spec("1f1b", 4, 1, 4);
  std::vector<Outcome> stopped = RunAll(Plans(first), /*stop_after_step=*/1);
  for (const Outcome& o : stopped) {
    ASSERT_TRUE(o.status.ok()) << o.status;
    EXPECT_TRUE(o.drained);
    ASSERT_EQ(o.reporter.steps.size(), 1u);
    ASSERT_EQ(o.reporter.checkpoints.size(), 1u);
    EXPECT_EQ(o.reporter.checkpoints[0].step(), 1);
  }
  const std::string step_dir = Commit("job-1f1b", stopped, 1);
  absl::StatusOr<common::Checkpoint> saved = common::LoadCheckpoint(step_dir);
  ASSERT_TRUE(saved.ok()) << saved.status();
  // Each shard carries where the next step starts.
  absl::StatusOr<common::SafetensorsFile> shard =
      common::ReadSafetensors(step_dir + "/" + common::ShardFileName(0));
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_EQ(shard->metadata["step"], "1");
  EXPECT_EQ(shard->metadata["data_position"], std::to_string(common::DataPositionAtStep(1, 4, 2)));

  const pp::v1::JobSpec second = Spec("interleaved-1f1b", 2, 2, 4);
  std::vector<pp::v1::TaskPlan> plans = Plans(second);
  for (pp::v1::TaskPlan& plan : plans) {
    plan.set_start_step(1);
    plan.set_resume_from(step_dir);
  }
  std::vector<Outcome> resumed = RunAll(plans);
  absl::StatusOr<trainer::TrainResult> reference = trainer::Train(first, trainer::TrainOptions());
  ASSERT_TRUE(reference.ok()) << reference.status();
  std::vector<double> losses;
  for (const std::vector<Outcome>* run : {&stopped, &resumed}) {
    for (const Outcome& o : *run) {
      ASSERT_TRUE(o.status.ok()) << o.status;
      for (const pp::v1::StepReport& r : o.reporter.steps) {
        if (r.has_loss()) losses.push_back(r.loss());
      }
    }
  }
  ASSERT_EQ(losses.size(), reference->losses.size());
  EXPECT_EQ(std::memcmp(losses.data(), reference->losses.data(), losses.size() * sizeof(double)),
            0);
  ExpectBitwiseEqual(FinalWeights("job-interleaved-1f1b", resumed), reference->weights);
}

TEST_F(TaskTest, ResumeRefusesAStepOtherThanTheCheckpoints) {
  const pp::v1::JobSpec spec = Spec("gpipe", 1, 1, 2);
  std::vector<Outcome> first = RunAll(Plans(spec));
  ASSERT_TRUE(first[0].status.ok()) << first[0].status;
  const std::string step_dir = Commit("job-gpipe", first, kSteps);
  std::vector<pp::v1::TaskPlan> plans = Plans(spec);
  plans[0].set_start_step(1);
  plans[0].set_resume_from(step_dir);
  std::vector<Outcome> resumed = RunAll(plans);
  EXPECT_EQ(resumed[0].status.code(), absl::StatusCode::kInvalidArgument) << resumed[0].status;
  EXPECT_NE(resumed[0].status.message().find("holds step 3"), std::string::npos)
      << resumed[0].status;
}

TEST_F(TaskTest, SyncAndAsyncCheckpointsHoldTheSameTensors) {
  pp::v1::JobSpec spec = Spec("1f1b", 2, 1, 2);
  spec.mutable_checkpoint()->set_every_steps(1);
  for (bool async : {false, true}) {
    std::vector<pp::v1::TaskPlan> plans = Plans(spec);
    for (pp::v1::TaskPlan& plan : plans) plan.set_job_id(async ? "async" : "sync");
    for (const Outcome& o : RunAll(plans, 0, async)) {
      ASSERT_TRUE(o.status.ok()) << o.status;
      ASSERT_EQ(o.reporter.checkpoints.size(), static_cast<size_t>(kSteps));
      for (int k = 0; k < kSteps; ++k) {
        EXPECT_EQ(o.reporter.checkpoints[k].step(), k + 1);  // in step order
        EXPECT_TRUE(o.reporter.checkpoints[k].ok()) << o.reporter.checkpoints[k].error();
      }
    }
  }
  for (int step = 1; step <= kSteps; ++step) {
    for (int rank = 0; rank < 2; ++rank) {
      const std::string file = "step-" + std::to_string(step) + "/" + common::ShardFileName(rank);
      auto sync = common::ReadSafetensors((dir_ / "checkpoints" / "sync" / file).string());
      auto async = common::ReadSafetensors((dir_ / "checkpoints" / "async" / file).string());
      ASSERT_TRUE(sync.ok() && async.ok()) << file;
      ASSERT_EQ(sync->tensors.size(), async->tensors.size()) << file;
      for (size_t i = 0; i < sync->tensors.size(); ++i) {
        EXPECT_EQ(sync->tensors[i].name, async->tensors[i].name);
        EXPECT_EQ(sync->tensors[i].data, async->tensors[i].data)
            << file << " " << sync->tensors[i].name;
      }
      EXPECT_EQ(sync->metadata["data_position"], async->metadata["data_position"]);
    }
  }
}

TEST_F(TaskTest, ReporterCanStopTheTask) {
  pp::v1::JobSpec spec = Spec("gpipe", 1, 1, 2);
  std::vector<pp::v1::TaskPlan> plans = Plans(spec);
  std::unique_ptr<comm::KvStore> kv = comm::NewMemoryKvStore();
  TaskEnv env;
  env.kv = kv.get();
  Task task(plans[0], env);
  RecordingReporter reporter;
  reporter.keep_going = false;
  absl::Status status = task.Run(reporter);
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted) << status;
  EXPECT_EQ(reporter.steps.size(), 1u);
  EXPECT_EQ(task.completed_steps(), 1);
}

}  // namespace
}  // namespace pp::daemon
