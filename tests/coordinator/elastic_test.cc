// The pure part of elastic jobs (coordinator/elastic.h) and the resize edit of a job's record
// (JobEdit::Resize, coordinator/job_record.h).
#include "coordinator/elastic.h"

#include <string>
#include <vector>

#include "coordinator/job_record.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pp::coordinator {
namespace {

using ::testing::HasSubstr;

// D x R pipelines with M microbatches per replica on a 4-block model (6 partition units).
pp::v1::JobSpec Spec(int pipeline, int data, int microbatches,
                     const std::string& schedule = "1f1b") {
  pp::v1::JobSpec spec;
  spec.mutable_model()->set_n_layers(4);
  spec.mutable_parallel()->set_pipeline(pipeline);
  spec.mutable_parallel()->set_data(data);
  spec.mutable_parallel()->set_schedule(schedule);
  spec.mutable_train()->set_microbatches(microbatches);
  spec.mutable_elastic()->set_min_workers(1);
  return spec;
}

// (D, R, M) of each layout, in order.
std::vector<std::vector<int>> Shapes(const std::vector<pp::v1::JobSpec>& layouts) {
  std::vector<std::vector<int>> shapes;
  for (const pp::v1::JobSpec& s : layouts) {
    shapes.push_back({s.parallel().pipeline(), s.parallel().data(), s.train().microbatches()});
  }
  return shapes;
}

TEST(ElasticTest, APipelineOfFourOnThreeWorkersBecomesThreeStagesWithTheGlobalBatch) {
  const std::vector<pp::v1::JobSpec> layouts = LayoutsFor(Spec(4, 1, 8), 3);
  ASSERT_FALSE(layouts.empty());
  EXPECT_EQ(Shapes(layouts)[0], (std::vector<int>{3, 1, 8}));
  // Two workers: two stages, then one; replicas (not bitwise the base's run) only after those.
  const auto two = Shapes(LayoutsFor(Spec(4, 1, 8), 2));
  ASSERT_EQ(two.size(), 3u);
  EXPECT_EQ(two[0], (std::vector<int>{2, 1, 8}));
  EXPECT_EQ(two[1], (std::vector<int>{1, 1, 8}));
  EXPECT_EQ(two[2], (std::vector<int>{1, 2, 4}));
}

TEST(ElasticTest, LayoutsKeepTheGlobalBatchAndTheBasesReplicasFirst) {
  // DP2 x PP2, M = 4 per replica: 8 microbatches per step. Its two replicas are kept while two
  // workers are left (bitwise its own run), before a deeper pipeline on more workers.
  EXPECT_EQ(Shapes(LayoutsFor(Spec(2, 2, 4), 4))[0], (std::vector<int>{2, 2, 4}));
  const auto three = Shapes(LayoutsFor(Spec(2, 2, 4), 3));
  EXPECT_EQ(three[0], (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(three[1], (std::vector<int>{3, 1, 8}));
  EXPECT_EQ(Shapes(LayoutsFor(Spec(2, 2, 4), 2))[0], (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(Shapes(LayoutsFor(Spec(2, 2, 4), 1))[0], (std::vector<int>{1, 1, 8}));
  // Three replicas do not divide 8 microbatches: never offered.
  for (const auto& shape : Shapes(LayoutsFor(Spec(2, 2, 4), 6))) {
    EXPECT_NE(shape[1], 3);
    EXPECT_EQ(shape[1] * shape[2], 8);
  }
}

TEST(ElasticTest, NoLayoutIsDeeperThanTheModelsUnitsAndTensorParallelismIsKept) {
  pp::v1::JobSpec spec = Spec(2, 1, 4);
  spec.mutable_parallel()->set_tensor(2);
  for (const pp::v1::JobSpec& s : LayoutsFor(spec, 64)) {
    EXPECT_EQ(s.parallel().tensor(), 2);
    EXPECT_LE(s.parallel().pipeline(), 6);
    EXPECT_LE(LayoutWorkers(s.parallel()), 64);
  }
  EXPECT_TRUE(LayoutsFor(spec, 1).empty());  // one tensor-parallel group needs two workers
}

TEST(ElasticTest, AnExplicitPartitionIsDroppedAtAnotherDepthAndASchedulesFallbackIs1F1B) {
  pp::v1::JobSpec spec = Spec(2, 1, 4, "interleaved-1f1b");
  spec.mutable_parallel()->set_chunks(2);
  spec.mutable_parallel()->set_partition("explicit");
  for (int units : {1, 2, 1, 2}) spec.mutable_parallel()->add_stage_layers(units);
  const std::vector<pp::v1::JobSpec> same = LayoutsFor(spec, 2);
  ASSERT_GE(same.size(), 2u);
  EXPECT_EQ(same[0].parallel().stage_layers_size(), 4);  // the base's own depth: kept
  const std::vector<pp::v1::JobSpec> deeper = LayoutsFor(spec, 3);
  ASSERT_GE(deeper.size(), 2u);
  EXPECT_EQ(deeper[0].parallel().pipeline(), 3);
  EXPECT_EQ(deeper[0].parallel().schedule(), "interleaved-1f1b");
  EXPECT_EQ(deeper[0].parallel().stage_layers_size(), 0);
  EXPECT_EQ(deeper[0].parallel().partition(), "");
  EXPECT_EQ(deeper[1].parallel().pipeline(), 3);  // its fallback
  EXPECT_EQ(deeper[1].parallel().schedule(), "1f1b");
  EXPECT_EQ(deeper[1].parallel().chunks(), 1);
}

TEST(ElasticTest, BoundsDefaultToTheLayoutThirtySecondsAndAMinute) {
  pp::v1::JobSpec spec = Spec(2, 2, 4);
  ElasticBounds b = BoundsOf(spec);
  EXPECT_EQ(b.min_workers, 1);
  EXPECT_EQ(b.max_workers, 4);
  EXPECT_EQ(b.grace, absl::Seconds(30));
  EXPECT_EQ(b.grow_after, absl::Seconds(60));
  spec.mutable_elastic()->set_max_workers(8);
  spec.mutable_elastic()->set_grace_seconds(0.5);
  spec.mutable_elastic()->set_grow_after_seconds(2);
  b = BoundsOf(spec);
  EXPECT_EQ(b.max_workers, 8);
  EXPECT_EQ(b.grace, absl::Milliseconds(500));
  EXPECT_EQ(b.grow_after, absl::Seconds(2));
  EXPECT_EQ(LayoutLabel(spec), "1f1b D=2 V=1 T=1 R=2 M=4 (4 workers)");
}

TEST(ElasticTest, AResizeKeepsTheBaseLayoutCountsAndLogsAndAUserResumeClearsTheBase) {
  pp::v1::Job job;
  job.set_id("j");
  job.set_state(pp::v1::QUEUED);
  *job.mutable_spec() = Spec(4, 1, 8);
  JobRecord rec(job);
  // Only a QUEUED job is resized.
  const pp::v1::JobSpec three = Spec(3, 1, 8);
  ASSERT_TRUE(rec.Apply(JobEdit::Place({pp::v1::RankPlacement()}, 1)).ok());
  EXPECT_FALSE(rec.Apply(JobEdit::Resize(three, "why", 1)).ok());
  EXPECT_EQ(rec.job().spec().parallel().pipeline(), 4);
  ASSERT_TRUE(rec.Apply(JobEdit::Requeue(2, "worker w3 lost", true, absl::InfinitePast(), 2)).ok());
  ASSERT_TRUE(rec.Apply(JobEdit::Resize(three, "resized from A to B", 3)).value());
  EXPECT_EQ(rec.job().spec().parallel().pipeline(), 3);
  EXPECT_EQ(rec.job().resizes(), 1);
  EXPECT_EQ(rec.job().base_parallel().pipeline(), 4);
  EXPECT_EQ(rec.job().base_microbatches(), 8);
  EXPECT_EQ(BaseSpec(rec.job()).parallel().pipeline(), 4);
  ASSERT_EQ(rec.job().restart_log_size(), 1);
  EXPECT_EQ(rec.job().restart_log(0).reason(), "worker w3 lost; resized from A to B");
  // A second resize keeps the first base.
  ASSERT_TRUE(rec.Apply(JobEdit::Resize(Spec(2, 1, 8), "again", 4)).value());
  EXPECT_EQ(rec.job().base_parallel().pipeline(), 4);
  EXPECT_EQ(rec.job().resizes(), 2);
  // A user's resume names the layout from then on.
  ASSERT_TRUE(rec.Apply(JobEdit::End(pp::v1::CANCELLED, "", 5)).ok());
  ASSERT_TRUE(rec.Apply(JobEdit::Resume(2, "resumed", Spec(2, 2, 4), 0, 6)).ok());
  EXPECT_FALSE(rec.job().has_base_parallel());
  EXPECT_EQ(BaseSpec(rec.job()).parallel().data(), 2);
}

}  // namespace
}  // namespace pp::coordinator
