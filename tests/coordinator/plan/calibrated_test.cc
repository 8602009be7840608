#include "coordinator/plan/calibrated.h"

#include <cmath>
#include <iostream>
#include <numeric>
#include <string>

#include "common/job_spec.h"
#include "coordinator/plan/calibrated_hosts.h"
#include "coordinator/plan/plan.h"
#include "gtest/gtest.h"
#include "program/schedules.h"

namespace pp::plan {
namespace {

// `layers` blocks of C=128 over D=4 ranks, `batch` sequences a step (8 blocks and 16 unless
// given).
pp::v1::JobSpec AutoSpec(int layers = 8, int batch = 16) {
  pp::v1::JobSpec spec;
  pp::v1::ModelSpec* m = spec.mutable_model();
  m->set_vocab_size(256);
  m->set_seq_len(64);
  m->set_d_model(128);
  m->set_n_heads(4);
  m->set_n_layers(layers);
  spec.mutable_parallel()->set_pipeline(4);
  spec.mutable_parallel()->set_schedule("auto");
  spec.mutable_train()->set_steps(10);
  spec.mutable_train()->set_microbatches(batch / 2);
  spec.mutable_train()->set_microbatch_size(2);
  spec.mutable_train()->set_lr(1e-3);
  common::ApplyDefaults(&spec);
  return spec;
}

struct Speeds {
  double per_sequence = 1e-3;  // a block's forward per sequence, seconds
  double per_action = 2e-4;    // fixed cost of any action
};

// Backward = 2 x forward, split evenly into I and W; the head costs 1.5 blocks, the embedding
// 0.1 of one; each unit's optimizer 0.1 ms.
pp::v1::RankCalibration Rank(int rank, const std::vector<int>& sizes, Speeds speeds) {
  pp::v1::RankCalibration out;
  out.set_rank(rank);
  for (const auto& [kind, weight] :
       {std::pair<const char*, double>{"embedding", 0.1}, {"block", 1}, {"head", 1.5}}) {
    for (int n : sizes) {
      pp::v1::UnitCost* c = out.add_units();
      c->set_unit(kind);
      c->set_sequences(n);
      const double f = speeds.per_action + weight * n * speeds.per_sequence;
      c->set_forward(f);
      c->set_backward(2 * f);
      c->set_backward_input(f);
      c->set_backward_weight(f);
      c->set_optimizer(1e-4);
    }
  }
  return out;
}

pp::v1::Calibration Calibrate(const pp::v1::JobSpec& spec, double latency, double bandwidth,
                              std::vector<Speeds> speeds = {}) {
  speeds.resize(spec.parallel().pipeline());
  pp::v1::Calibration calibration;
  const std::vector<int> sizes = CalibrationSequences(spec);
  for (int r = 0; r < spec.parallel().pipeline(); ++r) {
    pp::v1::RankCalibration* rank = calibration.add_ranks();
    *rank = Rank(r, sizes, speeds[r]);
    rank->set_link_latency_seconds(latency);
    rank->set_link_bytes_per_second(bandwidth);
  }
  return calibration;
}

TEST(CalibratedTest, SizesAreTheGlobalBatchOverEveryDivisor) {
  EXPECT_EQ(CalibrationSequences(AutoSpec()), (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(CalibrationSequences(AutoSpec(), 4), (std::vector<int>{4}));
}

TEST(CalibratedTest, RecordsTheChoiceInTheSpec) {
  const pp::v1::JobSpec spec = AutoSpec();
  const pp::v1::Calibration calibration = Calibrate(spec, 1e-5, 1e10);
  absl::StatusOr<CalibratedPlan> plan = ChooseCalibrated(spec, calibration);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const pp::v1::JobSpec& chosen = plan->spec;
  absl::StatusOr<double> again = PredictStepSeconds(chosen, calibration);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, plan->predicted_step_seconds);
  EXPECT_NE(chosen.parallel().schedule(), "auto");
  EXPECT_EQ(chosen.parallel().partition(), "explicit");
  EXPECT_EQ(chosen.parallel().stage_layers_size(),
            chosen.parallel().pipeline() * chosen.parallel().chunks());
  EXPECT_EQ(std::accumulate(chosen.parallel().stage_layers().begin(),
                            chosen.parallel().stage_layers().end(), 0),
            10);
  EXPECT_EQ(chosen.train().microbatches() * chosen.train().microbatch_size(), 16);
  EXPECT_EQ(plan->chosen.rfind(chosen.parallel().schedule() + " V=", 0), 0u) << plan->chosen;
  EXPECT_GT(plan->predicted_step_seconds, 0);
  EXPECT_GT(plan->candidates, 50);
  ASSERT_FALSE(plan->runner_up.empty());
  EXPECT_GE(plan->runner_up_step_seconds, plan->predicted_step_seconds);
  EXPECT_NE(plan->runner_up_reason.find("slower"), std::string::npos) << plan->runner_up_reason;
  EXPECT_EQ(plan->reason.rfind("schedule auto chose " + plan->chosen, 0), 0u) << plan->reason;
}

// The seed's advice, reproduced from measurements: plenty of bandwidth -> more chunks; little
// bandwidth -> fewer chunks or no interleaving (each extra chunk adds D boundary transfers).
// A deep model and a small batch (M <= D: a large 1F1B bubble) make chunks worth having.
TEST(CalibratedTest, ASlowLinkChoosesFewerChunksThanAFastOne) {
  const pp::v1::JobSpec spec = AutoSpec(/*layers=*/14, /*batch=*/4);
  const Speeds speeds{.per_sequence = 1e-3, .per_action = 2e-5};
  absl::StatusOr<CalibratedPlan> fast =
      ChooseCalibrated(spec, Calibrate(spec, 2e-5, 5e9, {speeds, speeds, speeds, speeds}));
  absl::StatusOr<CalibratedPlan> slow = ChooseCalibrated(
      spec, Calibrate(spec, 2e-3, 50e6 / 8, {speeds, speeds, speeds, speeds}));
  ASSERT_TRUE(fast.ok()) << fast.status();
  ASSERT_TRUE(slow.ok()) << slow.status();
  EXPECT_GT(fast->spec.parallel().chunks(), 1) << fast->chosen;
  EXPECT_LT(slow->spec.parallel().chunks(), fast->spec.parallel().chunks())
      << "fast: " << fast->chosen << "\nslow: " << slow->chosen;
  EXPECT_GT(slow->predicted_step_seconds, fast->predicted_step_seconds);
}

// Trial steps: the overheads a running plan showed, fitted into the calibration, with the
// per-action overhead that stretches the plan's simulated makespan to its traced span, and its
// tail.
TEST(CalibratedTest, ARefitPredictsTheTrialPlansOwnSpanPlusItsTail) {
  const pp::v1::JobSpec spec = AutoSpec();
  const pp::v1::Calibration calibration = Calibrate(spec, 1e-5, 1e10);
  absl::StatusOr<CalibratedPlan> plan = ChooseCalibrated(spec, calibration);
  ASSERT_TRUE(plan.ok()) << plan.status();
  pp::v1::StepOverheads overheads;
  overheads.set_send_seconds(1e-4);
  overheads.set_latency_seconds(1e-3);
  overheads.set_tail_seconds(0.01);
  overheads.set_span_seconds(1.2 * plan->predicted_step_seconds);
  absl::StatusOr<Refit> refit = RefitWithTrial(plan->spec, calibration, overheads);
  ASSERT_TRUE(refit.ok()) << refit.status();
  EXPECT_NEAR(refit->predicted_step_seconds, overheads.span_seconds() + 0.01,
              1e-3 * overheads.span_seconds());
  const pp::v1::StepOverheads& trial = refit->calibration.trial();
  EXPECT_GT(trial.action_seconds(), 0);
  EXPECT_EQ(trial.tail_seconds(), 0.01);
  absl::StatusOr<double> again = PredictStepSeconds(plan->spec, refit->calibration);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_NEAR(*again, refit->predicted_step_seconds, 1e-12);
  // A longer span needs more per action; one the overheads alone exceed needs none.
  overheads.set_span_seconds(2 * plan->predicted_step_seconds);
  absl::StatusOr<Refit> longer = RefitWithTrial(plan->spec, calibration, overheads);
  ASSERT_TRUE(longer.ok()) << longer.status();
  EXPECT_GT(longer->calibration.trial().action_seconds(), trial.action_seconds());
  overheads.set_span_seconds(0.01 * plan->predicted_step_seconds);
  absl::StatusOr<Refit> shorter = RefitWithTrial(plan->spec, calibration, overheads);
  ASSERT_TRUE(shorter.ok()) << shorter.status();
  EXPECT_EQ(shorter->calibration.trial().action_seconds(), 0);
  // Hostile figures are refused like a worker's.
  pp::v1::Calibration bad = longer->calibration;
  bad.mutable_trial()->set_latency_seconds(std::nan(""));
  EXPECT_EQ(PredictStepSeconds(plan->spec, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  bad.mutable_trial()->set_latency_seconds(0);
  bad.mutable_trial()->set_action_seconds(-1);
  EXPECT_EQ(ChooseCalibrated(spec, bad).status().code(), absl::StatusCode::kInvalidArgument);
}

// What re-plans after trial steps: messages that wait for a wake-up on a loaded machine make
// every extra chunk's messages cost, so at the same M the choice moves to fewer chunks.
TEST(CalibratedTest, SlowMessagesInTheTrialChooseFewerChunksAtTheSameM) {
  const pp::v1::JobSpec spec = AutoSpec(/*layers=*/14, /*batch=*/4);
  const Speeds speeds{.per_sequence = 1e-3, .per_action = 2e-5};
  pp::v1::Calibration calibration = Calibrate(spec, 2e-5, 5e9, {speeds, speeds, speeds, speeds});
  absl::StatusOr<CalibratedPlan> before = ChooseCalibrated(spec, calibration);
  ASSERT_TRUE(before.ok()) << before.status();
  ASSERT_GT(before->spec.parallel().chunks(), 1) << before->chosen;
  pp::v1::StepOverheads* trial = calibration.mutable_trial();
  trial->set_latency_seconds(2e-3);
  trial->set_send_seconds(5e-4);
  trial->set_tail_seconds(0.01);
  absl::StatusOr<CalibratedPlan> after =
      ChooseCalibrated(spec, calibration, before->spec.train().microbatches());
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->spec.train().microbatches(), before->spec.train().microbatches());
  EXPECT_LT(after->spec.parallel().chunks(), before->spec.parallel().chunks())
      << "before: " << before->chosen << "\nafter: " << after->chosen;
  EXPECT_NE(after->reason.find("from 0 trial steps"), std::string::npos) << after->reason;
}

// A worker three times slower holds fewer units.
TEST(CalibratedTest, ASlowRankGetsLessOfTheModel) {
  pp::v1::JobSpec spec = AutoSpec();
  spec.mutable_parallel()->set_chunks(1);  // V fixed: one stage a rank
  absl::StatusOr<CalibratedPlan> plan = ChooseCalibrated(
      spec, Calibrate(spec, 1e-5, 1e10, {{}, {.per_sequence = 3e-3, .per_action = 6e-4}}));
  ASSERT_TRUE(plan.ok()) << plan.status();
  const auto& layers = plan->spec.parallel().stage_layers();
  ASSERT_EQ(layers.size(), 4);
  EXPECT_EQ(plan->spec.parallel().chunks(), 1);
  for (int s : {0, 2, 3}) EXPECT_LT(layers[1], layers[s]) << plan->chosen;
}

TEST(CalibratedTest, ARePlanKeepsItsMicrobatches) {
  const pp::v1::JobSpec spec = AutoSpec();
  pp::v1::Calibration calibration = Calibrate(spec, 1e-5, 1e10);
  absl::StatusOr<CalibratedPlan> plan = ChooseCalibrated(spec, calibration, 4);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->spec.train().microbatches(), 4);
  EXPECT_EQ(plan->spec.train().microbatch_size(), 4);
}

TEST(CalibratedTest, TightMemoryRecomputesOrRefuses) {
  const pp::v1::JobSpec spec = AutoSpec();
  pp::v1::Calibration roomy = Calibrate(spec, 1e-5, 1e10);
  for (pp::v1::RankCalibration& r : *roomy.mutable_ranks()) r.set_free_memory_bytes(1LL << 40);
  absl::StatusOr<CalibratedPlan> fits = ChooseCalibrated(spec, roomy);
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_EQ(fits->spec.parallel().recompute(), "none");
  pp::v1::Calibration tiny = roomy;
  for (pp::v1::RankCalibration& r : *tiny.mutable_ranks()) r.set_free_memory_bytes(1000);
  absl::StatusOr<CalibratedPlan> refused = ChooseCalibrated(spec, tiny);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("its worker has"), std::string::npos)
      << refused.status();
}

TEST(CalibratedTest, RefusesACalibrationThatDoesNotCoverTheJob) {
  const pp::v1::JobSpec spec = AutoSpec();
  pp::v1::Calibration calibration = Calibrate(spec, 1e-5, 1e10);
  calibration.mutable_ranks()->RemoveLast();
  EXPECT_EQ(ChooseCalibrated(spec, calibration).status().code(),
            absl::StatusCode::kInvalidArgument);
  pp::v1::Calibration nan = Calibrate(spec, 1e-5, 1e10);
  nan.mutable_ranks(2)->mutable_units(3)->set_backward(std::nan(""));
  EXPECT_EQ(ChooseCalibrated(spec, nan).status().code(), absl::StatusCode::kInvalidArgument);
  pp::v1::Calibration negative = Calibrate(spec, -1, 1e10);
  EXPECT_EQ(ChooseCalibrated(spec, negative).status().code(), absl::StatusCode::kInvalidArgument);
  pp::v1::Calibration empty = Calibrate(spec, 1e-5, 1e10);
  for (pp::v1::RankCalibration& r : *empty.mutable_ranks()) r.clear_units();
  EXPECT_EQ(ChooseCalibrated(spec, empty).status().code(), absl::StatusCode::kInvalidArgument);
}

// Every rank on `machines[r]` with `cores` cores (an empty name: a worker that did not say).
pp::v1::Calibration OnMachines(pp::v1::Calibration calibration,
                               const std::vector<std::string>& machines, int cores) {
  for (pp::v1::RankCalibration& rank : *calibration.mutable_ranks()) {
    rank.set_machine(machines[rank.rank()]);
    rank.set_cores(cores);
  }
  return calibration;
}

const std::vector<std::string> kOneMachine = {"boot:a", "boot:a", "boot:a", "boot:a"};
const std::vector<std::string> kFourMachines = {"boot:a", "boot:b", "boot:c", "boot:d"};

TEST(CalibratedHostsTest, GroupsRanksByMachineAndScalesTheirCalibration) {
  const pp::v1::JobSpec spec = AutoSpec();
  const pp::v1::Calibration base = Calibrate(spec, 1e-5, 1e10);
  const CalibratedHosts one = HostsOf(OnMachines(base, kOneMachine, 2), 4, 1);
  EXPECT_EQ(one.rank_host, (std::vector<int>{0, 0, 0, 0}));
  EXPECT_EQ(one.host_cores, (std::vector<int>{2}));
  EXPECT_EQ(one.calibration_rate, (std::vector<double>{0.5, 0.5, 0.5, 0.5}));
  EXPECT_EQ(one.summary, "4 ranks on 2 cores (ranks 0,1,2,3 on one machine)");
  // Two threads a rank: two cores hold one rank at full speed.
  const CalibratedHosts threaded = HostsOf(OnMachines(base, kOneMachine, 2), 4, 2);
  EXPECT_EQ(threaded.host_cores, (std::vector<int>{1}));
  EXPECT_EQ(threaded.calibration_rate[0], 0.25);
  EXPECT_EQ(threaded.summary, "4 ranks on 2 cores (ranks 0,1,2,3 on one machine, 2 threads each)");
  const CalibratedHosts four = HostsOf(OnMachines(base, kFourMachines, 2), 4, 1);
  EXPECT_EQ(four.rank_host, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(four.calibration_rate, (std::vector<double>{1, 1, 1, 1}));
  EXPECT_EQ(four.summary, "");
  // Workers that did not say (empty machine, no cores) are alone: today's model.
  const CalibratedHosts unknown = HostsOf(base, 4, 1);
  EXPECT_EQ(unknown.rank_host, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(unknown.summary, "");
  pp::v1::Calibration mixed = OnMachines(base, {"boot:a", "boot:a", "", "boot:a"}, 1);
  mixed.mutable_ranks(3)->set_cores(-5);  // hostile: unknown
  const CalibratedHosts partly = HostsOf(mixed, 4, 1);
  EXPECT_EQ(partly.rank_host, (std::vector<int>{0, 0, 1, 2}));
  EXPECT_EQ(partly.host_cores, (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(partly.summary, "2 ranks on 1 cores (ranks 0,1 on one machine)");
}

// The same work alone: four ranks on two cores were timed at half speed (2x the times), four
// separate processors at full speed. Sharing makes the step longer than on four processors, but
// never longer than the old model, which charged every action the calibration's full contention.
TEST(CalibratedTest, FourRanksOnTwoCoresPredictALongerStepThanFourProcessors) {
  const pp::v1::JobSpec spec = AutoSpec();
  const Speeds alone{};
  const Speeds contended{.per_sequence = 2 * alone.per_sequence,
                         .per_action = 2 * alone.per_action};
  const pp::v1::Calibration separate =
      OnMachines(Calibrate(spec, 1e-5, 1e10), kFourMachines, 2);
  const pp::v1::Calibration timed_shared =
      Calibrate(spec, 1e-5, 1e10, {contended, contended, contended, contended});
  const pp::v1::Calibration shared = OnMachines(timed_shared, kOneMachine, 2);
  absl::StatusOr<CalibratedPlan> on_four = ChooseCalibrated(spec, separate);
  absl::StatusOr<CalibratedPlan> on_two = ChooseCalibrated(spec, shared);
  ASSERT_TRUE(on_four.ok()) << on_four.status();
  ASSERT_TRUE(on_two.ok()) << on_two.status();
  EXPECT_GT(on_two->predicted_step_seconds, on_four->predicted_step_seconds);
  EXPECT_NE(on_two->reason.find("4 ranks on 2 cores"), std::string::npos) << on_two->reason;
  EXPECT_EQ(on_four->reason.find("cores"), std::string::npos) << on_four->reason;
  for (const CalibratedPlan* plan : {&*on_four, &*on_two}) {
    absl::StatusOr<double> four = PredictStepSeconds(plan->spec, separate);
    absl::StatusOr<double> two = PredictStepSeconds(plan->spec, shared);
    absl::StatusOr<double> old = PredictStepSeconds(plan->spec, timed_shared);
    ASSERT_TRUE(four.ok() && two.ok() && old.ok()) << plan->chosen;
    EXPECT_GT(*two, *four) << plan->chosen;
    EXPECT_LE(*two, *old) << plan->chosen;
  }
}

// The shortest predicted step under sharing: no fixed layout a user could write (every training
// schedule, V 1..2, M 4..16, uniform partition) is predicted shorter on the shared machine, and
// the plan chosen without knowing about the sharing is longer.
TEST(CalibratedTest, ChoosesTheShortestStepUnderSharing) {
  const pp::v1::JobSpec spec = AutoSpec();
  const Speeds contended{.per_sequence = 2e-3, .per_action = 4e-4};
  const pp::v1::Calibration blind =
      Calibrate(spec, 1e-5, 1e10, {contended, contended, contended, contended});
  const pp::v1::Calibration shared = OnMachines(blind, kOneMachine, 2);
  absl::StatusOr<CalibratedPlan> plan = ChooseCalibrated(spec, shared);
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<double> again = PredictStepSeconds(plan->spec, shared);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, plan->predicted_step_seconds);
  int compared = 0;
  for (const std::string& name : prog::TrainingScheduleNames()) {
    for (int V : {1, 2}) {
      for (int M : {4, 8, 16}) {
        pp::v1::JobSpec fixed = plan->spec;
        fixed.mutable_parallel()->set_schedule(name);
        fixed.mutable_parallel()->set_chunks(V);
        fixed.mutable_parallel()->set_recompute("none");
        fixed.mutable_train()->set_microbatches(M);
        fixed.mutable_train()->set_microbatch_size(16 / M);
        absl::StatusOr<std::vector<int>> units =
            PartitionUnits(spec.model(), 4 * V, "uniform", {}, {});
        ASSERT_TRUE(units.ok()) << units.status();
        fixed.mutable_parallel()->mutable_stage_layers()->Assign(units->begin(), units->end());
        absl::StatusOr<double> step = PredictStepSeconds(fixed, shared);
        if (!step.ok()) continue;  // a V or M the schedule refuses
        ++compared;
        EXPECT_GE(*step, plan->predicted_step_seconds)
            << name << " V=" << V << " M=" << M << " against " << plan->chosen;
      }
    }
  }
  EXPECT_GT(compared, 20);
  absl::StatusOr<CalibratedPlan> unaware = ChooseCalibrated(spec, blind);
  ASSERT_TRUE(unaware.ok()) << unaware.status();
  absl::StatusOr<double> unaware_shared = PredictStepSeconds(unaware->spec, shared);
  ASSERT_TRUE(unaware_shared.ok()) << unaware_shared.status();
  // Here the sharing changes the choice: fewer, larger microbatches (fewer actions), as the
  // ranks fill each other's bubbles.
  EXPECT_GT(*unaware_shared, plan->predicted_step_seconds) << unaware->chosen;
  std::cout << "shared: " << plan->chosen << " " << plan->predicted_step_seconds
            << "; chosen unaware: " << unaware->chosen << " " << unaware_shared.value()
            << " (predicted unaware " << unaware->predicted_step_seconds << ")\n";
}

}  // namespace
}  // namespace pp::plan
