// The load run: `clients` concurrent gRPC clients make `rpcs` mixed calls each (SubmitJob then
// CancelJob of a job that cannot be placed, GetJob, ListJobs following its pages, WatchJob up
// to its first event, PlanJob) against a loopback cluster training a job, while a fake worker
// registered beside the real ones heartbeats every 100 ms and times each heartbeat.
// Contract: bounded in time (every RPC has a 10 s deadline); every process it starts is gone when
// RunLoad returns. Expected errors: RESOURCE_EXHAUSTED from the documented limits (watch streams
// per client host, the gRPC thread quota).
#ifndef PP_BENCH_CHAOS_LOAD_RUN_H_
#define PP_BENCH_CHAOS_LOAD_RUN_H_

#include <cstdint>
#include <string>

#include "bench/chaos/report.h"

namespace pp::chaos {

struct LoadOptions {
  std::string bin_dir;  // ppcoord, ppworker
  std::string dir;      // the run's folder
  uint64_t seed = 1;
  int clients = 64;
  int rpcs = 1000;  // per client
};

Report RunLoad(const LoadOptions& options);

}  // namespace pp::chaos

#endif  // PP_BENCH_CHAOS_LOAD_RUN_H_
