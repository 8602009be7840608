// `ppctl report`'s page: one self-contained HTML file of a job (no script, no network: inline CSS
// and SVG, client/report_svg.h) with
//   - a summary (state, steps, loss, layout label, restarts, resizes);
//   - curves over the recorded steps: loss and eval loss, learning rate, gradient norm (when any
//     step reported one), tokens/s, and the measured bubble against the simulated one. A series
//     has one polyline point per recorded step that has its value: loss, learning rate, tokens/s
//     and bubble every step with a finite value, eval loss the steps with has_eval, gradient norm
//     the steps with a finite nonzero norm. Skipped steps are red ticks; restarts, resumes and
//     resizes (Job.restart_log) dashed vertical lines at the step their attempt started from;
//   - the layout: which stages (and partition units) each rank holds on which worker;
//   - the last traced step as measured, next to that step's schedule simulated under its own
//     measured costs, on one time scale;
//   - the restart log.
// Pure: RenderReport reads only its input (the caller fetched it and supplies the clock's text),
// so tests pin the page. Every string that came from the job is HTML-escaped.
#ifndef PP_CLIENT_REPORT_HTML_H_
#define PP_CLIENT_REPORT_HTML_H_

#include <optional>
#include <string>
#include <vector>

#include "coordinator/plan/plan.h"
#include "pp/v1/coordinator.pb.h"

namespace pp::client {

struct ReportInput {
  pp::v1::Job job;                              // GetJob
  std::vector<pp::v1::JobStepRecord> steps;     // ListJobSteps, every page, oldest first
  std::vector<int> stage_layers;                // partition units per stage (PlanJob); may be empty
  double planned_bubble = -1;                   // the schedule simulated, F=1 B=2; < 0: unknown
  std::optional<pp::v1::StepTrace> trace;       // GetTrace: the newest traced step
  std::optional<pp::plan::Timeline> simulated;  // that step simulated under its measured costs
  std::string simulation_note;                  // why there is no simulation (when there is none)
  std::string generated;                        // when it was written, e.g. "2026-12-04 21:30 UTC"
};

// The whole page, "<!DOCTYPE html>" to "</html>".
std::string RenderReport(const ReportInput& input);

}  // namespace pp::client

#endif  // PP_CLIENT_REPORT_HTML_H_
