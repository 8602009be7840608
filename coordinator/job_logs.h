// GetJobLogs (internal to ppcoord): the lines workers wrote for a job's tasks, read from every
// live worker with Worker.ReadTaskLog and merged into pages (docs/jobs.md "Worker logs").
//
// Contract:
// - CheckLogsRequest: max_lines 0 means kDefaultLogLines, at most kMaxLogLines; a negative
//   max_lines or rank, or a page token GetJobLogs did not hand out, is INVALID_ARGUMENT naming
//   the field.
// - A page token holds each worker's last seq read (LogPositions), for the workers that had one;
//   EncodeLogToken and DecodeLogToken are inverse, and DecodeLogToken refuses anything else.
// - MergeJobLogs: workers in name order, each one's lines oldest first; with a rank, the other
//   ranks' lines are skipped (read past); at most max_lines lines and kMaxLogPageBytes (at least
//   one line). A worker's position moves to the last line read from it; the workers after the
//   page filled keep theirs, and only the workers whose lines the page reached add their
//   `dropped`. next_page_token is always set.
// - JobLogReader::Read: NotFound for an unknown job; then asks every IDLE or BUSY registered
//   worker in parallel, each within `deadline`; a worker that does not answer in time, or answers
//   with an error, is listed in `unreachable` (its position kept). Returns within about
//   `deadline`, however many workers there are.
// Thread-safe: the functions are pure; JobLogReader locks its channel cache, Read may run on any
// number of gRPC handler threads at once and takes no lock of JobManager's beyond its own calls.
#ifndef PP_COORDINATOR_JOB_LOGS_H_
#define PP_COORDINATOR_JOB_LOGS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/security/credentials.h"
#include "pp/v1/coordinator.pb.h"
#include "pp/v1/worker.pb.h"

namespace pp::coordinator {

class JobManager;

inline constexpr int kDefaultLogLines = 1000;
inline constexpr int kMaxLogLines = 10000;
// A page stops before its lines pass this many bytes (text and worker names), so that it stays
// under gRPC's 4 MiB default receive limit (10000 lines of 4 KiB would not).
inline constexpr int64_t kMaxLogPageBytes = 2 << 20;
// How long GetJobLogs waits for each worker's ReadTaskLog.
inline constexpr absl::Duration kLogReadDeadline = absl::Seconds(2);

// Worker name -> the last seq read from it (lines after it come next).
using LogPositions = std::map<std::string, int64_t>;

struct LogsQuery {
  std::string job_id;
  std::optional<int> rank;
  int max_lines = kDefaultLogLines;
  LogPositions positions;
};

absl::StatusOr<LogsQuery> CheckLogsRequest(const pp::v1::GetJobLogsRequest& request);

std::string EncodeLogToken(const LogPositions& positions);
absl::StatusOr<LogPositions> DecodeLogToken(absl::string_view token);

// One worker's answer to ReadTaskLog.
struct WorkerLog {
  std::string worker;
  pp::v1::ReadTaskLogResponse answer;
};

// `logs`: the workers that answered; `positions`: where the query started (the unreachable
// workers' entries pass through unchanged).
pp::v1::GetJobLogsResponse MergeJobLogs(std::vector<WorkerLog> logs, const LogsQuery& query);

class JobLogReader {
 public:
  // Workers are dialled with `credentials` (ppcoord's mutual TLS), plaintext when null.
  explicit JobLogReader(std::shared_ptr<grpc::ChannelCredentials> credentials,
                        absl::Duration deadline = kLogReadDeadline);

  absl::StatusOr<pp::v1::GetJobLogsResponse> Read(JobManager& jobs,
                                                  const pp::v1::GetJobLogsRequest& request);

 private:
  // The channel to `address`, kept while a worker is registered there.
  std::shared_ptr<grpc::Channel> ChannelFor(const std::string& address) ABSL_LOCKS_EXCLUDED(mu_);
  // ReadTaskLog to each of `workers` from its position in `query`, all at once; each answer or
  // name goes to `answered` or `unreachable`.
  void Ask(const std::vector<pp::v1::WorkerInfo>& workers, const LogsQuery& query,
           std::vector<WorkerLog>* answered, std::vector<std::string>* unreachable)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Drops the channels of addresses no registered worker has any more.
  void Prune(const std::vector<pp::v1::WorkerInfo>& live) ABSL_LOCKS_EXCLUDED(mu_);

  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  const absl::Duration deadline_;
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_JOB_LOGS_H_
