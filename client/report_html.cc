#include "client/report_html.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/report_svg.h"
#include "common/bubble.h"
#include "common/job_spec.h"

namespace pp::client {
namespace {

constexpr char kStyle[] = R"(<style>
body { font-family: "DejaVu Sans", Verdana, sans-serif; margin: 24px; color: #222;
  max-width: 960px; }
h1 { font-size: 22px; margin: 0 0 12px; } h2 { font-size: 17px; margin: 28px 0 8px; }
h3 { font-size: 14px; margin: 12px 0 4px; }
table { border-collapse: collapse; font-size: 13px; }
td, th { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; }
svg text { font-family: "DejaVu Sans", Verdana, sans-serif; }
svg .tick { font-size: 11px; fill: #555; } svg .axis { font-size: 12px; fill: #333; }
svg .title { font-size: 14px; font-weight: bold; fill: #222; }
svg .legend, svg .mark { font-size: 11px; } svg .cell { font-size: 10px; fill: #fff; }
.note { color: #666; font-size: 13px; } .key { font-size: 13px; } td.time { white-space: nowrap; }
.key span { display: inline-block; width: 12px;
  height: 12px; margin: 0 4px 0 12px; vertical-align: middle; }
</style>
)";

std::string TimeText(double unix_seconds) {
  if (unix_seconds <= 0) return "-";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S UTC",
                          absl::FromUnixMicros(static_cast<int64_t>(unix_seconds * 1e6)),
                          absl::UTCTimeZone());
}

std::string Row(const std::string& name, const std::string& escaped_value) {
  return absl::StrCat("<tr><th>", name, "</th><td>", escaped_value, "</td></tr>\n");
}

// "1f1b D=2 V=1 M=4 TP=1 DP=1 (4 layers)".
std::string LayoutLabel(const pp::v1::JobSpec& spec) {
  const pp::v1::ParallelSpec& p = spec.parallel();
  return absl::StrFormat("%s D=%d V=%d M=%d TP=%d DP=%d", common::ScheduleLabel(p), p.pipeline(),
                         std::max(p.chunks(), 1), spec.train().microbatches(),
                         std::max(p.tensor(), 1), std::max(p.data(), 1));
}

std::string Summary(const ReportInput& in) {
  const pp::v1::Job& job = in.job;
  std::string state = pp::v1::JobState_Name(job.state());
  if (!job.reason().empty()) absl::StrAppend(&state, ": ", job.reason());
  std::string out = "<table class=\"summary\">\n";
  absl::StrAppend(&out, Row("state", HtmlEscape(state)),
                  Row("step", absl::StrCat(job.step(), " of ", job.spec().train().steps())),
                  Row("loss", job.step() > 0 ? absl::StrFormat("%.4f", job.loss()) : "-"));
  if (job.eval_step() > 0) {
    absl::StrAppend(&out, Row("eval loss", absl::StrFormat("%.4f after step %d", job.eval_loss(),
                                                           job.eval_step())));
  }
  absl::StrAppend(
      &out, Row("layout", HtmlEscape(LayoutLabel(job.spec()))),
      Row("model", absl::StrFormat("%d layers, d_model %d, %d heads, seq_len %d",
                                   job.spec().model().n_layers(), job.spec().model().d_model(),
                                   job.spec().model().n_heads(), job.spec().model().seq_len())),
      Row("restarts",
          absl::StrCat(job.restarts(), " (attempt ", job.attempt(), "), resizes ", job.resizes())),
      Row("created", TimeText(job.created_unix())), Row("updated", TimeText(job.updated_unix())));
  if (!job.owner().empty()) absl::StrAppend(&out, Row("owner", HtmlEscape(job.owner())));
  return absl::StrCat(out, "</table>\n");
}

// Restarts, resumes and resizes, at the step each new attempt starts from.
std::vector<ChartMarker> Markers(const pp::v1::Job& job) {
  std::vector<ChartMarker> markers;
  for (const pp::v1::JobRestart& r : job.restart_log()) {
    ChartMarker m;
    m.x = r.from_step();
    // JobRecord::Resize appends "resized from ... to ..." to the entry of the attempt it re-laid.
    m.kind = absl::StrContains(r.reason(), "resized") ? "resize"
             : r.automatic()                          ? "restart"
                                                      : "resume";
    m.label = absl::StrCat(m.kind, " ", r.attempt());
    m.title = absl::StrCat("attempt ", r.attempt(), " from step ", r.from_step(), " (",
                           TimeText(r.time_unix()), "): ", r.reason());
    markers.push_back(std::move(m));
  }
  return markers;
}

using StepValue = std::function<double(const pp::v1::JobStepRecord&)>;
using StepFilter = std::function<bool(const pp::v1::JobStepRecord&)>;

// One point per step that passes `keep` and has a finite value.
ChartSeries SeriesOf(const std::string& name, const std::string& color,
                     const std::vector<pp::v1::JobStepRecord>& steps, const StepValue& value,
                     const StepFilter& keep = nullptr) {
  ChartSeries series{name, color, {}};
  for (const pp::v1::JobStepRecord& s : steps) {
    if (keep && !keep(s)) continue;
    if (const double v = value(s); std::isfinite(v)) series.points.emplace_back(s.step(), v);
  }
  return series;
}

// The frame every curve shares: the steps recorded, the markers, the skipped steps.
LineChart ChartFrame(const ReportInput& in, const std::string& id, const std::string& title,
                     const std::string& y_label) {
  LineChart chart;
  chart.id = id, chart.title = title, chart.y_label = y_label;
  chart.x_min = in.steps.front().step(), chart.x_max = in.steps.back().step();
  for (const pp::v1::JobStepRecord& s : in.steps) {
    chart.x_min = std::min<double>(chart.x_min, s.step());
    chart.x_max = std::max<double>(chart.x_max, s.step());
    if (s.skipped()) chart.skipped.push_back(s.step());
  }
  chart.markers = Markers(in.job);
  return chart;
}

std::string Curves(const ReportInput& in) {
  if (in.steps.empty()) return "<p class=\"note\">No steps recorded yet: no curves.</p>\n";
  const auto& steps = in.steps;
  LineChart loss = ChartFrame(in, "chart-loss", "Loss", "loss");
  loss.series = {SeriesOf("loss", "#4e79a7", steps, [](auto& s) { return s.loss(); }),
                 SeriesOf(
                     "eval loss", "#f28e2b", steps, [](auto& s) { return s.eval_loss(); },
                     [](auto& s) { return s.has_eval(); })};
  loss.series[1].dots = true;
  LineChart lr = ChartFrame(in, "chart-lr", "Learning rate", "learning rate");
  lr.series = {
      SeriesOf("learning rate", "#59a14f", steps, [](auto& s) { return s.learning_rate(); })};
  std::string out = absl::StrCat(RenderLineChart(loss), RenderLineChart(lr));
  ChartSeries norm = SeriesOf(
      "gradient norm", "#af7aa1", steps, [](auto& s) { return s.grad_norm(); },
      [](auto& s) { return s.grad_norm() != 0; });
  if (!norm.points.empty()) {  // a ppcoord from before grad_norm records 0
    LineChart chart =
        ChartFrame(in, "chart-grad-norm", "Gradient norm (before clipping)", "global norm");
    chart.series = {std::move(norm)};
    absl::StrAppend(&out, RenderLineChart(chart));
  }
  LineChart speed = ChartFrame(in, "chart-tokens", "Throughput", "tokens/s");
  speed.series = {
      SeriesOf("tokens/s", "#e15759", steps, [](auto& s) { return s.tokens_per_second(); })};
  LineChart bubble =
      ChartFrame(in, "chart-bubble", "Bubble (idle share of all ranks' time)", "bubble");
  bubble.percent = true;
  bubble.series = {
      SeriesOf("measured bubble", "#76b7b2", steps, [](auto& s) { return s.bubble_ratio(); })};
  if (in.planned_bubble >= 0) {
    bubble.reference = in.planned_bubble;
    bubble.reference_label = absl::StrFormat("simulated %.1f%% (F=1 B=2)", 100 * in.planned_bubble);
  }
  return absl::StrCat(out, RenderLineChart(speed), RenderLineChart(bubble));
}

// "2-4": the partition units of each stage, from the units per stage.
std::vector<std::string> UnitRanges(const std::vector<int>& stage_layers) {
  std::vector<std::string> ranges;
  int first = 0;
  for (int n : stage_layers) {
    ranges.push_back(n == 1 ? absl::StrCat(first) : absl::StrCat(first, "-", first + n - 1));
    first += n;
  }
  return ranges;
}

std::string Layout(const ReportInput& in) {
  if (in.job.placement().empty()) {
    return "<p class=\"note\">No placement: the job has not run yet.</p>\n";
  }
  const std::vector<std::string> units = UnitRanges(in.stage_layers);
  std::string out =
      "<table class=\"layout\">\n<tr><th>worker</th><th>address</th><th>rank</th><th>dp, pp, "
      "tp</th><th>stages</th><th>partition units (0 = embedding, last = head)</th></tr>\n";
  for (const pp::v1::RankPlacement& p : in.job.placement()) {
    std::vector<std::string> held;
    for (int s : p.stages()) {
      if (s >= 0 && s < static_cast<int>(units.size())) held.push_back(units[s]);
    }
    absl::StrAppend(&out, "<tr><td>", HtmlEscape(p.worker()), "</td><td>", HtmlEscape(p.address()),
                    "</td><td>", p.rank(), "</td><td>", p.dp(), ", ", p.pp(), ", ", p.tp(),
                    "</td><td>", absl::StrJoin(p.stages(), ", "), "</td><td>",
                    held.empty() ? "-" : absl::StrJoin(held, "; "), "</td></tr>\n");
  }
  return absl::StrCat(out, "</table>\n");
}

// The idle share of `timeline` (common/bubble.h): compute actions against first start to last end.
double BubbleOf(const pp::plan::Timeline& timeline) {
  std::vector<double> busy;
  double first = 0, last = 0;
  bool any = false;
  for (const auto& rank : timeline.ranks) {
    double compute = 0;
    for (const pp::plan::TimedAction& t : rank) {
      if (!prog::IsComm(t.action.kind)) compute += t.end - t.start;
      first = any ? std::min(first, t.start) : t.start;
      last = any ? std::max(last, t.end) : t.end;
      any = true;
    }
    busy.push_back(compute);
  }
  return common::IdleFraction(busy, last - first);
}

std::string Trace(const ReportInput& in) {
  if (!in.trace) return "<p class=\"note\">No traced step: ppcoord keeps none for this job.</p>\n";
  const pp::plan::Timeline measured = pp::plan::TimelineFromTrace(*in.trace);
  const double span =
      std::max(TimelineSpan(measured), in.simulated ? TimelineSpan(*in.simulated) : 0.0);
  std::string out = absl::StrFormat(
      "<p class=\"key\">Step %d, one time scale:<span style=\"background:#4e79a7\"></span>F"
      "<span style=\"background:#59a14f\"></span>B<span style=\"background:#76b7b2\"></span>I"
      "<span style=\"background:#edc948\"></span>W<span style=\"background:#9d9d9d\"></span>send"
      " / receive (thin). Bars say the microbatch from 1 (and the chunk, a.., when ranks hold "
      "several); "
      "hover one for its times.</p>\n"
      "<h3>As measured (bubble %.1f%%)</h3>\n",
      in.trace->step(), 100 * BubbleOf(measured));
  absl::StrAppend(&out, RenderTimeline(measured, span, "timeline-measured"));
  if (!in.simulated) {
    return absl::StrCat(out, "<p class=\"note\">No simulation: ", HtmlEscape(in.simulation_note),
                        "</p>\n");
  }
  absl::StrAppendFormat(&out,
                        "<h3>As simulated under this step's measured costs (bubble %.1f%%)</h3>\n",
                        100 * BubbleOf(*in.simulated));
  return absl::StrCat(out, RenderTimeline(*in.simulated, span, "timeline-simulated"));
}

std::string RestartLog(const pp::v1::Job& job) {
  if (job.restart_log().empty()) return "<p class=\"note\">None: the job ran as one attempt.</p>\n";
  std::string out =
      "<table class=\"restarts\">\n<tr><th>attempt</th><th>time</th><th>from step</th>"
      "<th>automatic</th><th>reason</th></tr>\n";
  for (const pp::v1::JobRestart& r : job.restart_log()) {
    absl::StrAppend(&out, "<tr><td>", r.attempt(), "</td><td class=\"time\">",
                    TimeText(r.time_unix()), "</td><td>", r.from_step(), "</td><td>",
                    r.automatic() ? "yes" : "no", "</td><td>", HtmlEscape(r.reason()),
                    "</td></tr>\n");
  }
  return absl::StrCat(out, "</table>\n");
}

}  // namespace

std::string RenderReport(const ReportInput& in) {
  const pp::v1::Job& job = in.job;
  const std::string name =
      job.spec().name().empty() ? job.id() : absl::StrCat(job.id(), " (", job.spec().name(), ")");
  return absl::StrCat(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>job ",
      HtmlEscape(name), "</title>\n", kStyle, "</head>\n<body>\n<h1>Job ", HtmlEscape(name),
      "</h1>\n", Summary(in), "<h2>Curves</h2>\n<p class=\"note\">One point per recorded step (",
      in.steps.size(),
      " recorded); eval loss only after evaluated steps. Dashed lines: restarts, resumes and "
      "resizes, at the step the new attempt starts from. Red ticks: skipped steps.</p>\n",
      Curves(in), "<h2>Layout</h2>\n", Layout(in), "<h2>Last traced step</h2>\n", Trace(in),
      "<h2>Restarts, resumes and resizes</h2>\n", RestartLog(job),
      "<p class=\"note\">Written by ppctl report", in.generated.empty() ? "" : " at ",
      HtmlEscape(in.generated), ".</p>\n</body>\n</html>\n");
}

}  // namespace pp::client
