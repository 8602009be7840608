// The inline SVG drawings of `ppctl report` (client/report_html.h): line charts of per-step values
// and a step's timeline. Pure functions of their arguments, no script: the page they go in stays
// one self-contained file that a browser draws without a network.
//
// Contract of a line chart, which the tests (and Chromium's DOM in tests/client) count on: each
// series with at least one point is exactly one <polyline class="series"> whose `points`
// attribute holds one "x,y" pair per point given, in the order given, and whose `data-series`
// and `data-points` attributes carry the series' name and that count. A series without points
// draws nothing but its legend entry ("none"). A marker is a <g class="marker KIND"> group (a
// dashed line, its label, and a <title>: the browser's tooltip); a skipped step is a <rect
// class="skipped"> tick at the bottom of the plot. Every text given is HTML-escaped here.
#ifndef PP_CLIENT_REPORT_SVG_H_
#define PP_CLIENT_REPORT_SVG_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "coordinator/plan/plan.h"

namespace pp::client {

// `text` with & < > " ' as character references: safe in element text and quoted attributes.
std::string HtmlEscape(absl::string_view text);

struct ChartSeries {
  std::string name;                               // legend text and data-series
  std::string color;                              // a CSS color, e.g. "#4e79a7"
  std::vector<std::pair<double, double>> points;  // (step, value), finite values only
  bool dots = false;  // also a circle at each point (sparse series such as eval loss)
};

// A vertical line at step `x` across the plot: a restart, a resize, a resume.
struct ChartMarker {
  double x = 0;
  std::string kind;   // CSS class and data-kind: "restart", "resize", "resume"
  std::string label;  // short text at the top, e.g. "restart 2"
  std::string title;  // the tooltip: what happened and why
};

struct LineChart {
  std::string id;               // the <svg>'s id, e.g. "chart-loss"
  std::string title;            // drawn above the plot
  std::string y_label;          // e.g. "tokens/s"
  bool percent = false;         // y values are shares in [0, 1], labelled in %
  double x_min = 1, x_max = 1;  // the steps the x axis spans
  std::vector<ChartSeries> series;
  std::vector<ChartMarker> markers;
  std::vector<double> skipped;  // steps whose update was skipped
  // A horizontal dashed reference line (e.g. the simulated bubble) and its legend text; drawn
  // when reference_label is not empty. It is a <line class="reference">, not a series.
  double reference = 0;
  std::string reference_label;
};

// The chart as one <svg> element (width 920, height 280).
std::string RenderLineChart(const LineChart& chart);

// One step's ranks, actions as bars on a shared time axis: compute (F, B, I, W) full height with
// the microbatch (from 1) written in when it fits, communication as thin bars; each bar's <title>
// says what it is and when. `span_seconds` is the axis' length (pass the same span to draw two
// timelines to one scale); times are labelled in ms. An empty timeline draws a note instead.
std::string RenderTimeline(const pp::plan::Timeline& timeline, double span_seconds,
                           const std::string& id);

// The last end time of any action in `timeline` (0 when it has none).
double TimelineSpan(const pp::plan::Timeline& timeline);

}  // namespace pp::client

#endif  // PP_CLIENT_REPORT_SVG_H_
