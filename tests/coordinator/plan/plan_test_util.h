// Helpers shared by the planner tests.
#ifndef PP_TESTS_PLAN_PLAN_TEST_UTIL_H_
#define PP_TESTS_PLAN_PLAN_TEST_UTIL_H_

#include <string>

#include "absl/strings/str_cat.h"
#include "coordinator/plan/compile.h"
#include "coordinator/plan/execute.h"
#include "coordinator/plan/validate.h"
#include "gtest/gtest.h"
#include "program/lower.h"
#include "program/schedules.h"

namespace pp::plan {

// The validator on its own (validate.h, checks 1 to 5): the static checks, then the deadlock check
// on a zero-duration execution. OK, or the validator's InvalidArgument.
inline absl::Status Validate(const prog::Schedule& schedule) {
  if (absl::Status status = internal::CheckStatically(schedule); !status.ok()) return status;
  const internal::Execution exec = internal::Execute(
      schedule, internal::ZeroDurations(schedule.stages()), /*record_times=*/false);
  return internal::CheckDeadlock(schedule, exec);
}

// The acceptance cost model: f=1, b=2 (I=W=1 when split), free comms.
inline CostModel UnitCosts() { return CostModel{}; }

inline Planned MustPlan(const std::string& name, int D, int V, int M,
                        const CostModel& costs = UnitCosts()) {
  absl::StatusOr<Planned> planned = Plan(name, D, V, M, costs);
  EXPECT_TRUE(planned.ok()) << name << " D=" << D << " V=" << V << " M=" << M << ": "
                            << planned.status();
  return planned.ok() ? *std::move(planned) : Planned{};
}

// Simulated times are sums of small integers here, so they convert to integers exactly.
inline long Exact(double value) {
  const long whole = static_cast<long>(value);
  EXPECT_EQ(static_cast<double>(whole), value) << "not an integer: " << value;
  return whole;
}

// The generated schedule, lowered; failures are test failures (and an empty schedule).
inline prog::Schedule Lowered(const std::string& name, int D, int V, int M) {
  absl::StatusOr<prog::Schedule> compute = prog::Generate(name, D, V, M);
  EXPECT_TRUE(compute.ok()) << compute.status();
  absl::StatusOr<prog::Schedule> lowered = compute.ok() ? prog::LowerComms(*compute) : compute;
  EXPECT_TRUE(lowered.ok()) << lowered.status();
  return lowered.ok() ? *std::move(lowered) : prog::Schedule{};
}

// fn(what, D, schedule) for every schedule at D = 1..4 and M = D..2D+1 (the Ms it accepts),
// lowered; `what` names it ("1f1b D=2 M=3") for failure messages.
template <typename Fn>
void ForEachSmallSchedule(Fn&& fn) {
  for (const std::string& name : prog::ScheduleNames()) {
    for (int D = 1; D <= 4; ++D) {
      for (int M = D; M <= 2 * D + 1; ++M) {
        absl::StatusOr<prog::Schedule> compute =
            prog::Generate(name, D, prog::DefaultChunks(name), M);
        if (!compute.ok()) continue;  // an M the schedule refuses (see generate_test.cc)
        absl::StatusOr<prog::Schedule> lowered = prog::LowerComms(*compute);
        ASSERT_TRUE(lowered.ok()) << lowered.status();
        fn(absl::StrCat(name, " D=", D, " M=", M), D, *lowered);
      }
    }
  }
}

// Total idle time over all ranks, D * makespan - sum(busy), as an exact integer.
inline long TotalIdle(const Planned& planned) {
  long idle = 0;
  for (const RankStats& rank : planned.simulation.ranks) idle += Exact(rank.idle);
  return idle;
}

}  // namespace pp::plan

#endif  // PP_TESTS_PLAN_PLAN_TEST_UTIL_H_
