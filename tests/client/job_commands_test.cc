// ppctl's server commands (client/job_commands) against an in-process ppcoord and fake workers.
#include "client/job_commands.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <streambuf>
#include <string>
#include <thread>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/job_spec.h"
#include "coordinator/coordinator.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/client/local_coordinator.h"
#include "tests/coordinator/test_support.h"

// ppctl's plan command defines --format; this binary does not link it.
ABSL_FLAG(std::string, format, "ascii", "output format");
ABSL_DECLARE_FLAG(std::string, coordinator);
ABSL_DECLARE_FLAG(absl::Duration, rpc_timeout);
ABSL_DECLARE_FLAG(int32_t, step);
ABSL_DECLARE_FLAG(int32_t, epoch);
ABSL_DECLARE_FLAG(std::string, parallel);

namespace pp::client {
namespace {

using ::pp::coordinator::testing::FakeWorker;
using ::pp::coordinator::testing::WaitUntil;
using ::testing::HasSubstr;

struct Output {
  int code;
  std::string out;
  std::string err;
};

Output Ppctl(const std::string& command, const std::vector<std::string>& args) {
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const int code = RunJobCommand(command, args);
  Output o{code, ::testing::internal::GetCapturedStdout(),
           ::testing::internal::GetCapturedStderr()};
  return o;
}

class JobCommandsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(coordinator_.Start("ppctl_"));
    absl::SetFlag(&FLAGS_coordinator, coordinator_.address());
    absl::SetFlag(&FLAGS_rpc_timeout, absl::Seconds(5));
    absl::SetFlag(&FLAGS_step, 0);
    absl::SetFlag(&FLAGS_epoch, 0);
    absl::SetFlag(&FLAGS_format, "ascii");
  }
  void TearDown() override { coordinator_.Stop(); }

  // A job spec file in the JSON shape of docs/jobs.md; `extra` is spliced into "train".
  std::string SpecFile(const std::string& schedule, const std::string& n_heads = "4") {
    const std::string path = (coordinator_.dir / "job.json").string();
    std::ofstream(path) << absl::StrCat(
        R"({"name": "tiny", "model": {"vocabSize": 256, "seqLen": 16, "dModel": 32, "nHeads": )",
        n_heads, R"(, "nLayers": 2}, "parallel": {"pipeline": 2, "schedule": ")", schedule,
        R"("}, "train": {"steps": 2, "microbatches": 4, "microbatchSize": 1, "lr": 0.001},)",
        R"( "data": {"path": ")", coordinator_.corpus, R"("}})");
    return path;
  }

  std::string Submitted(const std::string& schedule = "1f1b") {
    Output o = Ppctl("submit", {SpecFile(schedule)});
    EXPECT_EQ(o.code, 0) << o.err;
    std::string id = o.out;
    while (!id.empty() && id.back() == '\n') id.pop_back();
    return id;
  }

  testing::LocalCoordinator coordinator_;
};

TEST_F(JobCommandsTest, SubmitGetListCancel) {
  const std::string id = Submitted();
  EXPECT_THAT(id, HasSubstr("tiny"));
  Output get = Ppctl("get", {id});
  EXPECT_EQ(get.code, 0);
  EXPECT_THAT(get.out, HasSubstr("\"state\": \"QUEUED\""));
  Output list = Ppctl("list", {});
  EXPECT_EQ(list.code, 0);
  EXPECT_THAT(list.out, HasSubstr(id));
  EXPECT_THAT(list.out, HasSubstr("1f1b D=2"));
  Output cancel = Ppctl("cancel", {id});
  EXPECT_EQ(cancel.code, 0);
  EXPECT_THAT(cancel.out, HasSubstr("CANCELLED"));
  Output again = Ppctl("cancel", {id});
  EXPECT_EQ(again.code, 1);
  EXPECT_THAT(again.err, HasSubstr("already ended"));
  Output watch = Ppctl("watch", {id});  // a cancelled job did not succeed
  EXPECT_EQ(watch.code, 1);
  EXPECT_THAT(watch.out, HasSubstr("CANCELLED"));
}

TEST_F(JobCommandsTest, ListFollowsEveryPage) {
  std::vector<std::string> ids;
  for (int i = 0; i < 230; ++i) ids.push_back(Submitted());  // three pages of the default 100
  Output list = Ppctl("list", {});
  EXPECT_EQ(list.code, 0) << list.err;
  EXPECT_EQ(std::count(list.out.begin(), list.out.end(), '\n'), 1 + 230);
  EXPECT_EQ(list.out.rfind("JOB"), 0u) << "one header, first";
  for (const std::string& id : ids) EXPECT_THAT(list.out, HasSubstr(id + " "));
}

TEST_F(JobCommandsTest, QueueShowsTheWaitingJobsInOrderAndWhatRuns) {
  const std::string first = Submitted();  // no workers: both wait
  const std::string second = Submitted();
  Output queue = Ppctl("queue", {});
  EXPECT_EQ(queue.code, 0) << queue.err;
  EXPECT_EQ(queue.out.rfind("POS", 0), 0u) << queue.out;
  EXPECT_THAT(queue.out, HasSubstr("1    " + first + " ")) << queue.out;
  EXPECT_THAT(queue.out, HasSubstr("2    " + second + " ")) << queue.out;
  EXPECT_THAT(queue.out, ::testing::EndsWith("\nrunning: 0 jobs on 0 workers\n")) << queue.out;
  EXPECT_EQ(Ppctl("cancel", {first}).code, 0);
  EXPECT_EQ(Ppctl("cancel", {second}).code, 0);
  Output empty = Ppctl("queue", {});
  EXPECT_EQ(empty.code, 0) << empty.err;
  EXPECT_EQ(empty.out, "no queued jobs\nrunning: 0 jobs on 0 workers\n");
  EXPECT_EQ(Ppctl("queue", {"extra"}).code, 2);
}

TEST_F(JobCommandsTest, BadInputGivesOneLineAndNonZeroExit) {
  Output invalid = Ppctl("submit", {SpecFile("1f1b", "5")});
  EXPECT_EQ(invalid.code, 1);
  EXPECT_THAT(invalid.err, HasSubstr("model.n_heads"));
  EXPECT_EQ(std::count(invalid.err.begin(), invalid.err.end(), '\n'), 1);
  Output missing = Ppctl("submit", {(coordinator_.dir / "nope.json").string()});
  EXPECT_EQ(missing.code, 1);
  EXPECT_THAT(missing.err, HasSubstr("nope.json"));
  EXPECT_EQ(Ppctl("get", {}).code, 2);
  EXPECT_EQ(Ppctl("frobnicate", {}).code, 2);
  Output unknown = Ppctl("get", {"no-such-job"});
  EXPECT_EQ(unknown.code, 1);
  EXPECT_THAT(unknown.err, HasSubstr("no-such-job"));
  Output resume = Ppctl("resume", {"no-such-job"});
  EXPECT_EQ(resume.code, 1);
  EXPECT_THAT(resume.err, HasSubstr("no-such-job"));
  absl::SetFlag(&FLAGS_parallel, "{\"pipeline\": \"two\"}");
  Output layout = Ppctl("resume", {"no-such-job"});
  absl::SetFlag(&FLAGS_parallel, "");
  EXPECT_EQ(layout.code, 2);
  EXPECT_THAT(layout.err, HasSubstr("--parallel"));
}

TEST_F(JobCommandsTest, MalformedCoordinatorIsAUsageErrorBeforeAnyDial) {
  for (const std::string address : {"127.0.0.1", "127.0.0.1:http", "127.0.0.1:0", "[::1]:70000"}) {
    absl::SetFlag(&FLAGS_coordinator, address);
    Output o = Ppctl("list", {});
    EXPECT_EQ(o.code, 2) << address;
    EXPECT_EQ(o.err, absl::StrCat("ppctl list: --coordinator=", address,
                                  ": want HOST:PORT of ppcoord, e.g. 127.0.0.1:50051\n"));
  }
}

// A port that is bound but never listened on refuses every connection, and this test holds it for
// its whole run, so no other process can start serving there (a fixed port such as 1 can be taken
// by any root process on the machine).
int BoundPortNobodyListensOn(int* fd) {
  *fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (*fd < 0 || ::bind(*fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return -1;
  socklen_t len = sizeof(addr);
  if (::getsockname(*fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return -1;
  return ntohs(addr.sin_port);
}

TEST_F(JobCommandsTest, UnreachableCoordinatorFailsWithinTheTimeout) {
  int fd = -1;
  const int port = BoundPortNobodyListensOn(&fd);
  ASSERT_GT(port, 0) << "cannot bind a loopback port";
  const std::string address = absl::StrCat("127.0.0.1:", port);
  absl::SetFlag(&FLAGS_coordinator, address);
  absl::SetFlag(&FLAGS_rpc_timeout, absl::Milliseconds(500));
  const absl::Time start = absl::Now();
  Output o = Ppctl("list", {});
  ::close(fd);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(o.code, 1);
  EXPECT_THAT(o.err, HasSubstr("cannot reach the coordinator at " + address));
}

TEST_F(JobCommandsTest, WatchFollowsTheJobToSuccessAndTraceDrawsAStep) {
  const std::string id = Submitted();
  std::thread cluster([this] { coordinator_.RunJobOnFakeWorkers(2); });
  Output watch = Ppctl("watch", {id});
  cluster.join();
  EXPECT_EQ(watch.code, 0) << watch.err;
  EXPECT_THAT(watch.out, HasSubstr("step 1/2  loss 4.0000"));
  EXPECT_THAT(watch.out, HasSubstr("bubble 50.0%"));
  EXPECT_THAT(watch.out, HasSubstr("ETA 0:00"));
  EXPECT_THAT(watch.out, HasSubstr("FINISHED step 2/2"));

  Output ascii = Ppctl("trace", {id});
  EXPECT_EQ(ascii.code, 0) << ascii.err;
  EXPECT_THAT(ascii.out, HasSubstr("step 2"));
  EXPECT_THAT(ascii.out, HasSubstr("F1"));
  absl::SetFlag(&FLAGS_format, "chrome");
  absl::SetFlag(&FLAGS_step, 1);
  Output chrome = Ppctl("trace", {id});
  EXPECT_EQ(chrome.code, 0) << chrome.err;
  EXPECT_THAT(chrome.out, HasSubstr("traceEvents"));
  absl::SetFlag(&FLAGS_step, 9);
  EXPECT_EQ(Ppctl("trace", {id}).code, 1);
  absl::SetFlag(&FLAGS_format, "svg");
  EXPECT_EQ(Ppctl("trace", {id}).code, 2);

  Output workers = Ppctl("workers", {});
  EXPECT_EQ(workers.code, 0);
  EXPECT_THAT(workers.out, HasSubstr("w0"));
  EXPECT_THAT(workers.out, HasSubstr("IDLE"));
}

TEST_F(JobCommandsTest, HistoryPrintsEveryRecordedStepAsATableCsvOrJson) {
  const std::string id = Submitted();
  coordinator_.RunJobOnFakeWorkers(2);
  // The committer writes the steps in its next round.
  Output table;
  ASSERT_TRUE(WaitUntil(
      [&] {
        table = Ppctl("history", {id});
        return table.code == 0 && table.out.find("\n       2 ") != std::string::npos;
      },
      absl::Seconds(10)))
      << table.out << table.err;
  EXPECT_THAT(table.out, HasSubstr("STEP ATTEMPT"));
  EXPECT_THAT(table.out, HasSubstr("       1       0    4.0000"));
  absl::SetFlag(&FLAGS_format, "csv");
  Output csv = Ppctl("history", {id});
  EXPECT_EQ(csv.code, 0) << csv.err;
  EXPECT_THAT(csv.out, ::testing::StartsWith("step,attempt,loss,learning_rate,grad_norm,"));
  EXPECT_THAT(csv.out, HasSubstr("\n1,0,4,"));
  EXPECT_THAT(csv.out, ::testing::ContainsRegex("\n2,0,3,[^,]+,1,"));  // grad norm 0.5 x step
  EXPECT_THAT(csv.out, HasSubstr("\n2,0,3,"));
  absl::SetFlag(&FLAGS_format, "json");
  Output json = Ppctl("history", {id});
  EXPECT_EQ(json.code, 0) << json.err;
  EXPECT_THAT(json.out, HasSubstr("\"step\":2"));
  EXPECT_THAT(json.out, HasSubstr("\"gradNorm\":0.5"));
  absl::SetFlag(&FLAGS_format, "svg");
  EXPECT_EQ(Ppctl("history", {id}).code, 2);
  absl::SetFlag(&FLAGS_format, "csv");
  EXPECT_EQ(Ppctl("history", {"nope-9"}).code, 1);
}

TEST_F(JobCommandsTest, GetAndWatchShowTheEpochAndResumeSendsIt) {
  // 24 tokens of seq_len 16: K = 8 training windows; 1 x 4 x 1 = 4 sequences a step, so each
  // step is half a pass.
  std::ofstream(coordinator_.dir / "corpus.txt", std::ios::trunc) << std::string(24, 'x');
  const std::string id = Submitted();
  std::thread cluster([this] { coordinator_.RunJobOnFakeWorkers(2); });
  Output watch = Ppctl("watch", {id});
  cluster.join();
  EXPECT_EQ(watch.code, 0) << watch.err;
  EXPECT_THAT(watch.out, HasSubstr("bubble 50.0%  epoch 0.50  ETA")) << watch.out;
  EXPECT_THAT(watch.out, HasSubstr("FINISHED step 2/2")) << watch.out;
  EXPECT_THAT(watch.out, HasSubstr("epoch 1.00")) << watch.out;

  Output get = Ppctl("get", {id});
  ASSERT_EQ(get.code, 0) << get.err;
  pp::v1::Job job;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(get.out, &job).ok()) << get.out;
  EXPECT_EQ(job.train_windows(), 8);
  EXPECT_EQ(job.epoch().completed(), 1);
  EXPECT_EQ(job.epoch().sequence(), 0);
  EXPECT_EQ(job.epoch().windows(), 8);
  EXPECT_DOUBLE_EQ(job.epoch().epoch(), 1.0);

  // No checkpoint was written (fake workers): the refusal names where epoch 3 starts, ceil(3 x 8 /
  // 4) = step 6, so the request carried epoch 3.
  absl::SetFlag(&FLAGS_epoch, 3);
  Output resume = Ppctl("resume", {id});
  EXPECT_EQ(resume.code, 1);
  EXPECT_THAT(resume.err, HasSubstr("epoch 3 starts at step 6")) << resume.err;
  absl::SetFlag(&FLAGS_step, 2);  // --step and --epoch: at most one
  Output both = Ppctl("resume", {id});
  EXPECT_EQ(both.code, 1);
  EXPECT_THAT(both.err, HasSubstr("set at most one")) << both.err;
}

// What a command writes to std::cout, readable by another thread while it runs: ppctl watch
// blocks until its job ends, and the test acts on the cluster once the watch printed its first
// line (it is subscribed then: WatchJob answers with the job's state first).
class SharedOutput : public std::streambuf {
 public:
  std::string str() {
    absl::MutexLock lock(&mu_);
    return text_;
  }

 protected:
  int_type overflow(int_type c) override {
    if (c != traits_type::eof()) {
      absl::MutexLock lock(&mu_);
      text_.push_back(static_cast<char>(c));
    }
    return c;
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    absl::MutexLock lock(&mu_);
    text_.append(s, static_cast<size_t>(n));
    return n;
  }

 private:
  absl::Mutex mu_;
  std::string text_ ABSL_GUARDED_BY(mu_);
};

// A 10-step D=2 job spec of priority class `priority`, written as coordinator.dir/NAME.json.
std::string PrioritySpecFile(const testing::LocalCoordinator& coordinator, const std::string& name,
                             const std::string& priority) {
  const std::string path = (coordinator.dir / (name + ".json")).string();
  std::ofstream(path) << absl::StrCat(
      R"({"name": ")", name, R"(", "priority": ")", priority,
      R"(", "model": {"vocabSize": 256, "seqLen": 16, "dModel": 32, "nHeads": 4, "nLayers": 2},)",
      R"( "parallel": {"pipeline": 2, "schedule": "1f1b"}, "train": {"steps": 10,)",
      R"( "microbatches": 4, "microbatchSize": 1, "lr": 0.001}, "data": {"path": ")",
      coordinator.corpus, R"("}})");
  return path;
}

pp::v1::Job GetJob(testing::LocalCoordinator& coordinator, const std::string& id) {
  pp::v1::GetJobRequest request;
  request.set_job_id(id);
  pp::v1::Job job;
  grpc::ClientContext context;
  EXPECT_TRUE(coordinator.stub->GetJob(&context, request, &job).ok());
  return job;
}

// Every fake worker reports step 1 of `job` (the last rank with its loss).
void ReportStepOne(testing::LocalCoordinator& coordinator, const std::string& job) {
  for (auto& w : coordinator.fake_workers) {
    pp::v1::StepReport report;
    report.set_job_id(job);
    report.set_rank(w->tasks().back().rank());
    report.set_step(1);
    report.set_step_seconds(0.004);
    report.set_busy_seconds(0.002);
    report.set_has_loss(report.rank() == 1);
    report.set_loss(4.0);
    pp::v1::ReportResponse response;
    grpc::ClientContext context;
    ASSERT_TRUE(w->registry().ReportStep(&context, report, &response).ok());
  }
}

// A low job on w0 and w1 is preempted by a high one: ppctl watch of the low job prints the
// EVENT_PREEMPTED line (why it stops, for which job, after which step) without the step's rates,
// and follows the job on until it is cancelled.
TEST_F(JobCommandsTest, WatchPrintsThePreemptionLine) {
  Output submitted = Ppctl("submit", {PrioritySpecFile(coordinator_, "low", "low")});
  ASSERT_EQ(submitted.code, 0) << submitted.err;
  const std::string low = submitted.out.substr(0, submitted.out.find('\n'));
  for (const char* name : {"w0", "w1"}) {
    coordinator_.fake_workers.push_back(std::make_unique<FakeWorker>(name, coordinator_.address()));
  }
  for (auto& w : coordinator_.fake_workers) ASSERT_TRUE(w->WaitForTask(absl::Seconds(10)));
  auto get = [this](const std::string& id) { return GetJob(coordinator_, id); };
  // Step 1 on both ranks: the preemption stops the job after step 2.
  ReportStepOne(coordinator_, low);
  ASSERT_TRUE(WaitUntil([&] { return get(low).step() == 1; }, absl::Seconds(5)));

  SharedOutput out;
  int code = -1;
  std::streambuf* const saved = std::cout.rdbuf(&out);
  std::thread watch([&] { code = RunJobCommand("watch", {low}); });
  // On every exit: the low job is cancelled (which ends the watch) and std::cout restored.
  struct Ending {
    std::function<void()> run;
    ~Ending() { run(); }
  } ending{[&] {
    pp::v1::CancelJobRequest cancel;
    cancel.set_job_id(low);
    pp::v1::Job job;
    grpc::ClientContext context;
    (void)coordinator_.stub->CancelJob(&context, cancel, &job);
    watch.join();
    std::cout.rdbuf(saved);
  }};
  ASSERT_TRUE(
      WaitUntil([&] { return out.str().find(low) != std::string::npos; }, absl::Seconds(10)));
  absl::StatusOr<pp::v1::JobSpec> high_spec =
      common::LoadJobSpec(PrioritySpecFile(coordinator_, "high", "high"));
  ASSERT_TRUE(high_spec.ok()) << high_spec.status();
  pp::v1::SubmitJobRequest request;
  *request.mutable_spec() = *high_spec;
  pp::v1::SubmitJobResponse response;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(coordinator_.stub->SubmitJob(&context, request, &response).ok());
  }
  const std::string high = response.job_id();
  ASSERT_TRUE(WaitUntil([&] { return get(low).preemptions() == 1; }, absl::Seconds(5)));
  const std::string line =
      absl::StrCat(low, " PREEMPTED step 1/10  preempted by job ", high,
                   " (priority high 200): checkpoints after step 2, then waits for workers\n");
  EXPECT_TRUE(
      WaitUntil([&] { return out.str().find(line) != std::string::npos; }, absl::Seconds(5)))
      << out.str();
  // Still watching: the job is not over until it is cancelled.
  EXPECT_EQ(get(low).state(), pp::v1::RUNNING);
  ending.run();
  ending.run = [] {};
  EXPECT_EQ(code, 1);  // a cancelled job did not succeed
  const std::string all = out.str();
  EXPECT_THAT(all, HasSubstr(low + " CANCELLED")) << all;
  EXPECT_LT(all.find(line), all.find(low + " CANCELLED")) << all;
}

}  // namespace
}  // namespace pp::client
