// Processor sharing in the simulator (simulate.h "Shared processors", simulate_shared.cc): exact
// small cases worked by hand, the per-rank path left as it was, and hostile rank_host /
// host_cores.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/plan/simulate.h"
#include "gtest/gtest.h"
#include "program/lower.h"
#include "program/schedules.h"
#include "tests/coordinator/plan/plan_test_util.h"

namespace pp::plan {
namespace {

CostModel Shared(std::vector<int> rank_host, std::vector<int> host_cores, CostModel costs = {}) {
  costs.rank_host = std::move(rank_host);
  costs.host_cores = std::move(host_cores);
  return costs;
}

Simulation MustSimulate(const prog::Schedule& schedule, const CostModel& costs) {
  absl::StatusOr<Simulation> sim = Simulate(schedule, costs);
  EXPECT_TRUE(sim.ok()) << sim.status();
  return sim.ok() ? *std::move(sim) : Simulation{};
}

// GPipe D=2 M=2, f=1 b=2, both ranks on one core. Alone: makespan 9. Shared: r0's F1 and r1's F0
// run together over [1, 3) at half speed; r1 then runs F1 and B0 alone; r0's B0 and r1's B1 share
// [6, 10); r0's B1 ends at 12. The core is never idle: 12 = the whole work.
TEST(SimulateSharedTest, TwoRanksOnOneCoreComputingAtOnceTakeTwiceAsLong) {
  const prog::Schedule gpipe = Lowered("gpipe", 2, 1, 2);
  EXPECT_EQ(MustSimulate(gpipe, {}).makespan, 9);
  const Simulation sim = MustSimulate(gpipe, Shared({0, 0}, {1}));
  EXPECT_EQ(sim.makespan, 12);
  // r0: F0 SEND F1 SEND RECV_GRAD B0 RECV_GRAD B1; r1: RECV F0 RECV F1 B0 SEND B1 SEND.
  EXPECT_EQ(sim.end[0], (std::vector<double>{1, 1, 3, 3, 6, 10, 10, 12}));
  EXPECT_EQ(sim.end[1], (std::vector<double>{1, 3, 3, 4, 6, 6, 10, 10}));
  // Busy stays the nominal compute, so the time lost to sharing shows as bubble.
  for (const RankStats& rank : sim.ranks) {
    EXPECT_EQ(rank.busy, 6);
    EXPECT_EQ(rank.idle, 6);
  }
  EXPECT_EQ(sim.bubble_fraction, 0.5);
  // Two cores for two ranks: nobody slows down.
  const Simulation roomy = MustSimulate(gpipe, Shared({0, 0}, {2}));
  EXPECT_EQ(roomy.makespan, 9);
}

// 1F1B with one microbatch never computes on two ranks at once: every rank but one waits at a
// receive, which takes no core, so one core for all four ranks costs nothing.
TEST(SimulateSharedTest, RanksWaitingAtAReceiveFreeTheirCore) {
  const prog::Schedule chain = Lowered("1f1b", 4, 1, 1);
  const Simulation alone = MustSimulate(chain, {});
  const Simulation shared = MustSimulate(chain, Shared({0, 0, 0, 0}, {1}));
  EXPECT_EQ(alone.makespan, 12);
  EXPECT_EQ(shared.makespan, 12);
  EXPECT_EQ(shared.end, alone.end);
}

// Forward-only D=4 M=4, f=1 (dedicated: M + D - 1 = 7). Four ranks on one host of two cores: the
// active ranks go 1, 2, 3, 4, 3, 2, 1, so the waves take 1, 1, 1.5, 2, 1.5, 1, 1: makespan 9.
// Two hosts of one core, ranks 0,1 and 2,3: worked event by event, makespan 11.
TEST(SimulateSharedTest, FourRanksOnTwoCores) {
  const prog::Schedule forward = Lowered("forward-only", 4, 1, 4);
  EXPECT_EQ(MustSimulate(forward, {}).makespan, 7);
  const Simulation one_host = MustSimulate(forward, Shared({0, 0, 0, 0}, {2}));
  EXPECT_EQ(one_host.makespan, 9);
  // Rank 0's forwards (each followed by its send) end at 1, 2, 3.5, 5.5.
  EXPECT_EQ(one_host.end[0], (std::vector<double>{1, 1, 2, 2, 3.5, 3.5, 5.5, 5.5}));
  // Rank 3's: 5.5, 7, 8, 9 (each after its receive).
  EXPECT_EQ(one_host.end[3], (std::vector<double>{3.5, 5.5, 5.5, 7, 7, 8, 8, 9}));
  for (const RankStats& rank : one_host.ranks) EXPECT_EQ(rank.busy, 4);
  const Simulation two_hosts = MustSimulate(forward, Shared({0, 0, 1, 1}, {1, 1}));
  EXPECT_EQ(two_hosts.makespan, 11);
}

// A SEND's overhead takes the core too. Forward-only D=2 M=2, stage 0's F = 1, stage 1's F = 2,
// send_overhead 1, one core: r0 F0 [0,1), SEND [1,2); then r0's F1 and r1's F0 share the core
// until r0's F1 ends at 4; r0's SEND and the rest of r1's F0 (1 unit) share it until 6; r1's
// F1 runs alone to 8.
TEST(SimulateSharedTest, SendOverheadSharesTheCore) {
  const prog::Schedule forward = Lowered("forward-only", 2, 1, 2);
  CostModel costs;
  costs.send_overhead = 1;
  costs.stage_costs = {{1, 2, 1, 1}, {2, 2, 1, 1}};
  const Simulation sim = MustSimulate(forward, Shared({0, 0}, {1}, costs));
  EXPECT_EQ(sim.end[0], (std::vector<double>{1, 2, 4, 6}));
  EXPECT_EQ(sim.end[1], (std::vector<double>{2, 6, 6, 8}));
  EXPECT_EQ(sim.makespan, 8);
  EXPECT_EQ(sim.ranks[0].busy, 2);  // the sends count as idle, as on a processor of its own
  EXPECT_EQ(sim.ranks[1].busy, 4);
}

// Without rank_host, or with hosts that have a core for every rank, the per-rank path runs and
// gives today's figures exactly; the fluid run itself agrees with it on such hosts.
TEST(SimulateSharedTest, EnoughCoresGiveTheUnsharedFigures) {
  CostModel costs;
  costs.forward = 1.5;
  costs.backward = 2.25;
  costs.comm_latency = 0.25;
  costs.send_overhead = 0.125;
  ForEachSmallSchedule([&](const std::string& what, int D, const prog::Schedule& schedule) {
    const Simulation alone = MustSimulate(schedule, costs);
    std::vector<int> own(D);
    for (int r = 0; r < D; ++r) own[r] = r;
    for (const CostModel& roomy : {Shared(own, std::vector<int>(D, 1), costs),
                                   Shared(std::vector<int>(D, 0), {D}, costs)}) {
      const Simulation same = MustSimulate(schedule, roomy);
      EXPECT_EQ(same.end, alone.end) << what;
      EXPECT_EQ(same.bubble_fraction, alone.bubble_fraction) << what;
    }
    absl::StatusOr<internal::Durations> durations =
        internal::DurationsOf(costs, schedule.stages());
    ASSERT_TRUE(durations.ok());
    absl::StatusOr<Simulation> fluid = internal::SimulateShared(
        schedule, Shared(own, std::vector<int>(D, 1), costs), *durations);
    ASSERT_TRUE(fluid.ok()) << what << ": " << fluid.status();
    ASSERT_EQ(fluid->end.size(), alone.end.size());
    for (int r = 0; r < D; ++r) {
      ASSERT_EQ(fluid->end[r].size(), alone.end[r].size()) << what;
      for (size_t k = 0; k < alone.end[r].size(); ++k) {
        EXPECT_DOUBLE_EQ(fluid->end[r][k], alone.end[r][k]) << what << " rank " << r;
      }
      EXPECT_DOUBLE_EQ(fluid->ranks[r].busy, alone.ranks[r].busy) << what;
    }
  });
}

// Sharing never makes a step shorter, and a step on c cores is at least the total work / c.
TEST(SimulateSharedTest, SharingBoundsTheStep) {
  for (const std::string& name : prog::ScheduleNames()) {
    absl::StatusOr<prog::Schedule> compute = prog::Generate(name, 4, prog::DefaultChunks(name), 8);
    if (!compute.ok()) continue;
    const prog::Schedule schedule = *prog::LowerComms(*compute);
    const Simulation alone = MustSimulate(schedule, {});
    const Simulation shared = MustSimulate(schedule, Shared({0, 0, 0, 0}, {2}));
    double work = 0;
    for (const RankStats& rank : shared.ranks) work += rank.busy;
    EXPECT_GE(shared.makespan, alone.makespan) << name;
    EXPECT_GE(shared.makespan, work / 2 - 1e-9) << name;
    EXPECT_LE(shared.makespan, work) << name;  // never worse than one core for all
  }
}

// ValidateAndSimulate (and so Plan) shares processors too, with the same figures as Simulate.
TEST(SimulateSharedTest, PlanUsesTheSharing) {
  const CostModel costs = Shared({0, 0}, {1});
  const Planned planned = MustPlan("gpipe", 2, 1, 2, costs);
  EXPECT_EQ(planned.simulation.makespan, 12);
  EXPECT_EQ(planned.simulation.end, MustSimulate(planned.schedule, costs).end);
}

void ExpectRefused(const CostModel& costs, const std::string& field) {
  const prog::Schedule schedule = Lowered("1f1b", 2, 1, 2);
  for (const absl::Status& status :
       {Simulate(schedule, costs).status(), ValidateAndSimulate(schedule, costs).status()}) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_NE(status.message().find(field), std::string::npos) << status;
  }
}

TEST(SimulateSharedTest, RefusesHostileHosts) {
  ExpectRefused(Shared({0, 0}, {-1}), "host_cores[0] is -1");
  ExpectRefused(Shared({0, 1}, {1, 0}), "host_cores[1] is 0");
  ExpectRefused(Shared({0, 2}, {1, 1}), "rank_host[1] is 2");
  ExpectRefused(Shared({-1, 0}, {1}), "rank_host[0] is -1");
  ExpectRefused(Shared({0, 0}, {}), "rank_host[0] is 0");
  ExpectRefused(Shared({0}, {1}), "rank_host has 1 entries but the schedule has 2 ranks");
  ExpectRefused(Shared({0, 0, 0}, {1}), "rank_host has 3 entries");
  ExpectRefused(Shared({}, {1}), "host_cores has 1 entries but rank_host is empty");
}

// The deadlock check holds for the shared run too: a deadlocked program is refused, not timed.
TEST(SimulateSharedTest, ReportsDeadlock) {
  prog::Schedule deadlocked = Lowered("1f1b", 2, 1, 2);
  std::vector<prog::Action>& rank0 = deadlocked.programs[0];
  std::rotate(rank0.begin() + 1, rank0.begin() + 4, rank0.begin() + 6);
  const absl::Status status = Simulate(deadlocked, Shared({0, 0}, {1})).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("deadlock"), std::string::npos) << status;
  absl::StatusOr<internal::Durations> durations = internal::DurationsOf(CostModel{}, 2);
  ASSERT_TRUE(durations.ok());
  const absl::Status fluid =
      internal::SimulateShared(deadlocked, Shared({0, 0}, {1}), *durations).status();
  EXPECT_NE(fluid.message().find("deadlocks"), std::string::npos) << fluid;
}

// Each cost is finite but the shared step's sum is not: refused, as without sharing.
TEST(SimulateSharedTest, RefusesCostsWhoseSumOverflows) {
  CostModel huge = Shared({0, 0}, {1});
  huge.forward = 1e308;
  const absl::Status status = Simulate(Lowered("1f1b", 2, 1, 2), huge).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("costs too large"), std::string::npos) << status;
}

}  // namespace
}  // namespace pp::plan
