// What the schedule-size bound of common/spec_bounds.h promises about the real planner and
// ppcoord's messages: MaxActionsPerRank bounds every lowered rank program of every schedule (and a
// pipeline's middle ranks reach it), and a job at kMaxActionsPerStep still fits each message it
// makes (a rank's TaskPlan, the whole step's measured trace, the PlanJob answer) in gRPC's
// default 4 MiB, while one microbatch more is refused. And ppcoord's resume of a job stored without
// these bounds takes its sizes in int64.
#include <algorithm>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/mesh.h"
#include "common/spec_bounds.h"
#include "coordinator/placement.h"
#include "coordinator/plan/plan.h"
#include "coordinator/planning.h"
#include "coordinator/resume_logic.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "program/schedules.h"

namespace pp::common {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr size_t kGrpcMessageLimit = 4 << 20;  // gRPC's default maximum received message

TEST(SpecBoundsPlanTest, MaxActionsPerRankBoundsEveryLoweredProgram) {
  int planned = 0;
  for (const std::string& name : prog::ScheduleNames()) {
    const prog::ScheduleKind& rule = *prog::FindSchedule(name);
    const int max_chunks = rule.max_chunks == 0 ? 3 : rule.max_chunks;
    for (int D = 1; D <= 5; ++D) {
      for (int V = rule.min_chunks; V <= max_chunks; ++V) {
        for (int M : {1, D, D + 1, 2 * D + 1, 4 * D}) {
          if (rule.constraints != nullptr && !rule.constraints(D, V, M).ok()) continue;
          absl::StatusOr<pp::v1::Schedule> schedule =
              pp::plan::PlanSchedule(name, D, V, M, coordinator::PlanningCosts());
          if (!schedule.ok()) continue;  // a combination the generator refuses
          ++planned;
          SCOPED_TRACE(absl::StrCat(name, " D=", D, " V=", V, " M=", M));
          int64_t longest = 0;
          for (const pp::v1::RankProgram& program : schedule->ranks()) {
            longest = std::max<int64_t>(longest, program.actions_size());
          }
          const std::optional<int64_t> bound = MaxActionsPerRank(name, D, V, M);
          ASSERT_TRUE(bound.has_value());
          EXPECT_LE(longest, *bound);
          // Tight where a middle rank receives and sends around every stage it holds, and
          // where nothing communicates; dualpipe-v splits only some backwards, so it stays below.
          if ((D >= 3 || D == 1) && name != "dualpipe-v") {
            EXPECT_EQ(longest, *bound);
          }
        }
      }
    }
  }
  EXPECT_GT(planned, 50);
}

// A spec on `schedule` over D ranks, V chunks, M microbatches and `data` replicas, on generated
// data (no file needed).
pp::v1::JobSpec Layout(const std::string& schedule, int D, int V, int M, int data = 1) {
  pp::v1::JobSpec spec;
  spec.set_name("limit");
  pp::v1::ModelSpec* model = spec.mutable_model();
  model->set_vocab_size(256);
  model->set_seq_len(16);
  model->set_d_model(32);
  model->set_n_heads(2);
  model->set_n_layers(std::max(2, D * V - 2));
  spec.mutable_parallel()->set_schedule(schedule);
  spec.mutable_parallel()->set_pipeline(D);
  spec.mutable_parallel()->set_chunks(V);
  spec.mutable_parallel()->set_data(data);
  spec.mutable_train()->set_steps(1);
  spec.mutable_train()->set_microbatches(M);
  spec.mutable_train()->set_microbatch_size(1);
  spec.mutable_data()->set_format("generated");
  return spec;
}

// The sizes of the messages a placed job makes: the largest TaskPlan, the StepTrace of one step
// (every rank's measured actions, as GetTrace answers), and PlanJob's answer.
struct MessageSizes {
  size_t task_plan = 0;
  size_t step_trace = 0;
  size_t plan_job = 0;
};

MessageSizes SizesOf(const coordinator::PlannedJob& planned) {
  pp::v1::Job job;
  job.set_id("limit-1");
  job.set_attempt(3);
  *job.mutable_spec() = planned.spec;
  const std::vector<int> stage_to_rank(planned.schedule.stage_to_rank().begin(),
                                       planned.schedule.stage_to_rank().end());
  for (pp::v1::RankPlacement& p : coordinator::MeshRanks(*MeshOf(planned.spec), stage_to_rank)) {
    p.set_worker(absl::StrCat("worker-", p.rank()));
    p.set_address(absl::StrCat("10.0.0.1:", 40000 + p.rank()));
    *job.add_placement() = std::move(p);
  }
  MessageSizes sizes;
  pp::v1::StepTrace trace;
  trace.set_job_id(job.id());
  trace.set_step(123456);
  for (const pp::v1::TaskPlan& plan : coordinator::BuildTaskPlans(
           job, planned.schedule, planned.stage_units, "/var/lib/ppcoord/checkpoints")) {
    sizes.task_plan = std::max(sizes.task_plan, plan.ByteSizeLong());
    pp::v1::RankTrace* rank = trace.add_ranks();
    rank->set_rank(plan.rank());
    double t = 0.0123456789;
    for (const pp::v1::Action& action : plan.program().actions()) {
      pp::v1::TimedAction* timed = rank->add_actions();
      *timed->mutable_action() = action;
      timed->set_start(t);
      timed->set_end(t += 0.000987654321);
    }
  }
  sizes.step_trace = trace.ByteSizeLong();
  pp::v1::PlanJobResponse answer;
  *answer.mutable_schedule() = planned.schedule;
  answer.mutable_stage_layers()->Assign(planned.stage_units.begin(), planned.stage_units.end());
  absl::StatusOr<std::string> ascii =
      pp::plan::RenderScheduleAscii(planned.schedule, coordinator::PlanningCosts());
  if (ascii.ok()) answer.set_ascii(*ascii);
  for (const pp::v1::RankPlacement& p : job.placement()) *answer.add_ranks() = p;
  sizes.plan_job = answer.ByteSizeLong();
  return sizes;
}

TEST(SpecBoundsPlanTest, AJobAtTheActionLimitFitsEveryMessageAndMoreMicrobatchesAreRefused) {
  const std::vector<pp::v1::JobSpec> cases = {
      Layout("gpipe", 1, 1, 32768),              // one rank, 2 x 32768 actions
      Layout("1f1b", 4, 1, 2730),                // 4 x 6 x 2730 = 65520
      Layout("zb-v", 4, 2, 1170),                // 4 x 2 x 7 x 1170 = 65520
      Layout("interleaved-1f1b", 4, 2, 340, 4),  // 16 x 2 x 6 x 340 = 65280
      Layout("1f1b", 1024, 1, 10),               // 1024 x 6 x 10 = 61440, 1024 stages
      Layout("1f1b", 2, 1, 2, 2048),             // 4096 ranks x 6 x 2 = 49152
  };
  for (const pp::v1::JobSpec& spec : cases) {
    const pp::v1::ParallelSpec& p = spec.parallel();
    SCOPED_TRACE(absl::StrCat(p.schedule(), " D=", p.pipeline(), " V=", p.chunks(),
                              " M=", spec.train().microbatches(), " data=", p.data()));
    absl::StatusOr<coordinator::PlannedJob> planned = coordinator::PlanJobSpec(spec);
    ASSERT_TRUE(planned.ok()) << planned.status();
    const MessageSizes sizes = SizesOf(*planned);
    EXPECT_LT(sizes.task_plan, kGrpcMessageLimit);
    EXPECT_LT(sizes.step_trace, kGrpcMessageLimit);
    EXPECT_LT(sizes.plan_job, kGrpcMessageLimit);
    std::cout << p.schedule() << " D=" << p.pipeline() << " data=" << p.data() << ": task plan "
              << sizes.task_plan << " B, step trace " << sizes.step_trace << " B, PlanJob "
              << sizes.plan_job << " B\n";

    // The fewest microbatches past the limit.
    const int64_t per_microbatch = int64_t{p.pipeline()} * p.data() *
                                   *MaxActionsPerRank(p.schedule(), p.pipeline(), p.chunks(), 1);
    pp::v1::JobSpec more = spec;
    more.mutable_train()->set_microbatches(kMaxActionsPerStep / per_microbatch + 1);
    absl::StatusOr<coordinator::PlannedJob> refused = coordinator::PlanJobSpec(more);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(refused.status().message()), StartsWith("train.microbatches: "));
    EXPECT_THAT(std::string(refused.status().message()), HasSubstr("over the limit 65536"));
  }
}

// The slowest partition the bounds allow: by params over the most layers, with the stage count
// that maximises the dynamic program's work (about a third of the units).
TEST(SpecBoundsPlanTest, TheLargestParamsPartitionPlans) {
  pp::v1::JobSpec spec = Layout("1f1b", 342, 1, 1);
  spec.mutable_model()->set_n_layers(kMaxLayers);
  spec.mutable_parallel()->set_partition("params");
  absl::StatusOr<coordinator::PlannedJob> planned = coordinator::PlanJobSpec(spec);
  ASSERT_TRUE(planned.ok()) << planned.status();
  int units = 0;
  for (int u : planned->stage_units) units += u;
  EXPECT_EQ(units, kMaxLayers + 2);
  EXPECT_EQ(planned->stage_units.size(), 342u);
}

// 2^30 microbatches x 4 replicas, as an older ppcoord may have stored it: 2^32 overflowed an int.
TEST(SpecBoundsPlanTest, AResumeOfAnUnboundedStoredSpecCountsInInt64) {
  pp::v1::JobSpec stored = Layout("1f1b", 1, 1, 1 << 30, 4);
  pp::v1::ResumeJobRequest request;
  request.set_job_id("old-1");
  *request.mutable_parallel() = stored.parallel();
  for (int replicas : {1, 2}) {  // 2^32 and 2^31 microbatches per replica
    request.mutable_parallel()->set_data(replicas);
    absl::StatusOr<pp::v1::JobSpec> resumed = coordinator::ResumedSpec(stored, request);
    EXPECT_EQ(resumed.status().code(), absl::StatusCode::kInvalidArgument) << replicas;
    EXPECT_THAT(std::string(resumed.status().message()),
                StartsWith("train.microbatches: the job's 4294967296 microbatches per step"));
  }
  request.mutable_parallel()->set_data(8);
  absl::StatusOr<pp::v1::JobSpec> resumed = coordinator::ResumedSpec(stored, request);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->train().microbatches(), 1 << 29);
  EXPECT_THAT(std::string(coordinator::PlanJobSpec(*resumed).status().message()),
              StartsWith("parallel.data x train.microbatches x train.microbatch_size: 8 x "
                         "536870912 x 1 = 4294967296 sequences per step is over the limit"));
}

}  // namespace
}  // namespace pp::common
