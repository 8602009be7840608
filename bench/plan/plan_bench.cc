// Times planning D=64, V=4, M=1024 (interleaved-1f1b) end to end as Plan does it: generate, lower
// comms, then validate and simulate (ValidateAndSimulate, one execution for both). Target: under
// 100 ms. Prints wall time and this thread's CPU time (the machine may be shared; CPU time is what
// the planner costs). Usage: plan_bench [--repeat=N] [--schedule=NAME]
#include <algorithm>
#include <ctime>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "coordinator/plan/compile.h"
#include "program/lower.h"
#include "program/schedules.h"

ABSL_FLAG(int32_t, repeat, 5, "runs; the best and the median are printed");
ABSL_FLAG(std::string, schedule, "interleaved-1f1b", "schedule to plan");
ABSL_FLAG(int32_t, stages, 64, "D");
ABSL_FLAG(int32_t, chunks, 4, "V");
ABSL_FLAG(int32_t, microbatches, 1024, "M");

namespace {

struct Now {
  double wall_ms, cpu_ms;
};

Now Sample() {
  timespec wall, cpu;
  clock_gettime(CLOCK_MONOTONIC, &wall);
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
  return {wall.tv_sec * 1e3 + wall.tv_nsec / 1e6, cpu.tv_sec * 1e3 + cpu.tv_nsec / 1e6};
}

double Cpu(const Now& from, const Now& to) { return to.cpu_ms - from.cpu_ms; }

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string name = absl::GetFlag(FLAGS_schedule);
  const int D = absl::GetFlag(FLAGS_stages), V = absl::GetFlag(FLAGS_chunks),
            M = absl::GetFlag(FLAGS_microbatches);
  std::vector<double> walls, cpus;
  for (int run = 0; run < std::max(1, absl::GetFlag(FLAGS_repeat)); ++run) {
    const auto t0 = Sample();
    absl::StatusOr<pp::prog::Schedule> compute = pp::prog::Generate(name, D, V, M);
    const auto t1 = Sample();
    absl::StatusOr<pp::prog::Schedule> lowered =
        compute.ok() ? pp::prog::LowerComms(*compute) : compute;
    const auto t2 = Sample();
    absl::StatusOr<pp::plan::Simulation> sim =
        lowered.ok() ? pp::plan::ValidateAndSimulate(*lowered, pp::plan::CostModel{})
                     : absl::StatusOr<pp::plan::Simulation>(lowered.status());
    const auto t3 = Sample();
    if (!sim.ok()) {
      std::cerr << "plan_bench: " << sim.status() << "\n";
      return 1;
    }
    size_t actions = 0;
    for (const auto& program : lowered->programs) actions += program.size();
    walls.push_back(t3.wall_ms - t0.wall_ms);
    cpus.push_back(Cpu(t0, t3));
    std::cout << name << " D=" << D << " V=" << V << " M=" << M << ": " << actions
              << " actions; CPU ms: generate " << Cpu(t0, t1) << ", lower " << Cpu(t1, t2)
              << ", validate + simulate " << Cpu(t2, t3) << ", total " << cpus.back() << " (wall "
              << walls.back() << "); bubble " << sim->bubble_fraction << "\n";
  }
  std::sort(walls.begin(), walls.end());
  std::sort(cpus.begin(), cpus.end());
  std::cout << "end to end over " << cpus.size() << " runs: CPU best " << cpus.front()
            << " ms, median " << cpus[cpus.size() / 2] << " ms; wall best " << walls.front()
            << " ms, median " << walls[walls.size() / 2] << " ms (target < 100 ms)\n";
  return 0;
}
