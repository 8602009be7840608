#include "bench/chaos/recovery_figures.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "bench/chaos/report.h"

namespace pp::chaos {
namespace {

constexpr double kGoalSeconds = 5;  // kill-to-next-commit on loopback

// "1s" out of EVENT_RESTARTED's "... (placed after a backoff of 1s)"; "" when it names none.
std::string Backoff(const std::string& message) {
  constexpr char kMark[] = "backoff of ";
  const size_t at = message.find(kMark);
  if (at == std::string::npos) return "";
  const size_t from = at + sizeof(kMark) - 1;
  return message.substr(from, message.find(')', from) - from);
}

void Row(std::string* out, const std::string& figure, const std::string& value) {
  absl::StrAppendFormat(out, "| %-35s | %s\n", figure, value);
}

std::string Seconds(double s) { return s < 0 ? "-" : absl::StrFormat("%.2f s", s); }

std::string KillLine(int n, const KillSample& k) {
  std::string line =
      absl::StrCat("kill ", n, ": step ", k.step, ", ", k.worker, " (newest checkpoint ",
                   k.newest_before, "): noticed ", Seconds(k.noticed));
  if (!k.backoff.empty()) absl::StrAppend(&line, " (backoff ", k.backoff, ")");
  absl::StrAppend(&line, ", placed ", Seconds(k.placed));
  if (k.placed_workers > 0) absl::StrAppend(&line, " on ", k.placed_workers, " workers");
  if (k.committed >= 0) {
    absl::StrAppend(&line, ", checkpoint ", k.commit_step, " committed ", Seconds(k.committed));
  } else {
    absl::StrAppend(&line, ", no newer checkpoint committed");
  }
  if (k.grown >= 0) absl::StrAppend(&line, "; grew back ", Seconds(k.grown), " after restart");
  return line;
}

std::string JobLine(const JobResult& job) {
  std::string line = absl::StrCat(pp::v1::JobState_Name(job.last.state()));
  if (!job.ended) absl::StrAppend(&line, " (did not end)");
  absl::StrAppend(&line, absl::StrFormat(" in %.1f s", job.seconds), ", restarts ",
                  job.last.restarts());
  if (job.last.resizes() > 0) absl::StrAppend(&line, ", resizes ", job.last.resizes());
  absl::StrAppend(&line, "; bitwise equal: ", job.bitwise ? "yes" : "no");
  if (!job.detail.empty()) absl::StrAppend(&line, " (", job.detail, ")");
  return line;
}

double Goodput(const JobResult& job) {
  return job.seconds > 0 ? job.last.spec().train().steps() / job.seconds : 0;
}

}  // namespace

void ReadKill(const std::vector<pp::v1::JobEvent>& events, double kill_unix, KillSample* sample) {
  sample->newest_before = 0;
  for (const pp::v1::JobEvent& e : events) {
    if (e.kind() == pp::v1::EVENT_CHECKPOINT && e.time_unix() <= kill_unix) {
      sample->newest_before = std::max(sample->newest_before, e.step());
    }
  }
  double placed_unix = -1;
  for (const pp::v1::JobEvent& e : events) {
    if (e.time_unix() <= kill_unix) continue;
    const double after = e.time_unix() - kill_unix;
    const bool resized = e.kind() == pp::v1::EVENT_RESIZED;
    if (sample->noticed < 0 && (e.kind() == pp::v1::EVENT_RESTARTED || resized)) {
      sample->noticed = after;
      sample->backoff = Backoff(e.message());
      absl::Duration backoff;
      if (absl::ParseDuration(sample->backoff, &backoff)) {
        sample->backoff_seconds = absl::ToDoubleSeconds(backoff);
      }
    }
    if (placed_unix < 0 && (e.kind() == pp::v1::EVENT_PLACED || resized)) {
      placed_unix = e.time_unix();
      sample->placed = after;
    }
    if (placed_unix >= 0 && e.kind() == pp::v1::EVENT_CHECKPOINT &&
        e.step() > sample->newest_before) {
      sample->committed = after;
      sample->commit_step = e.step();
      return;
    }
  }
}

bool Passed(const ModeResult& result) {
  for (const JobResult* job : {&result.baseline, &result.faulted}) {
    if (!job->ended || job->last.state() != pp::v1::SUCCEEDED || !job->bitwise) return false;
  }
  return result.problems.empty();
}

std::string ModeTable(const ModeResult& result, int kill_every) {
  std::string out =
      absl::StrCat("== ", result.title, absl::StrFormat(" (%.1f s)\n", result.wall_seconds));
  std::vector<double> latencies;
  std::vector<double> less_backoff;
  for (size_t n = 0; n < result.kills.size(); ++n) {
    const KillSample& kill = result.kills[n];
    absl::StrAppend(&out, "  ", KillLine(n + 1, kill), "\n");
    if (kill.committed < 0) continue;
    latencies.push_back(kill.committed);
    less_backoff.push_back(kill.committed - kill.backoff_seconds);
  }
  const int under =
      std::count_if(latencies.begin(), latencies.end(), [](double s) { return s < kGoalSeconds; });
  Row(&out, "kill-to-next-commit min/median/max",
      latencies.empty()
          ? "no sample"
          : absl::StrFormat("%.2f / %.2f / %.2f s over %d kills (goal < %.0f s on loopback: "
                            "%d of %d under)",
                            Percentile(latencies, 0), Percentile(latencies, 50),
                            Percentile(latencies, 100), latencies.size(), kGoalSeconds, under,
                            result.kills.size()));
  if (!less_backoff.empty()) {
    Row(&out, "  less ppcoord's restart backoff",
        absl::StrFormat("%.2f / %.2f / %.2f s (the backoff: 1 s, doubled at each restart in a row)",
                        Percentile(less_backoff, 0), Percentile(less_backoff, 50),
                        Percentile(less_backoff, 100)));
  }
  const double with = Goodput(result.faulted);
  const double without = Goodput(result.baseline);
  Row(&out, absl::StrCat("goodput, a kill due every ", kill_every, " steps"),
      absl::StrFormat("%.2f steps/s (%d kills in %d steps) against %.2f steps/s without "
                      "failures: ratio %.3f",
                      with, result.kills.size(), result.faulted.last.spec().train().steps(),
                      without, without > 0 ? with / without : 0));
  Row(&out, "baseline job " + result.baseline.id, JobLine(result.baseline));
  Row(&out, "faulted job " + result.faulted.id, JobLine(result.faulted));
  for (const std::string& problem : result.problems) Row(&out, "PROBLEM", problem);
  absl::StrAppend(&out, "result: ", Passed(result) ? "PASS" : "FAIL", "\n");
  return out;
}

}  // namespace pp::chaos
