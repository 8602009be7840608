#include "worker/daemon/task_log.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace pp::daemon {
namespace {

// The length of the valid UTF-8 sequence at text[i], 0 when there is none: protobuf refuses a
// string field that is not UTF-8, and an error message may quote any bytes (a path, a file).
size_t Utf8Length(absl::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char c = byte(i);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned char low = 0x80, high = 0xBF;  // the allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) low = 0xA0;   // no overlong forms
    if (c == 0xED) high = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) low = 0x90;
    if (c == 0xF4) high = 0x8F;  // nothing past U+10FFFF
  } else {
    return 0;
  }
  if (i + n > text.size() || byte(i + 1) < low || byte(i + 1) > high) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return n;
}

std::string ValidUtf8(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t n = Utf8Length(text, i);
    if (n == 0) {
      out.push_back('?');
      ++i;
    } else {
      out.append(text.data() + i, n);
      i += n;
    }
  }
  return out;
}

std::string CutMarker(size_t cut) { return absl::StrCat(" [... ", cut, " bytes cut]"); }

}  // namespace

std::string BoundedLine(absl::string_view text, int max_bytes) {
  std::string line = ValidUtf8(text);
  const size_t max = static_cast<size_t>(std::max(max_bytes, 0));
  if (line.size() <= max) return line;
  // The marker for the whole line is at least as long as the one for what is cut.
  const size_t longest = CutMarker(line.size()).size();
  if (longest >= max) return line.substr(0, 0);
  size_t keep = max - longest;
  while (keep > 0 && (static_cast<unsigned char>(line[keep]) & 0xC0) == 0x80) --keep;
  const size_t cut = line.size() - keep;
  line.resize(keep);
  return line + CutMarker(cut);
}

int64_t TaskLog::Append(const std::string& job_id, int attempt, int rank, absl::string_view text,
                        absl::Time now) {
  const double time_unix = absl::ToDoubleSeconds(now - absl::UnixEpoch());
  absl::MutexLock lock(&mu_);
  JobLines& job = JobFor(job_id);
  job.touched = ++appends_;
  for (absl::string_view part : absl::StrSplit(text, '\n')) {
    if (!part.empty() && part.back() == '\r') part.remove_suffix(1);
    pp::v1::TaskLogLine line;
    line.set_seq(job.next_seq++);
    line.set_time_unix(time_unix);
    line.set_attempt(attempt);
    line.set_rank(rank);
    line.set_text(BoundedLine(part, limits_.max_line_bytes));
    Keep(job, std::move(line));
  }
  return job.next_seq - 1;
}

void TaskLog::Keep(JobLines& job, pp::v1::TaskLogLine line) {
  job.bytes += static_cast<int64_t>(line.text().size());
  job.lines.push_back(std::move(line));
  while (!job.lines.empty() && (static_cast<int>(job.lines.size()) > limits_.max_lines ||
                                job.bytes > limits_.max_bytes)) {
    job.bytes -= static_cast<int64_t>(job.lines.front().text().size());
    job.lines.pop_front();
  }
}

TaskLog::JobLines& TaskLog::JobFor(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  if (it != jobs_.end()) return it->second;
  JobLines& job = jobs_[job_id];
  job.touched = ++appends_;  // the newest: never its own victim
  Evict();
  return job;
}

void TaskLog::Evict() {
  std::vector<std::pair<int64_t, std::string>> order;  // (touched, job), newest first
  order.reserve(jobs_.size());
  for (const auto& [id, job] : jobs_) order.emplace_back(job.touched, id);
  std::sort(order.rbegin(), order.rend());
  for (size_t i = 0; i < order.size(); ++i) {
    if (i >= static_cast<size_t>(limits_.max_known_jobs)) {
      jobs_.erase(order[i].second);
    } else if (i >= static_cast<size_t>(limits_.max_jobs)) {
      JobLines& job = jobs_[order[i].second];
      job.lines.clear();
      job.bytes = 0;
    }
  }
}

absl::StatusOr<pp::v1::ReadTaskLogResponse> TaskLog::Read(
    const pp::v1::ReadTaskLogRequest& request) {
  if (request.max_lines() < 0 || request.max_lines() > kMaxReadLines) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_lines: must be in [0, ", kMaxReadLines, "], got ", request.max_lines()));
  }
  if (request.after_seq() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("after_seq: must be >= 0, got ", request.after_seq()));
  }
  const int max_lines = request.max_lines() == 0 ? kDefaultReadLines : request.max_lines();
  pp::v1::ReadTaskLogResponse response;
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(request.job_id());
  if (it == jobs_.end()) return response;
  const JobLines& job = it->second;
  // Seqs are consecutive: the held lines are first_held .. next_seq - 1.
  const int64_t first_held = job.lines.empty() ? job.next_seq : job.lines.front().seq();
  response.set_dropped(std::max<int64_t>(0, first_held - 1 - request.after_seq()));
  const int64_t skip = std::max<int64_t>(0, request.after_seq() + 1 - first_held);
  for (auto line = job.lines.begin() + std::min<int64_t>(skip, job.lines.size());
       line != job.lines.end() && response.lines_size() < max_lines; ++line) {
    *response.add_lines() = *line;
  }
  return response;
}

TaskLogWriter::TaskLogWriter(TaskLog* log, std::string job_id, int attempt, int rank,
                             std::ostream* echo)
    : log_(log), job_id_(std::move(job_id)), attempt_(attempt), rank_(rank), echo_(echo) {}

void TaskLogWriter::Line(absl::string_view text) const {
  if (log_ != nullptr) log_->Append(job_id_, attempt_, rank_, text);
  if (echo_ == nullptr) return;
  // One write per call, so lines of concurrent tasks and threads do not interleave mid-line.
  std::string out;
  for (absl::string_view part : absl::StrSplit(text, '\n')) {
    absl::StrAppend(&out, "ppworker: job ", job_id_, " rank ", rank_, ": ", part, "\n");
  }
  *echo_ << out << std::flush;
}

}  // namespace pp::daemon
