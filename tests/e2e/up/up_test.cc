// `ppctl up` end to end: the real binaries on loopback. A tiny job completes with a falling loss
// and leaves no process; SIGINT (a Ctrl-C to ppctl's process group), SIGTERM and SIGKILL midway
// leave none either; Debian's Prometheus scrapes the cluster and answers PromQL for the job's loss
// and the per-rank bubble.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/coordinator/test_support.h"
#include "tests/support/fixture.h"
#include "tests/support/process.h"
#include "tests/support/process_tree.h"

namespace pp::testing_up {
namespace {

using ::pp::testing_support::Launcher;
using ::pp::testing_support::Process;
using ::pp::testing_support::ReadFile;

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
          "checkpoint": {"everySteps": %d, "keep": 2},
          "eval": {"everySteps": 20, "batches": 1, "holdoutFraction": 0.1}})",
      steps, steps <= 100 ? 20 : 0);
}

// A job that outlasts every test that interrupts it, and its first progress line.
constexpr int kLong = 100000;
constexpr char kFirstStep[] = "  step      1/100000 [";

// The summary's model FLOPs a second against the measured fp32 GEMM peak of one process at 1
// thread x the 2 worker processes (worker/trainer/flop_rate.h; capped at the cores on 1 core).
void ExpectFlopRate(const std::string& out) {
  std::smatch mfu;
  ASSERT_TRUE(std::regex_search(
      out, mfu,
      std::regex(R"(\n  FLOP rate   ([0-9.]+) [MGT]FLOP/s \(6N\+12LTC per token x tokens/s\), )"
                 R"(([0-9.e+-]+)% of the measured peak ([0-9.]+) [MGT]FLOP/s )"
                 R"(\(fp32 GEMM 1024\^3 at 1 thread x [0-9.]+ process)")))
      << out;
  EXPECT_GT(std::stod(mfu[2]), 0) << out;
  EXPECT_LE(std::stod(mfu[2]), 200) << out;
}

class UpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing_support::BecomeSubreaper();
    dir_ = testing_support::FreshTestDir().string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Spec(int steps) { return Write("job.json", TinySpec(steps)); }

  // dir_/<file> holding `text`.
  std::string Write(const std::string& file, const std::string& text) {
    const std::string path = dir_ + "/" + file;
    std::ofstream(path) << text;
    return path;
  }

  // `ppctl up args...`, output to dir_/<output>, as a shell starts it (a job of its own).
  std::unique_ptr<Launcher> StartPpctl(const std::vector<std::string>& args,
                                       const std::string& output = "out.txt") {
    std::vector<std::string> argv = {PPCTL_PATH, "up"};
    argv.insert(argv.end(), args.begin(), args.end());
    absl::StatusOr<std::unique_ptr<Launcher>> ppctl = Launcher::Start(argv, dir_ + "/" + output);
    EXPECT_TRUE(ppctl.ok()) << ppctl.status();
    return ppctl.ok() ? *std::move(ppctl) : nullptr;
  }

  // Every process ppctl was seen starting is gone, and none was left to this process (a
  // subreaper: orphans would have been re-parented here).
  void ExpectNothingLeft(const Launcher& ppctl, size_t at_least) {
    EXPECT_GE(ppctl.children_seen().size(), at_least) << "the daemons were never seen";
    const std::vector<pid_t> ours = testing_support::ChildrenOf(getpid());
    for (pid_t pid : ppctl.children_seen()) {
      EXPECT_EQ(std::count(ours.begin(), ours.end(), pid), 0) << "pid " << pid << " was orphaned";
      EXPECT_FALSE(testing_support::Exists(pid)) << "pid " << pid << " is still there";
    }
  }

  std::string dir_;
};

TEST_F(UpTest, TinyJobCompletesWithFallingLossAndLeavesNoProcess) {
  std::unique_ptr<Launcher> ppctl =
      StartPpctl({"--workers=2", "--job=" + Spec(40), "--data_dir=" + dir_ + "/data",
                  "--chrome_trace=" + dir_ + "/trace.json"});
  ASSERT_NE(ppctl, nullptr);
  const absl::StatusOr<int> code = ppctl->Wait(absl::Seconds(90));
  ASSERT_TRUE(code.ok()) << "ppctl up did not end within 90 s:\n" << ppctl->Output();
  const std::string out = ppctl->Output();
  ASSERT_EQ(*code, 0) << out;
  ExpectNothingLeft(*ppctl, 3);

  std::smatch loss;
  ASSERT_TRUE(std::regex_search(out, loss,
                                std::regex(R"(loss +([0-9.]+) at step 1 -> ([0-9.]+) at step 40)")))
      << out;
  const double first = std::stod(loss[1]), last = std::stod(loss[2]);
  EXPECT_NEAR(first, std::log(256.0), 0.3);  // a fresh model guesses uniformly over the bytes
  EXPECT_LT(last, first - 1.0) << out;
  std::smatch eval;
  ASSERT_TRUE(std::regex_search(out, eval, std::regex(R"(eval loss +([0-9.]+) after step 40)")))
      << out;
  EXPECT_LT(std::stod(eval[1]), first - 1.0) << out;  // the held-out text is the same kind
  // K: 65536 - 32 = 65504 starts, 6550 held out, the 32 between them skipped: 58922 train. 40
  // steps of 1 x 4 x 4 sequences are 640 of them.
  EXPECT_NE(out.find("  epoch       0.01: 0 passes over 58922 training windows + 640 sequences\n"),
            std::string::npos)
      << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(step +40/40 \[#+\].*  epoch 0\.01)"))) << out;
  ExpectFlopRate(out);
  EXPECT_NE(out.find("measured "), std::string::npos) << out;
  EXPECT_NE(out.find("simulated "), std::string::npos) << out;
  // The kept traced steps, measured and re-simulated under their own measured costs.
  std::smatch traced, resimulated;
  ASSERT_TRUE(std::regex_search(out, traced,
                                std::regex(R"(traced +([0-9.]+)% \(median of steps (\d+)-40,)")))
      << out;
  ASSERT_TRUE(std::regex_search(
      out, resimulated,
      std::regex(R"(simulated +([0-9.]+)% \(median of the same steps, each under its own measured )"
                 R"(costs: per-stage F, B, I, W, ([0-9.]+) ms per send, ([0-9.]+) ms latency\))")))
      << out;
  EXPECT_GE(std::stoi(traced[2]), 33);  // ppcoord keeps the newest 8 traced steps
  EXPECT_LE(std::stoi(traced[2]), 40);
  for (const std::string idle : {traced[1].str(), resimulated[1].str()}) {
    EXPECT_GT(std::stod(idle), 0) << out;  // 1F1B on 2 ranks always idles
    EXPECT_LT(std::stod(idle), 100) << out;
  }
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(\nrank 0: (\[ +\] )*\[F1 *\])"))) << out;
  EXPECT_NE(out.find("\nrank 1: "), std::string::npos) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(\(one cell = [0-9.]+ m?s;)"))) << out;

  google::protobuf::Struct trace;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(ReadFile(dir_ + "/trace.json"), &trace).ok());
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
  std::unique_ptr<Launcher> ppctl = StartPpctl({"--workers=2", "--job=" + Spec(kLong)});
  ASSERT_NE(ppctl, nullptr);
  ASSERT_TRUE(ppctl->WaitForOutput(kFirstStep, absl::Seconds(40))) << ppctl->Output();
  const std::string temp_dir = std::regex_replace(
      ppctl->Output(), std::regex(R"([\s\S]*logs and address files in ([^\n]*)/ppctl-up\n[\s\S]*)"),
      "$1");
  ASSERT_TRUE(std::filesystem::exists(temp_dir)) << temp_dir;
  ASSERT_EQ(kill(sig == SIGINT ? -ppctl->pid() : ppctl->pid(), sig), 0);
  const absl::Time sent = absl::Now();
  const absl::StatusOr<int> code = ppctl->Wait(absl::Seconds(20));
  ASSERT_TRUE(code.ok()) << "still running 20 s after the signal:\n" << ppctl->Output();
  EXPECT_LT(absl::Now() - sent, absl::Seconds(10));
  ASSERT_FALSE(ppctl->signaled()) << ppctl->Output();  // it exits with 128 + sig itself
  EXPECT_EQ(*code, 128 + sig) << ppctl->Output();
  EXPECT_NE(
      ppctl->Output().find(sig == SIGINT ? "interrupted by SIGINT" : "interrupted by SIGTERM"),
      std::string::npos)
      << ppctl->Output();
  ExpectNothingLeft(*ppctl, 3);
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
  std::unique_ptr<Launcher> ppctl =
      StartPpctl({"--workers=2", "--job=" + Spec(kLong), "--data_dir=" + dir_ + "/data"});
  ASSERT_NE(ppctl, nullptr);
  ASSERT_TRUE(ppctl->WaitForOutput(kFirstStep, absl::Seconds(40))) << ppctl->Output();
  ASSERT_EQ(kill(ppctl->pid(), SIGKILL), 0);
  ASSERT_TRUE(ppctl->Wait(absl::Seconds(5)).ok());
  ASSERT_GE(ppctl->children_seen().size(), 3u);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  for (pid_t pid : ppctl->children_seen()) {
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
  std::unique_ptr<Launcher> ppctl = StartPpctl({"--workers=2", "--job=" + Spec(kLong)});
  ASSERT_NE(ppctl, nullptr);
  ASSERT_TRUE(ppctl->WaitForOutput(kFirstStep, absl::Seconds(40))) << ppctl->Output();
  pid_t worker = 0;
  for (pid_t pid : ppctl->children_seen()) {
    if (ReadFile(absl::StrCat("/proc/", pid, "/cmdline")).find("--name=w1") != std::string::npos) {
      worker = pid;
    }
  }
  ASSERT_NE(worker, 0) << "worker w1 was not seen";
  ASSERT_EQ(kill(worker, SIGKILL), 0);
  const absl::StatusOr<int> code = ppctl->Wait(absl::Seconds(15));
  ASSERT_TRUE(code.ok()) << ppctl->Output();
  EXPECT_EQ(*code, 1) << ppctl->Output();
  // Either ppctl sees w1 exit first, or ppcoord fails the job first (a rank lost its peer).
  EXPECT_TRUE(
      std::regex_search(ppctl->Output(), std::regex("w1 was killed by signal 9|did not succeed")))
      << ppctl->Output();
  ExpectNothingLeft(*ppctl, 3);
  // Without --data_dir the failed job's report goes to $TMPDIR, for the user to open: not a test's
  // to leave there.
  std::smatch report;
  const std::string out = ppctl->Output();
  if (std::regex_search(out, report, std::regex("report: ([^\n]+)"))) {
    std::filesystem::remove(report[1].str());
  }
}

TEST_F(UpTest, BadInputIsOneLineAndStartsNothing) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
    int code;  // 2: a usage error (flags, arguments); 1: the job file
  };
  const std::string bad = Write("bad.json", R"({"name": "bad", "model": {"nHeads": 3}})");
  const std::string four =
      Write("four.json",
            std::regex_replace(TinySpec(5), std::regex(R"("pipeline": 2)"), R"("pipeline": 4)"));
  const Case cases[] = {
      {{"--workers=0"}, "--workers must be 1..64, got 0", 2},
      {{"--job=" + dir_ + "/missing.json"}, "missing.json", 1},
      {{"--job=" + bad}, "model.", 1},
      {{"--workers=2", "--job=" + four}, "needs 4 workers", 1},
      {{"stray"}, "unexpected argument 'stray'", 2},
  };
  for (size_t i = 0; i < std::size(cases); ++i) {
    const Case& c = cases[i];
    std::unique_ptr<Launcher> ppctl = StartPpctl(c.args, absl::StrCat("out", i, ".txt"));
    ASSERT_NE(ppctl, nullptr);
    const absl::StatusOr<int> code = ppctl->Wait(absl::Seconds(10));
    ASSERT_TRUE(code.ok());
    const std::string out = ppctl->Output();
    EXPECT_EQ(*code, c.code) << out;
    EXPECT_EQ(out.rfind("ppctl up: ", 0), 0u) << out;
    EXPECT_NE(out.find(c.message), std::string::npos) << out;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
    EXPECT_TRUE(ppctl->children_seen().empty()) << out;
  }
}

// A free TCP port on 127.0.0.1 (bound to port 0 and released): Prometheus cannot announce the
// port it bound.
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  close(fd);
  return port;
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
  absl::StatusOr<std::string> body =
      coordinator::testing::HttpGet(absl::StrCat("127.0.0.1:", port), path);
  google::protobuf::Struct answer;
  if (!body.ok() || !google::protobuf::util::JsonStringToMessage(*body, &answer).ok()) {
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
  if (!google::protobuf::util::JsonStringToMessage(ReadFile(file), &parsed).ok()) return "";
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
  std::unique_ptr<Launcher> ppctl =
      StartPpctl({"--workers=2", "--job=" + Spec(kLong), "--data_dir=" + data});
  ASSERT_NE(ppctl, nullptr);
  ASSERT_TRUE(ppctl->WaitForOutput(kFirstStep, absl::Seconds(40))) << ppctl->Output();
  const std::string run = data + "/ppctl-up/";
  const std::string coordinator = AddressField(run + "ppcoord.json", "metrics");
  const std::string w0 = AddressField(run + "w0.json", "metrics");
  const std::string w1 = AddressField(run + "w1.json", "metrics");
  ASSERT_FALSE(coordinator.empty() || w0.empty() || w1.empty());

  const int port = FreePort();
  const std::string config = Write(
      "prometheus.yml", absl::StrCat(R"(global: {scrape_interval: 1s, evaluation_interval: 1s}
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
  absl::StatusOr<std::unique_ptr<Process>> started = Process::Start(
      {prometheus, "--config.file=" + config, "--storage.tsdb.path=" + dir_ + "/tsdb",
       absl::StrCat("--web.listen-address=127.0.0.1:", port), "--log.level=warn"},
      dir_ + "/prometheus.txt");
  ASSERT_TRUE(started.ok()) << started.status();
  Process& server = **started;

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
    ASSERT_FALSE(server.Wait(absl::Milliseconds(250)).ok()) << "prometheus exited:\n"
                                                            << server.Log();
  }
  ASSERT_EQ(loss.size(), 1u) << server.Log();
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

  server.Signal(SIGTERM);
  EXPECT_TRUE(server.Wait(absl::Seconds(10)).ok());
  kill(-ppctl->pid(), SIGINT);
  const absl::StatusOr<int> code = ppctl->Wait(absl::Seconds(20));
  ASSERT_TRUE(code.ok());
  EXPECT_FALSE(ppctl->signaled());
  EXPECT_EQ(*code, 128 + SIGINT);
  ExpectNothingLeft(*ppctl, 3);
}

}  // namespace
}  // namespace pp::testing_up
