#include "client/report_svg.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace pp::client {
namespace {

constexpr double kWidth = 920, kHeight = 280;
constexpr double kLeft = 72, kRight = 20, kTop = 44, kBottom = 40;
constexpr double kPlotWidth = kWidth - kLeft - kRight, kPlotHeight = kHeight - kTop - kBottom;

// A round tick distance (1, 2 or 5 x 10^k) that cuts `range` into about `target` pieces.
double NiceStep(double range, int target) {
  const double raw = range / target;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / magnitude;
  return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * magnitude;
}

// The multiples of NiceStep in [lo, hi], rounded to the step so that labels print short.
std::vector<double> Ticks(double lo, double hi, int target) {
  if (!(hi > lo)) return {lo};
  const double step = NiceStep(hi - lo, target);
  std::vector<double> ticks;
  for (double k = std::ceil(lo / step - 1e-9); k * step <= hi + step * 1e-9; ++k) {
    ticks.push_back(k * step + 0.0);  // + 0.0: no "-0"
  }
  return ticks;
}

std::string TickLabel(double v, bool percent) {
  if (std::abs(v) < 1e-12) v = 0;  // -0 and rounding noise
  if (percent) return absl::StrFormat("%g%%", std::round(v * 1e6) / 1e4);
  if (std::abs(v) >= 1e6) return absl::StrFormat("%gM", v / 1e6);
  if (std::abs(v) >= 1e4) return absl::StrFormat("%gk", v / 1e3);
  return absl::StrFormat("%g", v);
}

struct Range {
  double lo, hi;
};

// The y range of every point (and the reference line), widened to whole ticks; a flat or empty
// chart still gets a range, so every point maps inside the plot.
Range YRange(const LineChart& chart) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const ChartSeries& s : chart.series) {
    for (const auto& [x, y] : s.points) lo = std::min(lo, y), hi = std::max(hi, y);
  }
  if (!chart.reference_label.empty()) {
    lo = std::min(lo, chart.reference), hi = std::max(hi, chart.reference);
  }
  if (lo > hi) return {0, 1};
  if (chart.percent || (lo >= 0 && lo < 0.5 * hi)) lo = std::min(lo, 0.0);  // rates, shares: from 0
  if (hi - lo < 1e-12 * std::max(1.0, std::abs(hi))) {
    const double pad = std::max(std::abs(hi) * 0.1, 1e-6);
    lo -= pad, hi += pad;
  }
  const double step = NiceStep(hi - lo, 5);
  return {std::floor(lo / step + 1e-9) * step, std::ceil(hi / step - 1e-9) * step};
}

struct Frame {
  double x_min, x_max;
  Range range;
  double X(double x) const {
    if (x_max <= x_min) return kLeft + kPlotWidth / 2;
    return kLeft + (x - x_min) / (x_max - x_min) * kPlotWidth;
  }
  double Y(double y) const { return kTop + (range.hi - y) / (range.hi - range.lo) * kPlotHeight; }
};

std::string Axes(const LineChart& chart, const Frame& f) {
  std::string out = absl::StrFormat(
      "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#fff\" "
      "stroke=\"#888\"/>\n",
      kLeft, kTop, kPlotWidth, kPlotHeight);
  for (double v : Ticks(f.range.lo, f.range.hi, 5)) {
    const double y = f.Y(v);
    absl::StrAppendFormat(&out,
                          "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>"
                          "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s"
                          "</text>\n",
                          kLeft, kLeft + kPlotWidth, y, y, kLeft - 6, y + 4,
                          TickLabel(v, chart.percent));
  }
  for (double v : Ticks(f.x_min, f.x_max, 8)) {
    if (v != std::round(v)) continue;  // steps are whole
    const double x = f.X(v);
    absl::StrAppendFormat(&out,
                          "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#888\"/>"
                          "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g"
                          "</text>\n",
                          x, x, kTop + kPlotHeight, kTop + kPlotHeight + 5, x,
                          kTop + kPlotHeight + 18, v);
  }
  absl::StrAppendFormat(&out,
                        "<text class=\"axis\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">step"
                        "</text>\n<text class=\"axis\" transform=\"translate(14 %.1f) "
                        "rotate(-90)\" text-anchor=\"middle\">%s</text>\n",
                        kLeft + kPlotWidth / 2, kHeight - 6, kTop + kPlotHeight / 2,
                        HtmlEscape(chart.y_label));
  return out;
}

// The title, then one swatch and name per series (and the reference line) along the top.
std::string Legend(const LineChart& chart) {
  std::string out = absl::StrFormat("<text class=\"title\" x=\"%.1f\" y=\"18\">%s</text>\n", kLeft,
                                    HtmlEscape(chart.title));
  double x = kLeft;
  auto entry = [&](const std::string& color, const std::string& text, bool dashed) {
    absl::StrAppendFormat(&out,
                          "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"32\" y2=\"32\" stroke=\"%s\" "
                          "stroke-width=\"3\"%s/><text class=\"legend\" x=\"%.1f\" y=\"36\">%s"
                          "</text>\n",
                          x, x + 18, HtmlEscape(color), dashed ? " stroke-dasharray=\"4 3\"" : "",
                          x + 22, HtmlEscape(text));
    x += 34 + 7 * static_cast<double>(text.size());
  };
  for (const ChartSeries& s : chart.series) {
    entry(s.color, s.points.empty() ? s.name + " (none)" : s.name, false);
  }
  if (!chart.reference_label.empty()) entry("#555", chart.reference_label, true);
  return out;
}

std::string Series(const ChartSeries& s, const Frame& f) {
  if (s.points.empty()) return "";
  std::vector<std::string> pairs;
  pairs.reserve(s.points.size());
  for (const auto& [x, y] : s.points) pairs.push_back(absl::StrFormat("%.1f,%.1f", f.X(x), f.Y(y)));
  std::string out = absl::StrFormat(
      "<polyline class=\"series\" data-series=\"%s\" data-points=\"%d\" fill=\"none\" "
      "stroke=\"%s\" stroke-width=\"1.5\" points=\"%s\"/>\n",
      HtmlEscape(s.name), s.points.size(), HtmlEscape(s.color), absl::StrJoin(pairs, " "));
  // A lone point draws no line: sparse series show each point as a dot too.
  if (!s.dots && s.points.size() > 1) return out;
  for (const auto& [x, y] : s.points) {
    absl::StrAppendFormat(&out,
                          "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"><title>step %g: "
                          "%g</title></circle>\n",
                          f.X(x), f.Y(y), HtmlEscape(s.color), x, y);
  }
  return out;
}

std::string Markers(const LineChart& chart, const Frame& f) {
  std::string out;
  for (const ChartMarker& m : chart.markers) {
    const double x = f.X(std::clamp(m.x, f.x_min, f.x_max));
    const std::string color = m.kind == "restart"  ? "#e15759"
                              : m.kind == "resize" ? "#b07aa1"
                                                   : "#9c755f";
    absl::StrAppendFormat(
        &out,
        "<g class=\"marker %s\" data-kind=\"%s\" data-step=\"%g\"><title>%s</title>"
        "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"transparent\" "
        "stroke-width=\"9\"/><line class=\"marker\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" "
        "y2=\"%.1f\" stroke=\"%s\" stroke-dasharray=\"5 3\"/><text class=\"mark\" x=\"%.1f\" "
        "y=\"%.1f\" fill=\"%s\">%s</text></g>\n",
        HtmlEscape(m.kind), HtmlEscape(m.kind), m.x, HtmlEscape(m.title), x, x, kTop,
        kTop + kPlotHeight, x, x, kTop, kTop + kPlotHeight, color, x + 3, kTop + 11, color,
        HtmlEscape(m.label));
  }
  for (double step : chart.skipped) {
    absl::StrAppendFormat(&out,
                          "<rect class=\"skipped\" x=\"%.1f\" y=\"%.1f\" width=\"3\" "
                          "height=\"7\" fill=\"#e15759\"><title>step %g skipped (non-finite "
                          "loss or gradient norm)</title></rect>\n",
                          f.X(step) - 1.5, kTop + kPlotHeight - 7, step);
  }
  return out;
}

const char* KindColor(prog::Kind kind) {
  switch (kind) {
    case prog::Kind::kForward:
      return "#4e79a7";
    case prog::Kind::kBackward:
      return "#59a14f";
    case prog::Kind::kBackwardInput:
      return "#76b7b2";
    case prog::Kind::kBackwardWeight:
      return "#edc948";
    default:
      return "#9d9d9d";
  }
}

// One action's bar in the row starting at `top`; `scale` is pixels a second. D and V: as
// plan::ActionLabel.
std::string Bar(const pp::plan::TimedAction& t, double top, double left, double scale, int D,
                int V) {
  const bool comm = prog::IsComm(t.action.kind);
  const double x = left + t.start * scale, width = std::max((t.end - t.start) * scale, 0.6);
  const double y = comm ? top + 19 : top + 2, height = comm ? 3 : 16;
  std::string out = absl::StrFormat(
      "<rect class=\"action\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" "
      "stroke=\"#fff\" stroke-width=\"0.3\"><title>%s: %.3f-%.3f ms</title></rect>",
      x, y, width, height, KindColor(t.action.kind), HtmlEscape(prog::Describe(t.action)),
      t.start * 1e3, t.end * 1e3);
  if (!comm && width >= 18) {
    absl::StrAppendFormat(&out,
                          "<text class=\"cell\" x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\">%s"
                          "</text>",
                          x + width / 2, top + 14, pp::plan::ActionLabel(t.action, D, V));
  }
  return absl::StrCat(out, "\n");
}

}  // namespace

std::string HtmlEscape(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string RenderLineChart(const LineChart& chart) {
  const Frame frame{chart.x_min, chart.x_max, YRange(chart)};
  std::string out = absl::StrFormat(
      "<svg id=\"%s\" class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" "
      "height=\"%g\" viewBox=\"0 0 %g %g\">\n",
      HtmlEscape(chart.id), kWidth, kHeight, kWidth, kHeight);
  absl::StrAppend(&out, Legend(chart), Axes(chart, frame));
  if (!chart.reference_label.empty()) {
    const double y = frame.Y(chart.reference);
    absl::StrAppendFormat(&out,
                          "<line class=\"reference\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" "
                          "y2=\"%.1f\" stroke=\"#555\" stroke-dasharray=\"4 3\"><title>%s"
                          "</title></line>\n",
                          kLeft, kLeft + kPlotWidth, y, y, HtmlEscape(chart.reference_label));
  }
  for (const ChartSeries& s : chart.series) absl::StrAppend(&out, Series(s, frame));
  absl::StrAppend(&out, Markers(chart, frame), "</svg>\n");
  return out;
}

double TimelineSpan(const pp::plan::Timeline& timeline) {
  double span = 0;
  for (const auto& rank : timeline.ranks) {
    for (const pp::plan::TimedAction& t : rank) span = std::max(span, t.end);
  }
  return span;
}

std::string RenderTimeline(const pp::plan::Timeline& timeline, double span_seconds,
                           const std::string& id) {
  if (timeline.ranks.empty() || !(span_seconds > 0)) {
    return "<p class=\"note\">no actions to draw</p>\n";
  }
  constexpr double kLabel = 64, kRow = 26, kAxis = 30;
  const double width = kWidth - kLabel - kRight, scale = width / span_seconds;
  const double height = 8 + kRow * static_cast<double>(timeline.ranks.size()) + kAxis;
  std::string out = absl::StrFormat(
      "<svg id=\"%s\" class=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" "
      "height=\"%g\" viewBox=\"0 0 %g %g\">\n",
      HtmlEscape(id), kWidth, height, kWidth, height);
  const int D = static_cast<int>(timeline.ranks.size());
  int V = 1;
  for (const auto& rank : timeline.ranks) {
    for (const pp::plan::TimedAction& t : rank) V = std::max(V, t.action.stage / D + 1);
  }
  double top = 8;
  for (size_t r = 0; r < timeline.ranks.size(); ++r, top += kRow) {
    absl::StrAppendFormat(&out,
                          "<text class=\"tick\" x=\"4\" y=\"%.1f\">rank %d</text><rect x=\"%.1f\" "
                          "y=\"%.1f\" width=\"%.1f\" height=\"24\" fill=\"#f4f4f4\"/>\n",
                          top + 15, r, kLabel, top, width);
    for (const pp::plan::TimedAction& t : timeline.ranks[r]) {
      absl::StrAppend(&out, Bar(t, top, kLabel, scale, D, V));
    }
  }
  for (double ms : Ticks(0, span_seconds * 1e3, 8)) {
    const double x = kLabel + ms / 1e3 * scale;
    absl::StrAppendFormat(&out,
                          "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#888\"/>"
                          "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g ms"
                          "</text>\n",
                          x, x, top, top + 5, x, top + 18, ms);
  }
  return absl::StrCat(out, "</svg>\n");
}

}  // namespace pp::client
