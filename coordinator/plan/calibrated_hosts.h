// Which pipeline ranks share a machine's cores, from what calibrating them reported
// (pp.v1.RankCalibration machine and cores), and the slowest link between them, for
// parallel.schedule "auto" (calibrated.h).
//
// Ranks that report the same non-empty machine share one host. A rank that reports no machine or
// no cores (a worker from before these fields) is a host of its own that never slows down. A
// host's capacity, in ranks that can compute at once at full speed (CostModel.host_cores:
// simulate.h "Shared processors"), is its cores over train.threads (each rank computes on that
// many threads), at least 1; ranks of one machine that report different cores (different
// affinity masks) count the largest.
//
// Every placed worker times its units at the same time (worker/calibrate/calibrate.h), so a rank
// on a host with more ranks than capacity was timed at the rate min(1, capacity / ranks) of the
// processor sharing model: its compute times are that many times their time alone
// (calibration_rate). The chooser multiplies them by it before simulating with the sharing, so
// the sharing is not counted twice. The optimizer's time is left as measured: the ranks step
// their optimizers at about the same time in a real step too.
//
// Pure: no locks, no RPC, no clock.
#ifndef PP_COORDINATOR_PLAN_CALIBRATED_HOSTS_H_
#define PP_COORDINATOR_PLAN_CALIBRATED_HOSTS_H_

#include <string>
#include <vector>

#include "pp/v1/job.pb.h"

namespace pp::plan {

struct CalibratedHosts {
  std::vector<int> rank_host;   // per pipeline rank, into host_cores (CostModel.rank_host)
  std::vector<int> host_cores;  // per host: ranks computing at once at full speed
  // Per rank: the rate it computed at while every rank calibrated at once (1: alone).
  std::vector<double> calibration_rate;
  // "ranks 0,1,2,3 share 2 cores of one machine", hosts joined by "; "; empty when no host has
  // more ranks than capacity (the step is then simulated as without sharing).
  std::string summary;
};

// The slowest link of a calibration: the largest latency and the smallest bandwidth of the ranks'
// links to their next rank (the chooser costs every boundary with it).
struct Link {
  double latency = 0;    // seconds
  double bandwidth = 0;  // bytes/s; 0 = infinite (unmeasured)
};
Link SlowestLink(const pp::v1::Calibration& calibration);

// REQUIRES: calibration.ranks() have distinct rank() in 0..D-1 (calibrated.cc checks them first);
// a rank missing from it is a host of its own. `threads` <= 0 counts as 1.
CalibratedHosts HostsOf(const pp::v1::Calibration& calibration, int D, int threads);

}  // namespace pp::plan

#endif  // PP_COORDINATOR_PLAN_CALIBRATED_HOSTS_H_
