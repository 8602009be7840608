// `ppctl up` end to end: the real binaries on loopback. A tiny job completes with a falling loss
// and leaves no process; SIGINT (a Ctrl-C to ppctl's process group), SIGTERM and SIGKILL midway
// leave none either; Debian's Prometheus scrapes the cluster and answers PromQL for the job's loss
// and the per-rank bubble.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/up/process.h"

namespace pp::testing_up {
namespace {

// A small job on two CPU workers (generated text-like data: no file needed), a few seconds for
// 40 steps; checkpoints every 20 steps in short jobs, only at the end in long ones.
std::string TinySpec(int steps) {
  return absl::StrFormat(
      R"({"name": "tiny",
          "model": {"vocabSize": 256, "seqLen": 32, "dModel": 32, "nHeads": 2, "nLayers": 2},
          "parallel": {"pipeline": 2, "schedule": "1f1b"},
          "train": {"steps": %d, "microbatches": 4, "microbatchSize": 4, "lr": 0.01,
                    "weightDecay": 0.0, "gradClip": 1.0, "seed": 1},
          "data": {"format": "generated", "generatedTokens": 65536, "generatedSeed": 3},
          "checkpoint": {"everySteps": %d, "keep": 2}})",
      steps, steps <= 100 ? 20 : 0);
}

// A job that outlasts every test that interrupts it, and its first progress line.
constexpr int kLong = 100000;
constexpr char kFirstStep[] = "  step      1/100000 [";

class UpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    BecomeSubreaper();
    dir_ = MakeTempDir();
  }
  void TearDown() override { RemoveTree(dir_); }

  std::string Spec(int steps) {
    const std::string path = dir_ + "/job.json";
    WriteText(path, TinySpec(steps));
    return path;
  }

  // Every process ppctl was seen starting is gone, and none was left to this process (a
  // subreaper: orphans would have been re-parented here).
  void ExpectNothingLeft(const Launched& ppctl, size_t at_least) {
    EXPECT_GE(ppctl.children_seen().size(), at_least) << "the daemons were never seen";
    const std::vector<pid_t> ours = ChildrenOf(getpid());
    for (pid_t pid : ppctl.children_seen()) {
      EXPECT_EQ(std::count(ours.begin(), ours.end(), pid), 0) << "pid " << pid << " was orphaned";
      EXPECT_FALSE(Exists(pid)) << "pid " << pid << " is still there";
    }
  }

  std::string dir_;
};

TEST_F(UpTest, TinyJobCompletesWithFallingLossAndLeavesNoProcess) {
  Launched ppctl(PPCTL_PATH,
                 {"up", "--workers=2", "--job=" + Spec(40), "--data_dir=" + dir_ + "/data",
                  "--chrome_trace=" + dir_ + "/trace.json"},
                 dir_ + "/out.txt");
  const std::optional<int> status = ppctl.WaitExit(absl::Seconds(90));
  ASSERT_TRUE(status.has_value()) << "ppctl up did not end within 90 s:\n" << ppctl.Output();
  const std::string out = ppctl.Output();
  ASSERT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << out;
  ExpectNothingLeft(ppctl, 3);

  std::smatch loss;
  ASSERT_TRUE(std::regex_search(out, loss,
                                std::regex(R"(loss +([0-9.]+) at step 1 -> ([0-9.]+) at step 40)")))
      << out;
  const double first = std::stod(loss[1]), last = std::stod(loss[2]);
  EXPECT_NEAR(first, std::log(256.0), 0.3);  // a fresh model guesses uniformly over the bytes
  EXPECT_LT(last, first - 1.0) << out;
  EXPECT_NE(out.find("measured "), std::string::npos) << out;
  EXPECT_NE(out.find("simulated "), std::string::npos) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(\nGPU 0: (\[ +\] )*\[F1 *\])"))) << out;
  EXPECT_NE(out.find("\nGPU 1: "), std::string::npos) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(\(one cell = [0-9.]+ m?s;)"))) << out;

  google::protobuf::Struct trace;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(ReadText(dir_ + "/trace.json"), &trace).ok());
  EXPECT_GT(trace.fields().at("traceEvents").list_value().values_size(), 8 * 2);
  // --data_dir keeps the store and the checkpoints; the job's id is the spec name numbered.
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/data/ppcoord.db"));
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/data/checkpoints/tiny-1/step-40/manifest.json"))
      << out;
}

class UpSignalTest : public UpTest, public ::testing::WithParamInterface<int> {};

// Ctrl-C in a terminal sends SIGINT to the foreground process group: ppctl's own group here
// (the daemons have one of their own). SIGTERM goes to ppctl alone, as `kill` would send it.
TEST_P(UpSignalTest, StopsEveryProcessPromptlyAndExitsNonZero) {
  const int sig = GetParam();
  Launched ppctl(PPCTL_PATH, {"up", "--workers=2", "--job=" + Spec(kLong)}, dir_ + "/out.txt");
  ASSERT_TRUE(ppctl.WaitForOutput(kFirstStep, absl::Seconds(40))) << ppctl.Output();
  const std::string temp_dir = std::regex_replace(
      ppctl.Output(), std::regex(R"([\s\S]*logs and address files in ([^\n]*)/ppctl-up\n[\s\S]*)"),
      "$1");
  ASSERT_TRUE(std::filesystem::exists(temp_dir)) << temp_dir;
  ASSERT_EQ(kill(sig == SIGINT ? -ppctl.pid() : ppctl.pid(), sig), 0);
  const absl::Time sent = absl::Now();
  const std::optional<int> status = ppctl.WaitExit(absl::Seconds(20));
  ASSERT_TRUE(status.has_value()) << "still running 20 s after the signal:\n" << ppctl.Output();
  EXPECT_LT(absl::Now() - sent, absl::Seconds(10));
  ASSERT_TRUE(WIFEXITED(*status)) << ppctl.Output();
  EXPECT_EQ(WEXITSTATUS(*status), 128 + sig) << ppctl.Output();
  EXPECT_NE(ppctl.Output().find(sig == SIGINT ? "interrupted by SIGINT" : "interrupted by SIGTERM"),
            std::string::npos)
      << ppctl.Output();
  ExpectNothingLeft(ppctl, 3);
  EXPECT_FALSE(std::filesystem::exists(temp_dir)) << "the temporary data folder was left";
}

INSTANTIATE_TEST_SUITE_P(Signals, UpSignalTest, ::testing::Values(SIGINT, SIGTERM),
                         [](const auto& info) {
                           return info.param == SIGINT ? "SIGINT" : "SIGTERM";
                         });

// Even a ppctl killed outright takes its daemons along (PR_SET_PDEATHSIG): they are re-parented
// to this test (a subreaper) and die of SIGKILL.
TEST_F(UpTest, KilledPpctlTakesItsDaemonsAlong) {
  // --data_dir: a killed ppctl cannot remove its temporary folder; the test's own goes instead.
  Launched ppctl(PPCTL_PATH,
                 {"up", "--workers=2", "--job=" + Spec(kLong), "--data_dir=" + dir_ + "/data"},
                 dir_ + "/out.txt");
  ASSERT_TRUE(ppctl.WaitForOutput(kFirstStep, absl::Seconds(40))) << ppctl.Output();
  ASSERT_EQ(kill(ppctl.pid(), SIGKILL), 0);
  ASSERT_TRUE(ppctl.WaitExit(absl::Seconds(5)).has_value());
  ASSERT_GE(ppctl.children_seen().size(), 3u);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  for (pid_t pid : ppctl.children_seen()) {
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) != pid && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    ASSERT_TRUE(WIFSIGNALED(status)) << "pid " << pid << " did not die with ppctl";
    EXPECT_EQ(WTERMSIG(status), SIGKILL);
  }
}

// A daemon that dies midway ends `ppctl up` at once with exit 1 and a line naming it; the rest of
// the cluster is stopped.
TEST_F(UpTest, ADaemonDyingMidwayFailsPromptlyAndLeavesNoProcess) {
  Launched ppctl(PPCTL_PATH, {"up", "--workers=2", "--job=" + Spec(kLong)}, dir_ + "/out.txt");
  ASSERT_TRUE(ppctl.WaitForOutput(kFirstStep, absl::Seconds(40))) << ppctl.Output();
  pid_t worker = 0;
  for (pid_t pid : ppctl.children_seen()) {
    if (ReadText(absl::StrCat("/proc/", pid, "/cmdline")).find("--name=w1") != std::string::npos) {
      worker = pid;
    }
  }
  ASSERT_NE(worker, 0) << "worker w1 was not seen";
  ASSERT_EQ(kill(worker, SIGKILL), 0);
  const std::optional<int> status = ppctl.WaitExit(absl::Seconds(15));
  ASSERT_TRUE(status.has_value()) << ppctl.Output();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 1) << ppctl.Output();
  // Either ppctl sees w1 exit first, or ppcoord fails the job first (a rank lost its peer).
  EXPECT_TRUE(
      std::regex_search(ppctl.Output(), std::regex("w1 was killed by signal 9|did not succeed")))
      << ppctl.Output();
  ExpectNothingLeft(ppctl, 3);
}

TEST_F(UpTest, BadInputIsOneLineAndStartsNothing) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  WriteText(dir_ + "/bad.json", R"({"name": "bad", "model": {"nHeads": 3}})");
  WriteText(dir_ + "/four.json",
            std::regex_replace(TinySpec(5), std::regex(R"("pipeline": 2)"), R"("pipeline": 4)"));
  const Case cases[] = {
      {{"--workers=0"}, "--workers must be 1..64, got 0"},
      {{"--job=" + dir_ + "/missing.json"}, "missing.json"},
      {{"--job=" + dir_ + "/bad.json"}, "model."},
      {{"--workers=2", "--job=" + dir_ + "/four.json"}, "needs 4 workers"},
      {{"stray"}, "unexpected argument 'stray'"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"up"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    Launched ppctl(PPCTL_PATH, args, dir_ + "/out.txt");
    const std::optional<int> status = ppctl.WaitExit(absl::Seconds(10));
    ASSERT_TRUE(status.has_value());
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 2) << ppctl.Output();
    const std::string out = ppctl.Output();
    EXPECT_EQ(out.rfind("ppctl up: ", 0), 0u) << out;
    EXPECT_NE(out.find(c.message), std::string::npos) << out;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
    EXPECT_TRUE(ppctl.children_seen().empty()) << out;
  }
}

// The value of every series a PromQL instant query returns, by the value of `label`.
std::map<std::string, double> Query(int port, const std::string& promql, const std::string& label) {
  std::string path = "/api/v1/query?query=";
  for (char c : promql) {  // percent-encode everything but unreserved characters
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.') {
      path += c;
    } else {
      absl::StrAppendFormat(&path, "%%%02X", static_cast<unsigned char>(c));
    }
  }
  std::map<std::string, double> values;
  std::optional<std::string> body = HttpGet(port, path);
  google::protobuf::Struct answer;
  if (!body.has_value() || !google::protobuf::util::JsonStringToMessage(*body, &answer).ok()) {
    return values;
  }
  const auto& data = answer.fields().at("data").struct_value().fields();
  for (const auto& series : data.at("result").list_value().values()) {
    const auto& fields = series.struct_value().fields();
    const auto& metric = fields.at("metric").struct_value().fields();
    const std::string key = metric.contains(label) ? metric.at(label).string_value() : "";
    // "value": [time, "number"]
    values[key] = std::stod(fields.at("value").list_value().values(1).string_value());
  }
  return values;
}

std::string AddressField(const std::string& file, const std::string& field) {
  google::protobuf::Struct parsed;
  if (!google::protobuf::util::JsonStringToMessage(ReadText(file), &parsed).ok()) return "";
  return parsed.fields().at(field).string_value();
}

// Debian's Prometheus (installed by scripts/setup.sh) scrapes ppcoord and the workers that
// `ppctl up` started, with the project's recording rules loaded; PromQL over its HTTP API returns
// the job's loss and one bubble series per rank. A missing prometheus is a failure, not a skip.
TEST_F(UpTest, PrometheusScrapesTheJobsLossAndPerRankBubble) {
  const std::string prometheus = "/usr/bin/prometheus";
  ASSERT_EQ(access(prometheus.c_str(), X_OK), 0)
      << prometheus << " is missing: run scripts/setup.sh (Debian package prometheus)";
  const std::string data = dir_ + "/data";
  Launched ppctl(PPCTL_PATH, {"up", "--workers=2", "--job=" + Spec(kLong), "--data_dir=" + data},
                 dir_ + "/out.txt");
  ASSERT_TRUE(ppctl.WaitForOutput(kFirstStep, absl::Seconds(40))) << ppctl.Output();
  const std::string run = data + "/ppctl-up/";
  const std::string coordinator = AddressField(run + "ppcoord.json", "metrics");
  const std::string w0 = AddressField(run + "w0.json", "metrics");
  const std::string w1 = AddressField(run + "w1.json", "metrics");
  ASSERT_FALSE(coordinator.empty() || w0.empty() || w1.empty());

  const int port = FreePort();
  const std::string config = dir_ + "/prometheus.yml";
  WriteText(config, absl::StrCat(R"(global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [")",
                                 PP_SOURCE_DIR, R"(/deploy/prometheus/recording-rules.yml"]
scrape_configs:
  - job_name: pipeline-local
    honor_labels: true
    static_configs:
      - targets: [")",
                                 coordinator, R"("]
        labels: {component: coordinator}
      - targets: [")",
                                 w0, R"(", ")", w1, R"("]
        labels: {component: worker}
)"));
  Launched server(prometheus,
                  {"--config.file=" + config, "--storage.tsdb.path=" + dir_ + "/tsdb",
                   absl::StrCat("--web.listen-address=127.0.0.1:", port), "--log.level=warn"},
                  dir_ + "/prometheus.txt");

  const std::string job = "tiny-1";
  std::map<std::string, double> loss, bubble, workers_loss, up;
  const absl::Time deadline = absl::Now() + absl::Seconds(40);
  while (absl::Now() < deadline) {
    loss = Query(port, "pp_job_loss{job=\"" + job + "\"}", "job");
    bubble = Query(port, "pp_bubble_ratio{job=\"" + job + "\"}", "rank");
    workers_loss = Query(port, "pp_loss{job=\"" + job + "\"}", "job");
    up = Query(port, "up{job=\"pipeline-local\"}", "instance");
    if (loss.size() == 1 && bubble.size() == 2 && workers_loss.size() == 1 && up.size() == 3) {
      break;
    }
    ASSERT_FALSE(server.WaitExit(absl::Milliseconds(250)).has_value()) << "prometheus exited:\n"
                                                                       << server.Output();
  }
  ASSERT_EQ(loss.size(), 1u) << server.Output();
  EXPECT_GT(loss[job], 0.0);
  EXPECT_LT(loss[job], 6.0);
  EXPECT_EQ(workers_loss.size(), 1u);
  ASSERT_EQ(bubble.size(), 2u);
  for (const char* rank : {"0", "1"}) {
    ASSERT_TRUE(bubble.contains(rank)) << "no bubble series for rank " << rank;
    EXPECT_GE(bubble[rank], 0.0);
    EXPECT_LE(bubble[rank], 1.0);
  }
  for (const auto& [instance, value] : up) EXPECT_EQ(value, 1.0) << instance;
  // A recording rule of deploy/prometheus evaluated against the live series.
  const absl::Time rule_deadline = absl::Now() + absl::Seconds(10);
  std::map<std::string, double> excess;
  while (excess.empty() && absl::Now() < rule_deadline) {
    excess = Query(port, "job:pp_bubble_ratio_excess{job=\"" + job + "\"}", "job");
    absl::SleepFor(absl::Milliseconds(250));
  }
  EXPECT_EQ(excess.size(), 1u);

  kill(server.pid(), SIGTERM);
  EXPECT_TRUE(server.WaitExit(absl::Seconds(10)).has_value());
  kill(-ppctl.pid(), SIGINT);
  const std::optional<int> status = ppctl.WaitExit(absl::Seconds(20));
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(WEXITSTATUS(*status), 128 + SIGINT);
  ExpectNothingLeft(ppctl, 3);
}

}  // namespace
}  // namespace pp::testing_up
