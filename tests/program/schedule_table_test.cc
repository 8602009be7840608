// The schedule table is the one list of schedules: every row complete, its generator's programs
// valid and agreeing with what the row claims, and docs/planner.md's table its rendering.
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "coordinator/plan/compile.h"
#include "gtest/gtest.h"
#include "program/lower.h"
#include "program/schedules.h"

namespace pp::prog {
namespace {

bool HasSplitBackward(const Schedule& schedule) {
  for (const std::vector<Action>& program : schedule.programs) {
    for (const Action& a : program) {
      if (a.kind == Kind::kBackwardInput || a.kind == Kind::kBackwardWeight) return true;
    }
  }
  return false;
}

TEST(ScheduleTableTest, EveryRowHasAGeneratorADocLineAndRulesItsProgramsKeep) {
  std::set<std::string> names;
  for (const ScheduleKind& kind : Schedules()) {
    SCOPED_TRACE(kind.name);
    EXPECT_TRUE(names.insert(kind.name).second) << "a second row with this name";
    ASSERT_NE(kind.generate, nullptr) << "a row without a generator";
    EXPECT_FALSE(kind.doc.empty()) << "a row without a doc line";
    EXPECT_FALSE(kind.m_rule.empty());
    EXPECT_TRUE(CheckChunkRule(kind, kind.default_chunks).ok()) << "default V breaks the V rule";
    EXPECT_EQ(kind.constraints == nullptr, kind.m_rule == "any")
        << "an M rule for people without its check, or a check the table does not show";
    bool split = false;
    for (int D = 1; D <= 4; ++D) {
      for (int M = 2 * D; M <= 2 * D + 2; ++M) {
        absl::StatusOr<Schedule> compute = Generate(kind.name, D, 0, M);
        ASSERT_TRUE(compute.ok()) << "D=" << D << " M=" << M << ": " << compute.status();
        EXPECT_EQ(compute->chunks, kind.default_chunks);
        EXPECT_EQ(compute->trains(), kind.trains);
        split = split || HasSplitBackward(*compute);
        absl::StatusOr<Schedule> lowered = LowerComms(*compute);
        ASSERT_TRUE(lowered.ok()) << lowered.status();
        absl::StatusOr<plan::Simulation> valid = plan::ValidateAndSimulate(*lowered, {});
        EXPECT_TRUE(valid.ok()) << "D=" << D << " M=" << M << ": " << valid.status();
      }
    }
    EXPECT_EQ(split, kind.splits_backward) << "splits_backward disagrees with the generator";
  }
  EXPECT_EQ(names.size(), ScheduleNames().size());
}

TEST(ScheduleTableTest, PlannerDocShowsTheTable) {
  const std::string path = std::string(PP_SOURCE_DIR) + "/docs/planner.md";
  std::ifstream file(path);
  ASSERT_TRUE(file) << path;
  std::stringstream text;
  text << file.rdbuf();
  EXPECT_NE(text.str().find(ScheduleTableMarkdown()), std::string::npos)
      << path << " should hold the schedule table as ScheduleTableMarkdown() renders it:\n"
      << ScheduleTableMarkdown();
}

}  // namespace
}  // namespace pp::prog
