#include "coordinator/plan/render.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "coordinator/plan/compile.h"
#include "coordinator/plan/convert.h"

namespace pp::plan {
namespace {

bool IsCompute(prog::Kind kind) { return !prog::IsComm(kind); }

char Letter(prog::Kind kind) {
  switch (kind) {
    case prog::Kind::kForward:
      return 'F';
    case prog::Kind::kBackward:
      return 'B';
    case prog::Kind::kBackwardInput:
      return 'I';
    case prog::Kind::kBackwardWeight:
      return 'W';
    default:
      return '?';
  }
}

std::string Cell(const std::string& text, int cells, int width) {
  std::string cell = "[" + text;
  cell.resize(cells * width - 2, ' ');
  return cell + "] ";
}

// A timeline line aims to fit this many columns (cells times their width).
constexpr int kLineColumns = 200;

// The round value (1, 2, 3, 4, 5, 6 or 8 times a power of ten) nearest to x from above (`up`)
// or below.
double RoundValue(double x, bool up) {
  const double decade = std::pow(10.0, std::floor(std::log10(x)));
  constexpr double kSteps[] = {1, 2, 3, 4, 5, 6, 8, 10};
  double below = decade;
  for (double step : kSteps) {
    const double value = step * decade;
    if (value >= x * (1 - 1e-9)) return up || value <= x * (1 + 1e-9) ? value : below;
    below = value;
  }
  return below;
}

// The time one cell stands for. Plans keep the exact shortest action while the line fits, so
// uniform costs draw one cell per unit; measured times get a round value to read the legend by.
double Quantum(double shortest, double makespan, int max_cells, TimeUnit unit) {
  const double fitting = makespan / max_cells;
  if (unit == TimeUnit::kCostUnits && shortest >= fitting) return shortest;
  const double quantum = RoundValue(std::max(fitting, 1e-9), /*up=*/true);
  if (unit == TimeUnit::kCostUnits) return quantum;
  return std::max(quantum, RoundValue(shortest, /*up=*/false));
}

std::string QuantumText(double quantum, TimeUnit unit) {
  if (unit == TimeUnit::kCostUnits) return absl::StrCat(quantum, " time units");
  if (quantum >= 1) return absl::StrCat(quantum, " s");
  return absl::StrCat(quantum * 1000, " ms");
}

}  // namespace

std::string ActionLabel(const prog::Action& a, int D, int V) {
  std::string label = absl::StrCat(std::string(1, Letter(a.kind)), a.microbatch + 1);
  if (V > 1) label.push_back(static_cast<char>('a' + a.stage / D));
  return label;
}

std::string RenderAscii(const Timeline& timeline, TimeUnit unit) {
  const int D = static_cast<int>(timeline.ranks.size());
  if (D == 0) return "(empty timeline)\n";
  int V = 1, max_microbatch = 0;
  double shortest = std::numeric_limits<double>::infinity(), makespan = 0;
  for (const auto& rank : timeline.ranks) {
    for (const TimedAction& t : rank) {
      makespan = std::max(makespan, t.end);
      if (!IsCompute(t.action.kind)) continue;
      V = std::max(V, t.action.stage / D + 1);
      max_microbatch = std::max(max_microbatch, t.action.microbatch);
      if (t.end > t.start) shortest = std::min(shortest, t.end - t.start);
    }
  }
  if (!std::isfinite(shortest)) shortest = 1;
  const int label = static_cast<int>(absl::StrCat(max_microbatch + 1).size()) + 1 + (V > 1);
  const int width = label + 3;  // "[" label "] "
  const double quantum = Quantum(shortest, makespan, std::max(1, kLineColumns / width), unit);
  std::string out;
  for (int r = 0; r < D; ++r) {
    absl::StrAppend(&out, "rank ", r, ": ");
    long cursor = 0;
    for (const TimedAction& t : timeline.ranks[r]) {
      if (!IsCompute(t.action.kind)) continue;
      const long first = std::max(cursor, std::lround(t.start / quantum));
      const long last = std::max(first + 1, std::lround(t.end / quantum));
      for (; cursor < first; ++cursor) out += Cell("", 1, width);
      out += Cell(ActionLabel(t.action, D, V), static_cast<int>(last - first), width);
      cursor = last;
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    out += "\n";
  }
  absl::StrAppend(&out, "(one cell = ", QuantumText(quantum, unit),
                  "; F forward, B backward, I input-grad, W weight-grad; number = "
                  "microbatch from 1",
                  V > 1 ? "; letter = chunk a.." : "", "; [", std::string(label, ' '), "] idle)\n");
  return out;
}

namespace {

void AppendJsonString(absl::string_view text, std::string* out) {
  out->push_back('"');
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppend(out, "\\u00", absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2));
    } else {
      out->push_back(c);
    }
  }
  out->push_back('"');
}

void AppendJsonNumber(double value, std::string* out) {
  if (!std::isfinite(value)) value = 0;  // JSON has no NaN; a timeline never holds one
  char buffer[32];
  const std::to_chars_result written = std::to_chars(buffer, buffer + sizeof(buffer), value);
  out->append(buffer, written.ptr);
}

}  // namespace

// Written straight into one string: building a google.protobuf.Struct and printing it took 92 s
// and 3.6 GB for interleaved-1f1b D=64 V=4 M=1024 (2 M events). Names are Describe()'s, plain
// ASCII, escaped anyway; numbers in the shortest form that reads back to the same double.
std::string RenderChrome(const Timeline& timeline, double microseconds_per_unit) {
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[";
  bool first = true;
  auto begin_event = [&] {
    if (!first) out.push_back(',');
    first = false;
  };
  for (size_t r = 0; r < timeline.ranks.size(); ++r) {
    begin_event();
    absl::StrAppend(&out, "{\"args\":{\"name\":\"rank ", r,
                    "\"},\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":", r, "}");
    for (const TimedAction& t : timeline.ranks[r]) {
      begin_event();
      absl::StrAppend(&out, "{\"args\":{\"microbatch\":", t.action.microbatch);
      if (t.action.peer >= 0) absl::StrAppend(&out, ",\"peer\":", t.action.peer);
      absl::StrAppend(&out, ",\"stage\":", t.action.stage, "},\"cat\":");
      AppendJsonString(prog::KindName(t.action.kind), &out);
      out += ",\"dur\":";
      AppendJsonNumber((t.end - t.start) * microseconds_per_unit, &out);
      out += ",\"name\":";
      AppendJsonString(prog::Describe(t.action), &out);
      absl::StrAppend(&out, ",\"ph\":\"X\",\"pid\":0,\"tid\":", r, ",\"ts\":");
      AppendJsonNumber(t.start * microseconds_per_unit, &out);
      out.push_back('}');
    }
  }
  out += "]}\n";
  return out;
}

absl::StatusOr<std::string> RenderScheduleAscii(const pp::v1::Schedule& schedule,
                                                const pp::v1::CostModel& costs) {
  absl::StatusOr<prog::Schedule> plain = ScheduleFromProto(schedule);
  if (!plain.ok()) return plain.status();
  absl::StatusOr<Simulation> simulation = ValidateAndSimulate(*plain, CostsFromProto(costs));
  if (!simulation.ok()) return simulation.status();
  return RenderAscii(TimelineFromSimulation(*plain, *simulation));
}

}  // namespace pp::plan
