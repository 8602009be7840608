#include "bench/chaos/report.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "tests/support/process.h"

namespace pp::chaos {
namespace {

std::string CodeName(grpc::StatusCode code) {
  static const std::map<grpc::StatusCode, std::string> names = {
      {grpc::CANCELLED, "CANCELLED"},
      {grpc::UNKNOWN, "UNKNOWN"},
      {grpc::INVALID_ARGUMENT, "INVALID_ARGUMENT"},
      {grpc::DEADLINE_EXCEEDED, "DEADLINE_EXCEEDED"},
      {grpc::NOT_FOUND, "NOT_FOUND"},
      {grpc::ALREADY_EXISTS, "ALREADY_EXISTS"},
      {grpc::PERMISSION_DENIED, "PERMISSION_DENIED"},
      {grpc::RESOURCE_EXHAUSTED, "RESOURCE_EXHAUSTED"},
      {grpc::FAILED_PRECONDITION, "FAILED_PRECONDITION"},
      {grpc::ABORTED, "ABORTED"},
      {grpc::OUT_OF_RANGE, "OUT_OF_RANGE"},
      {grpc::UNIMPLEMENTED, "UNIMPLEMENTED"},
      {grpc::INTERNAL, "INTERNAL"},
      {grpc::UNAVAILABLE, "UNAVAILABLE"},
      {grpc::DATA_LOSS, "DATA_LOSS"},
      {grpc::UNAUTHENTICATED, "UNAUTHENTICATED"},
  };
  auto it = names.find(code);
  return it == names.end() ? absl::StrCat("code ", static_cast<int>(code)) : it->second;
}

std::string Ms(double seconds) { return absl::StrFormat("%.1f ms", seconds * 1e3); }

void Row(std::string* out, const std::string& figure, const std::string& value) {
  absl::StrAppendFormat(out, "| %-34s | %s\n", figure, value);
}

}  // namespace

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * values.size()));
  return values[std::clamp<size_t>(rank, 1, values.size()) - 1];
}

int64_t PeakRssKiB(pid_t pid) {
  const std::string status = testing_support::ReadFile(absl::StrCat("/proc/", pid, "/status"));
  for (absl::string_view line : absl::StrSplit(status, '\n')) {
    if (!absl::ConsumePrefix(&line, "VmHWM:")) continue;
    line = absl::StripSuffix(absl::StripAsciiWhitespace(line), "kB");
    int64_t kib = 0;
    return absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &kib) ? kib : 0;
  }
  return 0;
}

void RpcStats::Record(const std::string& method, const grpc::Status& status, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  latencies_[method].push_back(seconds);
  if (!status.ok()) ++errors_[status.error_code()];
}

std::vector<double> RpcStats::latencies() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<double> all;
  for (const auto& [method, seconds] : latencies_) all.insert(all.end(), seconds.begin(), seconds.end());
  return all;
}

std::map<std::string, std::vector<double>> RpcStats::by_method() const {
  std::lock_guard<std::mutex> lock(mu_);
  return latencies_;
}

std::map<grpc::StatusCode, int> RpcStats::errors() const {
  std::lock_guard<std::mutex> lock(mu_);
  return errors_;
}

int Report::UnexpectedErrors() const {
  int n = 0;
  for (const auto& [code, count] : rpc_errors) n += expected_codes.count(code) ? 0 : count;
  return n;
}

int Report::JobsCompleted() const {
  return std::count_if(jobs.begin(), jobs.end(),
                       [](const JobOutcome& j) { return j.state == "SUCCEEDED"; });
}

bool Report::AllBitwise() const {
  return std::all_of(jobs.begin(), jobs.end(), [](const JobOutcome& j) { return j.bitwise; });
}

std::string Report::Table() const {
  std::string out = absl::StrCat("== ", title, absl::StrFormat(" (%.1f s)\n", wall_seconds));
  for (const auto& [kind, count] : faults) {
    auto note = fault_notes.find(kind);
    Row(&out, "faults: " + kind,
        count < 0 ? absl::StrCat("not possible here: ", note == fault_notes.end() ? "" : note->second)
                  : absl::StrCat(count));
  }
  if (!jobs.empty()) {
    Row(&out, "jobs completed", absl::StrCat(JobsCompleted(), " of ", jobs.size()));
  }
  for (const JobOutcome& j : jobs) {
    Row(&out, "bitwise equal: " + j.job_id,
        absl::StrCat(j.bitwise ? "yes" : "no", " (", j.state, " after ", j.restarts, " restarts)",
                     j.detail.empty() ? "" : ": " + j.detail));
  }
  for (const auto& [figure, value] : notes) Row(&out, figure, value);
  if (rpc_errors.empty()) Row(&out, "RPC errors", "none");
  for (const auto& [code, count] : rpc_errors) {
    Row(&out, "RPC errors: " + CodeName(code),
        absl::StrCat(count, expected_codes.count(code) ? " (expected)" : " (UNEXPECTED)"));
  }
  Row(&out, "RPC latency p50 / p99",
      absl::StrCat(Ms(Percentile(rpc_seconds, 50)), " / ", Ms(Percentile(rpc_seconds, 99)),
                   " over ", rpc_seconds.size(), " RPCs"));
  if (rpc_seconds_by_method.size() > 1) {
    for (const auto& [method, seconds] : rpc_seconds_by_method) {
      Row(&out, "  " + method + " p50 / p99",
          absl::StrCat(Ms(Percentile(seconds, 50)), " / ", Ms(Percentile(seconds, 99)), " over ",
                       seconds.size()));
    }
  }
  if (!heartbeat_seconds.empty()) {
    Row(&out, "heartbeat p50 / p99 / max",
        absl::StrCat(Ms(Percentile(heartbeat_seconds, 50)), " / ",
                     Ms(Percentile(heartbeat_seconds, 99)), " / ",
                     Ms(Percentile(heartbeat_seconds, 100)), " over ", heartbeat_seconds.size()));
  }
  Row(&out, "ppcoord peak RSS (VmHWM)",
      absl::StrFormat("%.1f MiB", coordinator_peak_rss_kib / 1024.0));
  return out;
}

}  // namespace pp::chaos
