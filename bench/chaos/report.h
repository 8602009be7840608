// What a chaos or load run measured, and the table it prints (docs/testing.md, "Chaos and load").
// Contract: RpcStats is thread-safe (the load run's clients record into one); Report is filled by
// one thread after the run. A code is "expected" when the run's kind of fault explains it
// (UNAVAILABLE while ppcoord is down, RESOURCE_EXHAUSTED from the documented limits).
#ifndef PP_BENCH_CHAOS_REPORT_H_
#define PP_BENCH_CHAOS_REPORT_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "grpcpp/support/status.h"

namespace pp::chaos {

// The p-th percentile (0..100) of `values` by nearest rank; 0 when empty.
double Percentile(std::vector<double> values, double p);

// VmHWM of /proc/<pid>/status in KiB; 0 once the process is gone.
int64_t PeakRssKiB(pid_t pid);

// Latency of every RPC, by method, and the error codes of those that failed.
class RpcStats {
 public:
  void Record(const std::string& method, const grpc::Status& status, double seconds);
  std::vector<double> latencies() const;  // of every method
  std::map<std::string, std::vector<double>> by_method() const;
  std::map<grpc::StatusCode, int> errors() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::vector<double>> latencies_;
  std::map<grpc::StatusCode, int> errors_;
};

struct JobOutcome {
  std::string job_id;
  std::string state;    // the final JobState's name
  int restarts = 0;      // the job's restart log: automatic restarts and ppcoord's own
  bool bitwise = false;  // final weights equal the uninterrupted reference bit for bit
  std::string detail;    // why not, when not
};

struct Report {
  std::string title;
  std::map<std::string, int> faults;                // by kind; -1: not possible here
  std::map<std::string, std::string> fault_notes;   // why a kind could not be injected
  std::vector<JobOutcome> jobs;
  std::map<std::string, std::string> notes;  // more rows, figure -> value
  std::map<grpc::StatusCode, int> rpc_errors;
  std::set<grpc::StatusCode> expected_codes;
  std::vector<double> rpc_seconds;
  std::map<std::string, std::vector<double>> rpc_seconds_by_method;
  std::vector<double> heartbeat_seconds;
  int64_t coordinator_peak_rss_kib = 0;  // the largest over every ppcoord of the run
  double wall_seconds = 0;
  bool training_ok = true;  // load run: the job trained under the load is still RUNNING

  int UnexpectedErrors() const;
  int JobsCompleted() const;  // SUCCEEDED
  bool AllBitwise() const;
  // The table, one row per figure.
  std::string Table() const;
};

}  // namespace pp::chaos

#endif  // PP_BENCH_CHAOS_REPORT_H_
