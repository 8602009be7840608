#include "coordinator/plan/auto_plan.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "coordinator/plan/compile.h"
#include "coordinator/plan/generate.h"

namespace pp::plan {
namespace {

CostModel Scaled(const CostModel& costs, double factor) {
  CostModel scaled = costs;
  scaled.forward *= factor;
  scaled.backward *= factor;
  scaled.backward_input *= factor;
  scaled.backward_weight *= factor;
  scaled.activation_bytes *= factor;
  return scaled;
}

std::string Name(const Candidate& c) {
  return absl::StrCat(c.schedule, " V=", c.chunks, " M=", c.microbatches);
}

}  // namespace

absl::StatusOr<AutoPlan> ChooseSchedule(const AutoPlanRequest& request) {
  const int D = request.pipeline;
  if (D < 1) return absl::InvalidArgumentError(absl::StrCat("pipeline depth D=", D, " < 1"));
  if (request.min_microbatches < 1 || request.max_microbatches < request.min_microbatches) {
    return absl::InvalidArgumentError(absl::StrCat("microbatch range [", request.min_microbatches,
                                                   ", ", request.max_microbatches,
                                                   "] is empty or starts below 1"));
  }
  if (request.memory_budget < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory budget must be >= 0, got ", request.memory_budget));
  }
  if (!request.costs.stage_scale.empty()) {
    return absl::InvalidArgumentError("the auto-planner does not take per-stage cost scales");
  }
  if (auto costs = ResolveCosts(request.costs, 1); !costs.ok()) return costs.status();
  std::vector<std::string> schedules = request.schedules;
  if (schedules.empty()) schedules = ScheduleNames();
  for (const std::string& name : schedules) {
    if (std::find(ScheduleNames().begin(), ScheduleNames().end(), name) == ScheduleNames().end()) {
      return absl::InvalidArgumentError(absl::StrCat("unknown schedule '", name, "'"));
    }
  }
  const bool in_bytes = request.costs.activation_bytes > 0;
  AutoPlan plan;
  for (int M = request.min_microbatches; M <= request.max_microbatches; ++M) {
    for (const std::string& name : schedules) {
      std::vector<int> chunk_options = {DefaultChunks(name)};
      if (name == "interleaved-1f1b") {
        chunk_options.clear();
        for (int V = 2; V <= request.max_chunks; ++V) chunk_options.push_back(V);
      }
      for (int V : chunk_options) {
        const double factor = static_cast<double>(request.min_microbatches) / M / V;
        absl::StatusOr<Planned> planned = Plan(name, D, V, M, Scaled(request.costs, factor));
        // Costs were checked above, so InvalidArgument is a D, V, M this schedule refuses.
        if (absl::IsInvalidArgument(planned.status())) continue;
        if (!planned.ok()) return planned.status();
        Candidate c{name, V, M, planned->simulation.makespan, planned->simulation.bubble_fraction};
        for (const RankStats& rank : planned->simulation.ranks) {
          c.memory = std::max(c.memory, in_bytes ? rank.peak_bytes : rank.peak_live * factor);
        }
        c.fits = request.memory_budget == 0 || c.memory <= request.memory_budget;
        plan.candidates.push_back(c);
      }
    }
  }
  // Shortest step; ties go to less memory, then to the earlier candidate.
  for (int i = 0; i < static_cast<int>(plan.candidates.size()); ++i) {
    const Candidate& c = plan.candidates[i];
    if (!c.fits) continue;
    if (plan.chosen < 0) {
      plan.chosen = i;
      continue;
    }
    const Candidate& best = plan.candidates[plan.chosen];
    if (c.step < best.step || (c.step == best.step && c.memory < best.memory)) plan.chosen = i;
  }
  const int fitting = static_cast<int>(std::count_if(plan.candidates.begin(), plan.candidates.end(),
                                                     [](const Candidate& c) { return c.fits; }));
  if (plan.chosen < 0) {
    double least = 0;
    for (size_t i = 0; i < plan.candidates.size(); ++i) {
      if (i == 0 || plan.candidates[i].memory < least) least = plan.candidates[i].memory;
    }
    plan.reason =
        absl::StrCat("none of the ", plan.candidates.size(), " candidates fits the memory budget ",
                     request.memory_budget, " (the smallest needs ", least, ")");
    return plan;
  }
  const Candidate& best = plan.candidates[plan.chosen];
  plan.reason = absl::StrCat("chose ", Name(best), ": the shortest simulated step (", best.step,
                             ") of the ", fitting, " candidates within the budget");
  int runner_up = -1;
  for (int i = 0; i < static_cast<int>(plan.candidates.size()); ++i) {
    const Candidate& c = plan.candidates[i];
    if (i == plan.chosen || !c.fits || c.schedule == best.schedule) continue;
    if (runner_up < 0 || c.step < plan.candidates[runner_up].step) runner_up = i;
  }
  if (runner_up >= 0) {
    const Candidate& next = plan.candidates[runner_up];
    absl::StrAppend(&plan.reason, "; best other schedule ", Name(next), " takes ", next.step,
                    absl::StrFormat(" (%+.1f%%)", 100 * (next.step / best.step - 1)));
  }
  const int over = static_cast<int>(plan.candidates.size()) - fitting;
  if (over > 0) absl::StrAppend(&plan.reason, "; ", over, " candidates exceed the budget");
  return plan;
}

std::string DescribeAutoPlan(const AutoPlan& plan) {
  std::string out = absl::StrFormat("%-18s %2s %5s %12s %8s %12s %s\n", "schedule", "V", "M",
                                    "step", "bubble", "memory", "fits");
  for (int i = 0; i < static_cast<int>(plan.candidates.size()); ++i) {
    const Candidate& c = plan.candidates[i];
    absl::StrAppend(
        &out, absl::StrFormat("%-18s %2d %5d %12.6g %7.2f%% %12.6g %s%s\n", c.schedule, c.chunks,
                              c.microbatches, c.step, 100 * c.bubble, c.memory,
                              c.fits ? "yes" : "no", i == plan.chosen ? "  <- chosen" : ""));
  }
  return out + plan.reason + "\n";
}

}  // namespace pp::plan
