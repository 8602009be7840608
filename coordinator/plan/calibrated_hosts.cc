#include "coordinator/plan/calibrated_hosts.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pp::plan {

Link SlowestLink(const pp::v1::Calibration& calibration) {
  Link link;
  for (const pp::v1::RankCalibration& rank : calibration.ranks()) {
    if (rank.rank() + 1 >= calibration.ranks_size()) continue;
    link.latency = std::max(link.latency, rank.link_latency_seconds());
    const double bw = rank.link_bytes_per_second();
    if (bw > 0 && (link.bandwidth == 0 || bw < link.bandwidth)) link.bandwidth = bw;
  }
  return link;
}

CalibratedHosts HostsOf(const pp::v1::Calibration& calibration, int D, int threads) {
  threads = std::max(threads, 1);
  CalibratedHosts hosts;
  hosts.rank_host.assign(D, -1);
  hosts.calibration_rate.assign(D, 1.0);
  std::vector<int> cores;                 // per host, the largest reported
  std::vector<std::vector<int>> members;  // per host, its ranks
  std::map<std::string, int> by_machine;
  const auto new_host = [&](int r, int host_cores) {
    hosts.rank_host[r] = static_cast<int>(cores.size());
    cores.push_back(host_cores);
    members.push_back({r});
  };
  for (const pp::v1::RankCalibration& rank : calibration.ranks()) {
    const int r = rank.rank();
    if (r < 0 || r >= D || hosts.rank_host[r] >= 0) continue;
    if (rank.machine().empty() || rank.cores() < 1) {
      new_host(r, threads);  // unknown: alone, at full speed
      continue;
    }
    auto [it, added] = by_machine.try_emplace(rank.machine(), static_cast<int>(cores.size()));
    if (added) {
      new_host(r, rank.cores());
      continue;
    }
    hosts.rank_host[r] = it->second;
    cores[it->second] = std::max(cores[it->second], rank.cores());
    members[it->second].push_back(r);
  }
  for (int r = 0; r < D; ++r) {
    if (hosts.rank_host[r] < 0) new_host(r, threads);
  }
  std::vector<std::string> shared;
  for (size_t h = 0; h < cores.size(); ++h) {
    const int capacity = std::max(1, cores[h] / threads);
    hosts.host_cores.push_back(capacity);
    const int k = static_cast<int>(members[h].size());
    if (k <= capacity) continue;
    for (int r : members[h]) hosts.calibration_rate[r] = static_cast<double>(capacity) / k;
    std::sort(members[h].begin(), members[h].end());
    shared.push_back(absl::StrCat(k, " ranks on ", cores[h], " cores (ranks ",
                                  absl::StrJoin(members[h], ","), " on one machine",
                                  threads > 1 ? absl::StrCat(", ", threads, " threads each") : "",
                                  ")"));
  }
  hosts.summary = absl::StrJoin(shared, "; ");
  return hosts;
}

}  // namespace pp::plan
