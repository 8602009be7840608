// The ASCII timeline's cell size (coordinator/plan/render.h): measured steps and long plans keep
// a line readable; every action still shows its label.
#include "coordinator/plan/render.h"

#include <algorithm>
#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "coordinator/plan/compile.h"
#include "gtest/gtest.h"

namespace pp::plan {
namespace {

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

Planned MustPlan(const std::string& schedule, int D, int V, int M) {
  absl::StatusOr<Planned> planned = Plan(schedule, D, V, M, CostModel());
  EXPECT_TRUE(planned.ok()) << planned.status();
  return planned.ok() ? *std::move(planned) : Planned{};
}

// 1F1B D=2 M=8 as measured: forwards of 3 ms, backwards of 6 ms, and one embedding-sized
// forward of 20 microseconds that used to set the cell size (then a line had ~400 cells).
Timeline MeasuredStep() {
  const Planned planned = MustPlan("1f1b", 2, 1, 8);
  Timeline timeline = TimelineFromSimulation(planned.schedule, planned.simulation);
  for (auto& rank : timeline.ranks) {
    for (TimedAction& t : rank) {
      t.start *= 0.003;
      t.end *= 0.003;
    }
  }
  for (TimedAction& t : timeline.ranks[0]) {
    if (t.action.kind == prog::Kind::kForward && t.action.microbatch == 0) t.end = t.start + 20e-6;
  }
  return timeline;
}

TEST(RenderWidthTest, MeasuredStepGetsARoundCellInMillisecondsAndFits) {
  const std::string ascii = RenderAscii(MeasuredStep(), TimeUnit::kSeconds);
  const std::vector<std::string> lines = Lines(ascii);
  ASSERT_EQ(lines.size(), 3u) << ascii;
  for (int r = 0; r < 2; ++r) {
    EXPECT_LE(lines[r].size(), 200u) << lines[r];
    for (int mb = 1; mb <= 8; ++mb) {  // every action keeps its label, even the 20 us one
      EXPECT_NE(lines[r].find(absl::StrCat("[F", mb, "]")), std::string::npos) << lines[r];
      EXPECT_NE(lines[r].find(absl::StrCat("[B", mb)), std::string::npos) << lines[r];
    }
  }
  // The 81 ms step in at most 40 cells of 5 columns: 2.03 ms, rounded up to 3 ms.
  EXPECT_EQ(lines[2].rfind("(one cell = 3 ms;", 0), 0u) << lines[2];
  // Time stays aligned across ranks: rank 1's first forward is one forward after rank 0's.
  EXPECT_EQ(lines[1].rfind("rank 1: [  ] [F1]", 0), 0u) << lines[1];
}

TEST(RenderWidthTest, LongStepsAreLabelledInSeconds) {
  Timeline timeline = MeasuredStep();
  for (auto& rank : timeline.ranks) {
    for (TimedAction& t : rank) {
      t.start *= 1000;
      t.end *= 1000;
    }
  }
  const std::vector<std::string> lines = Lines(RenderAscii(timeline, TimeUnit::kSeconds));
  EXPECT_EQ(lines.back().rfind("(one cell = 3 s;", 0), 0u) << lines.back();
}

TEST(RenderWidthTest, PlansKeepOneCellPerUnitWhileTheyFit) {
  const Planned planned = MustPlan("1f1b", 4, 1, 8);
  const std::vector<std::string> lines =
      Lines(RenderAscii(TimelineFromSimulation(planned.schedule, planned.simulation)));
  EXPECT_EQ(lines[0].size(), 33u * 5 + 8 - 1);  // makespan 33 units, "rank 0: " + cells
  EXPECT_EQ(lines.back().rfind("(one cell = 1 time units;", 0), 0u);
}

TEST(RenderWidthTest, LongPlansGetCoarserCellsAndKeepEveryLabel) {
  const Planned planned = MustPlan("1f1b", 4, 1, 64);  // makespan 201 units
  const std::string ascii =
      RenderAscii(TimelineFromSimulation(planned.schedule, planned.simulation));
  const std::vector<std::string> lines = Lines(ascii);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_TRUE(std::regex_search(lines.back(), std::regex(R"(^\(one cell = [2-9] time units;)")))
      << lines.back();
  for (int r = 0; r < 4; ++r) {
    // 128 compute actions need at least 128 cells; the old one-cell-per-unit drew 201.
    EXPECT_LT(lines[r].size(), 150u * 6) << lines[r];
    EXPECT_NE(lines[r].find("[F64]"), std::string::npos);
    EXPECT_NE(lines[r].find("[B64"), std::string::npos);
  }
}

}  // namespace
}  // namespace pp::plan
