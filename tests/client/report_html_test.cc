// `ppctl report`'s page (client/report_html, client/report_svg) from made-up jobs: the number of
// points of each curve, escaping of the job's strings, markers for restarts and resizes, skipped
// steps, an empty history, and the two timelines of the traced step.
#include "client/report_html.h"

#include <limits>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/report_svg.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pp::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

pp::v1::JobStepRecord Step(int step, int attempt = 1) {
  pp::v1::JobStepRecord s;
  s.set_step(step);
  s.set_attempt(attempt);
  s.set_loss(5.0 - 0.01 * step);
  s.set_learning_rate(1e-3);
  s.set_tokens_per_second(1000 + step);
  s.set_bubble_ratio(0.3);
  s.set_step_seconds(0.1);
  return s;
}

ReportInput TwentySteps() {
  ReportInput in;
  in.job.set_id("job-7");
  in.job.set_state(pp::v1::SUCCEEDED);
  in.job.mutable_spec()->set_name("tiny");
  in.job.mutable_spec()->mutable_train()->set_steps(20);
  in.job.set_step(20);
  for (int i = 1; i <= 20; ++i) in.steps.push_back(Step(i));
  return in;
}

// The number of "x,y" pairs in the points attribute of the polyline of series `name`; -1 when
// the page has no such polyline.
int PointsOf(const std::string& html, const std::string& name) {
  const std::regex polyline("<polyline[^>]*data-series=\"" + name + "\"[^>]*points=\"([^\"]*)\"");
  std::smatch match;
  if (!std::regex_search(html, match, polyline)) return -1;
  const std::vector<std::string> pairs = absl::StrSplit(match[1].str(), ' ', absl::SkipEmpty());
  return static_cast<int>(pairs.size());
}

int Count(const std::string& html, const std::string& needle) {
  int n = 0;
  for (size_t at = html.find(needle); at != std::string::npos; at = html.find(needle, at + 1)) ++n;
  return n;
}

TEST(ReportHtmlTest, EachCurveHasOnePointPerStepWithItsValue) {
  ReportInput in = TwentySteps();
  for (int i : {4, 9, 14, 19}) {
    in.steps[i].set_has_eval(true);
    in.steps[i].set_eval_loss(4.5);
  }
  in.steps[2].set_skipped(true);
  in.steps[2].set_loss(std::numeric_limits<double>::quiet_NaN());
  const std::string html = RenderReport(in);
  EXPECT_EQ(PointsOf(html, "loss"), 19);  // the skipped step's NaN has no point
  EXPECT_EQ(PointsOf(html, "eval loss"), 4);
  EXPECT_EQ(PointsOf(html, "learning rate"), 20);
  EXPECT_EQ(PointsOf(html, "tokens/s"), 20);
  EXPECT_EQ(PointsOf(html, "measured bubble"), 20);
  EXPECT_THAT(html, HasSubstr("data-series=\"loss\" data-points=\"19\""));
  // No step reported a gradient norm (a ppcoord from before the field): no chart for it.
  EXPECT_EQ(PointsOf(html, "gradient norm"), -1);
  // The skipped step is a tick on every chart (loss, lr, tokens/s, bubble).
  EXPECT_EQ(Count(html, "class=\"skipped\""), 4);
  EXPECT_THAT(html, Not(HasSubstr("<script")));
  EXPECT_THAT(html, HasSubstr("</html>"));
}

TEST(ReportHtmlTest, GradientNormChartWhenStepsReportIt) {
  ReportInput in = TwentySteps();
  for (int i = 0; i < 10; ++i) in.steps[i].set_grad_norm(1.5 + i);
  EXPECT_EQ(PointsOf(RenderReport(in), "gradient norm"), 10);
}

TEST(ReportHtmlTest, EscapesEveryStringOfTheJob) {
  ReportInput in = TwentySteps();
  in.job.mutable_spec()->set_name("<script>alert(1)</script>");
  in.job.set_reason("a \"quoted\" & <b>bold</b> reason");
  pp::v1::JobRestart* r = in.job.add_restart_log();
  r->set_attempt(2);
  r->set_from_step(10);
  r->set_automatic(true);
  r->set_reason("worker <w1> lost's");
  pp::v1::RankPlacement* p = in.job.add_placement();
  p->set_worker("w<0>");
  const std::string html = RenderReport(in);
  EXPECT_THAT(html, Not(HasSubstr("<script>")));
  EXPECT_THAT(html, HasSubstr("&lt;script&gt;alert(1)&lt;/script&gt;"));
  EXPECT_THAT(html, HasSubstr("a &quot;quoted&quot; &amp; &lt;b&gt;bold&lt;/b&gt; reason"));
  EXPECT_THAT(html, HasSubstr("worker &lt;w1&gt; lost&#39;s"));
  EXPECT_THAT(html, HasSubstr("w&lt;0&gt;"));
  EXPECT_THAT(html, Not(HasSubstr("<w1>")));
}

TEST(ReportHtmlTest, MarksRestartsResumesAndResizes) {
  ReportInput in = TwentySteps();
  auto add = [&in](int attempt, int from, bool automatic, const std::string& reason) {
    pp::v1::JobRestart* r = in.job.add_restart_log();
    r->set_attempt(attempt), r->set_from_step(from), r->set_automatic(automatic);
    r->set_reason(reason);
  };
  add(2, 5, true, "rank 1 failed");
  add(3, 10, true, "worker w1 down; resized from 1f1b D=2 to 1f1b D=1");
  add(4, 15, false, "resumed by alice");
  const std::string html = RenderReport(in);
  // One marker per entry on each of the four charts.
  EXPECT_EQ(Count(html, "data-kind=\"restart\""), 4);
  EXPECT_EQ(Count(html, "data-kind=\"resize\""), 4);
  EXPECT_EQ(Count(html, "data-kind=\"resume\""), 4);
  EXPECT_THAT(html, HasSubstr("data-step=\"10\""));
  EXPECT_THAT(html, HasSubstr("<title>attempt 3 from step 10"));
}

TEST(ReportHtmlTest, EmptyHistoryIsANoteNotACurve) {
  ReportInput in;
  in.job.set_id("job-1");
  in.job.set_state(pp::v1::QUEUED);
  const std::string html = RenderReport(in);
  EXPECT_THAT(html, HasSubstr("No steps recorded yet"));
  EXPECT_THAT(html, Not(HasSubstr("<polyline")));
  EXPECT_THAT(html, HasSubstr("No traced step"));
  EXPECT_THAT(html, HasSubstr("</html>"));
}

TEST(ReportHtmlTest, OneStepIsOnePointAndADot) {
  ReportInput in = TwentySteps();
  in.steps.resize(1);
  const std::string html = RenderReport(in);
  EXPECT_EQ(PointsOf(html, "loss"), 1);
  EXPECT_THAT(html, HasSubstr("<circle"));  // a lone point draws no line
}

TEST(ReportHtmlTest, LayoutNamesTheStagesAndUnitsOfEachWorker) {
  ReportInput in = TwentySteps();
  in.stage_layers = {3, 2, 2, 3};  // 8 layers + embedding + head, S = 4 (D = 2, V = 2)
  for (int r = 0; r < 2; ++r) {
    pp::v1::RankPlacement* p = in.job.add_placement();
    p->set_rank(r), p->set_pp(r), p->set_worker(absl::StrCat("w", r));
    p->add_stages(r), p->add_stages(r + 2);
  }
  const std::string html = RenderReport(in);
  EXPECT_THAT(html, HasSubstr("<td>w0</td>"));
  EXPECT_THAT(html, HasSubstr("<td>0, 2</td><td>0-2; 5-6</td>"));
  EXPECT_THAT(html, HasSubstr("<td>1, 3</td><td>3-4; 7-9</td>"));
}

pp::v1::StepTrace TwoRankTrace() {
  pp::v1::StepTrace trace;
  trace.set_job_id("job-7");
  trace.set_step(20);
  for (int r = 0; r < 2; ++r) {
    pp::v1::RankTrace* rank = trace.add_ranks();
    rank->set_rank(r);
    pp::v1::TimedAction* f = rank->add_actions();
    f->mutable_action()->set_kind(pp::v1::ActionKind::FORWARD);
    f->mutable_action()->set_stage(r);
    f->set_start(0.001 * r), f->set_end(0.001 * r + 0.001);
  }
  return trace;
}

TEST(ReportHtmlTest, TracedStepBesideItsSimulation) {
  ReportInput in = TwentySteps();
  in.trace = TwoRankTrace();
  pp::plan::Timeline simulated;
  simulated.ranks.resize(2);
  simulated.ranks[0].push_back({{prog::Kind::kForward, 0, 0}, 0, 0.001});
  simulated.ranks[1].push_back({{prog::Kind::kForward, 1, 0}, 0.001, 0.002});
  in.simulated = simulated;
  const std::string html = RenderReport(in);
  EXPECT_THAT(html, HasSubstr("id=\"timeline-measured\""));
  EXPECT_THAT(html, HasSubstr("id=\"timeline-simulated\""));
  EXPECT_EQ(Count(html, "class=\"action\""), 4);
  EXPECT_THAT(html, HasSubstr("Step 20, one time scale"));
  // Without a simulation, the note says why.
  in.simulated.reset();
  in.simulation_note = "PlanJob of the job's spec: <refused>";
  EXPECT_THAT(RenderReport(in), HasSubstr("No simulation: PlanJob of the job&#39;s spec: "
                                          "&lt;refused&gt;"));
}

TEST(ReportSvgTest, FlatSeriesStaysInsideThePlot) {
  LineChart chart;
  chart.id = "c";
  chart.x_min = 1, chart.x_max = 3;
  chart.series = {{"flat", "#000", {{1, 2.0}, {2, 2.0}, {3, 2.0}}}};
  const std::string svg = RenderLineChart(chart);
  EXPECT_THAT(svg, HasSubstr("data-points=\"3\""));
  EXPECT_THAT(svg, Not(HasSubstr("nan")));
  EXPECT_THAT(svg, Not(HasSubstr("inf")));
}

}  // namespace
}  // namespace pp::client
