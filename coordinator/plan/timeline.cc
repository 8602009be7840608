#include "coordinator/plan/timeline.h"

#include "coordinator/plan/convert.h"
#include "program/proto.h"

namespace pp::plan {

Timeline TimelineFromEnds(const prog::Schedule& schedule,
                          const std::vector<std::vector<double>>& end) {
  Timeline timeline;
  timeline.ranks.resize(schedule.programs.size());
  for (size_t r = 0; r < schedule.programs.size(); ++r) {
    const std::vector<prog::Action>& program = schedule.programs[r];
    const std::vector<double>& ends = end[r];
    timeline.ranks[r].reserve(program.size());
    for (size_t k = 0; k < program.size() && k < ends.size(); ++k) {
      timeline.ranks[r].push_back({program[k], k == 0 ? 0 : ends[k - 1], ends[k]});
    }
  }
  return timeline;
}

Timeline TimelineFromTrace(const pp::v1::StepTrace& trace) {
  Timeline timeline;
  for (const pp::v1::RankTrace& rank : trace.ranks()) {
    if (rank.rank() < 0) continue;
    if (rank.rank() >= static_cast<int>(timeline.ranks.size())) {
      timeline.ranks.resize(rank.rank() + 1);
    }
    for (const pp::v1::TimedAction& timed : rank.actions()) {
      if (std::optional<prog::Action> a = prog::ActionFromProto(timed.action())) {
        timeline.ranks[rank.rank()].push_back({*a, timed.start(), timed.end()});
      }
    }
  }
  return timeline;
}

}  // namespace pp::plan
