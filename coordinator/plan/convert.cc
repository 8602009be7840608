#include "coordinator/plan/convert.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "program/proto.h"

namespace pp::plan {
pp::v1::Schedule ScheduleToProto(const prog::Schedule& schedule, const Simulation* simulation) {
  pp::v1::Schedule proto;
  proto.set_name(schedule.name);
  proto.set_pipeline(schedule.pipeline);
  proto.set_chunks(schedule.chunks);
  proto.set_microbatches(schedule.microbatches);
  for (int rank : schedule.stage_to_rank) proto.add_stage_to_rank(rank);
  for (size_t r = 0; r < schedule.programs.size(); ++r) {
    pp::v1::RankProgram* program = proto.add_ranks();
    program->set_rank(static_cast<int>(r));
    program->mutable_actions()->Reserve(static_cast<int>(schedule.programs[r].size()));
    for (const prog::Action& a : schedule.programs[r])
      *program->add_actions() = prog::ActionToProto(a);
  }
  if (simulation != nullptr) {
    pp::v1::Simulation* sim = proto.mutable_simulation();
    sim->set_makespan(simulation->makespan);
    sim->set_bubble_fraction(simulation->bubble_fraction);
    sim->set_bubble_definition(kBubbleDefinition);
    for (size_t r = 0; r < simulation->ranks.size(); ++r) {
      const RankStats& stats = simulation->ranks[r];
      pp::v1::RankSimulation* rank = sim->add_ranks();
      rank->set_rank(static_cast<int>(r));
      rank->set_busy(stats.busy);
      rank->set_idle(stats.idle);
      rank->set_peak_live_activations(stats.peak_live);
      rank->set_peak_activation_bytes(stats.peak_bytes);
    }
  }
  return proto;
}

absl::StatusOr<prog::Schedule> ScheduleFromProto(const pp::v1::Schedule& proto) {
  prog::Schedule schedule;
  schedule.name = proto.name();
  schedule.pipeline = proto.pipeline();
  schedule.chunks = proto.chunks();
  schedule.microbatches = proto.microbatches();
  schedule.stage_to_rank.assign(proto.stage_to_rank().begin(), proto.stage_to_rank().end());
  for (const pp::v1::RankProgram& program : proto.ranks()) {
    std::vector<prog::Action> actions;
    actions.reserve(program.actions_size());
    for (int i = 0; i < program.actions_size(); ++i) {
      const pp::v1::Action& action = program.actions(i);
      const std::optional<prog::Action> a = prog::ActionFromProto(action);
      if (!a) {
        return absl::InvalidArgumentError(
            absl::StrCat("rank ", program.rank(), ", action ", i, ": action kind ",
                         pp::v1::ActionKind_Name(action.kind()), " is not a schedule action"));
      }
      actions.push_back(*a);
    }
    schedule.programs.push_back(std::move(actions));
  }
  return schedule;
}

CostModel CostsFromProto(const pp::v1::CostModel& proto) {
  CostModel costs;  // f=1, b=2 unless the proto gives any compute cost
  if (proto.forward() != 0 || proto.backward() != 0 || proto.backward_input() != 0 ||
      proto.backward_weight() != 0) {
    costs.forward = proto.forward();
    costs.backward = proto.backward();
    costs.backward_input = proto.backward_input();
    costs.backward_weight = proto.backward_weight();
  }
  costs.comm_latency = proto.comm_latency();
  costs.send_overhead = proto.send_overhead();
  costs.comm_bandwidth = proto.comm_bandwidth();
  costs.activation_bytes = proto.activation_bytes();
  costs.stage_scale.assign(proto.stage_scale().begin(), proto.stage_scale().end());
  costs.recompute_forward = proto.recompute_forward();
  costs.recompute_dropped = proto.recompute_dropped();
  costs.rank_host.assign(proto.rank_host().begin(), proto.rank_host().end());
  costs.host_cores.assign(proto.host_cores().begin(), proto.host_cores().end());
  return costs;
}

}  // namespace pp::plan
