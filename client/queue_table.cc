#include "client/queue_table.h"

#include <algorithm>
#include <array>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "client/clock_text.h"
#include "common/mesh.h"

namespace pp::client {
namespace {

using Cells = std::array<std::string, 8>;

// Without trailing blanks when the reason is empty.
std::string Row(const Cells& cells) {
  std::string row = absl::StrFormat("%-4s %-24s %-14s %-12s %-7s %-8s %-9s %s", cells[0], cells[1],
                                    cells[2], cells[3], cells[4], cells[5], cells[6], cells[7]);
  absl::StripTrailingAsciiWhitespace(&row);
  return row + "\n";
}

std::string PriorityText(const pp::v1::Job& job) {
  const std::string& name = job.spec().priority();
  return absl::StrCat(name.empty() ? "default" : name, " (", job.priority(), ")");
}

std::string WaitingText(const pp::v1::Job& job, double now_unix) {
  // An older ppcoord does not say when the job was queued.
  return job.queued_unix() > 0 ? ClockText(now_unix - job.queued_unix()) : "-";
}

// ppcoord estimates from the running jobs' step times. Without an estimate only a job that waits
// for nothing, and has no job ahead of it, can be said to start now.
std::string EstimatedStartText(const pp::v1::Job& job) {
  if (job.estimated_start_seconds() > 0) {
    return absl::StrCat("~", ClockText(job.estimated_start_seconds()));
  }
  if (job.queue_position() > 1 || !job.reason().empty()) return "unknown";
  return "now";
}

std::string JobRow(const pp::v1::Job& job, double now_unix) {
  const int position = job.queue_position();
  return Row({position > 0 ? absl::StrCat(position) : "-", job.id(), PriorityText(job),
              job.owner().empty() ? "-" : job.owner(), absl::StrCat(common::WorldSize(job.spec())),
              WaitingText(job, now_unix), EstimatedStartText(job), job.reason()});
}

// The order ppcoord tries them; jobs it gave no position (an older ppcoord) follow in submission
// order, which is ListJobs' order, hence the stable sort.
std::vector<const pp::v1::Job*> QueuedInOrder(const std::vector<pp::v1::Job>& jobs) {
  std::vector<const pp::v1::Job*> queued;
  for (const pp::v1::Job& job : jobs) {
    if (job.state() == pp::v1::QUEUED) queued.push_back(&job);
  }
  auto key = [](const pp::v1::Job* job) {
    return std::make_pair(job->queue_position() <= 0, job->queue_position());
  };
  std::stable_sort(queued.begin(), queued.end(),
                   [&key](const pp::v1::Job* a, const pp::v1::Job* b) { return key(a) < key(b); });
  return queued;
}

std::string Count(int n, absl::string_view noun) {
  return absl::StrCat(n, " ", noun, n == 1 ? "" : "s");
}

std::string RunningLine(const std::vector<pp::v1::Job>& jobs) {
  int running = 0;
  int workers = 0;
  for (const pp::v1::Job& job : jobs) {
    if (job.state() != pp::v1::RUNNING) continue;
    ++running;
    workers += common::WorldSize(job.spec());
  }
  return absl::StrCat("running: ", Count(running, "job"), " on ", Count(workers, "worker"), "\n");
}

}  // namespace

std::string QueueTable(const std::vector<pp::v1::Job>& jobs, double now_unix) {
  const std::vector<const pp::v1::Job*> queued = QueuedInOrder(jobs);
  std::string text;
  if (queued.empty()) {
    text = "no queued jobs\n";
  } else {
    text = Row({"POS", "JOB", "PRIORITY", "OWNER", "WORKERS", "WAITING", "EST START", "REASON"});
    for (const pp::v1::Job* job : queued) absl::StrAppend(&text, JobRow(*job, now_unix));
  }
  return text + RunningLine(jobs);
}

}  // namespace pp::client
