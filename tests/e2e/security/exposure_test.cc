// What an attacker reaches around the credentials, with real processes on loopback: ppcoord with a
// token file but no TLS, a world-writable `ppctl up --data_dir`, idle connections to ppcoord's
// /metrics (its liveness probe), users sharing one source address (a port-forward) and the
// WatchJob cap, a --grpc name that only looks like loopback, and a step report at INT_MAX.
// Each test failed on the binaries before its fix (PP_TEST_BIN_DIR, docs/testing.md).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/tls.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "pp/v1/coordinator.grpc.pb.h"
#include "tests/e2e/security/calls.h"
#include "tests/e2e/security/test_certs.h"
#include "tests/support/cluster.h"
#include "tests/support/fixture.h"
#include "tests/support/process.h"

namespace pp::security_test {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// A TCP connection to a numeric IPv4 HOST:PORT, closed when it goes away.
class Connection {
 public:
  explicit Connection(const std::string& address) {
    std::vector<std::string> parts = absl::StrSplit(address, ':');
    int port = 0;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[1], &port) ||
        inet_pton(AF_INET, parts[0].c_str(), &addr.sin_addr) != 1) {
      return;
    }
    addr.sin_port = htons(static_cast<uint16_t>(port));
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      close(fd_);
      fd_ = -1;
    }
  }
  ~Connection() {
    if (fd_ >= 0) close(fd_);
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  bool ok() const { return fd_ >= 0; }
  bool Send(const std::string& bytes) const {
    return write(fd_, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size());
  }
  // What the server sends until it closes the connection; DeadlineExceeded if it has not by then.
  absl::StatusOr<std::string> ReadToEnd(absl::Time deadline) const {
    std::string answer;
    char buffer[4096];
    for (absl::Time now = absl::Now(); now < deadline; now = absl::Now()) {
      pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
      if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(deadline - now)) + 1) <= 0) {
        continue;
      }
      const ssize_t n = read(fd_, buffer, sizeof(buffer));
      if (n <= 0) return answer;  // closed (or reset)
      answer.append(buffer, n);
    }
    return absl::DeadlineExceededError(absl::StrCat("still open; got ", answer.size(), " bytes"));
  }

 private:
  int fd_ = -1;
};

// The daemon's output once it printed `text` or exited, or after `timeout`.
std::string WaitForLog(testing_support::Process& process, const std::string& text,
                       absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!absl::StrContains(process.Log(), text) && process.running() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
    (void)process.Wait(absl::ZeroDuration());
  }
  return process.Log();
}

// A WatchJob stream: Open returns once its first event came (the server then holds its slot) or
// the stream ended; the stream is cancelled and finished when the Watch goes away.
class Watch {
 public:
  static std::unique_ptr<Watch> Open(pp::v1::Coordinator::Stub& stub, const std::string& job) {
    auto watch = std::unique_ptr<Watch>(new Watch());
    watch->context_.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
    pp::v1::WatchJobRequest request;
    request.set_job_id(job);
    watch->reader_ = stub.WatchJob(&watch->context_, request);
    pp::v1::JobEvent first;
    watch->open_ = watch->reader_->Read(&first);
    return watch;
  }
  ~Watch() { (void)Close(); }

  bool open() const { return open_; }
  // How the stream ended (CANCELLED for one still open).
  grpc::Status Close() {
    if (!closed_) {
      if (open_) context_.TryCancel();
      status_ = reader_->Finish();
      closed_ = true;
    }
    return status_;
  }

 private:
  Watch() = default;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<pp::v1::JobEvent>> reader_;
  bool open_ = false, closed_ = false;
  grpc::Status status_;
};

class ExposureTest : public testing_support::ClusterTest {
 protected:
  void SetUp() override {
    ClusterTest::SetUp();
    certs_ = (dir_ / "certs").string();
    const absl::Status made = MakeCertFolder(certs_, {"ppcoord", "w0", "w1"}, {});
    ASSERT_TRUE(made.ok()) << made;
    tokens_ = certs_ + "/tokens";
    std::ofstream(tokens_) << "tok-ops submit ops\ntok-alice view alice\ntok-bob view bob\n";
  }

  // ppcoord with TLS and the token file, `workers` workers; the harness's stub is user "ops"
  // (role submit) by its token.
  void StartSecure(int workers) {
    absl::StatusOr<std::unique_ptr<testing_support::Cluster>> cluster =
        StartSecureCluster({.certs = certs_,
                            .root = dir_.string(),
                            .cluster_dir = (dir_ / "cluster").string(),
                            .bin_dir = BinDir(),
                            .coordinator_flags = {"--auth_tokens=" + tokens_},
                            .credentials = ClientCredentials(certs_, "", "tok-ops"),
                            .workers = workers});
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
  }

  // ppcoord alone on loopback ports 0 (the address file says which) with `flags` more.
  std::vector<std::string> Ppcoord(const std::vector<std::string>& flags) const {
    std::vector<std::string> argv = {BinDir() + "/ppcoord", "--metrics=127.0.0.1:0",
                                     "--data_dir=" + (dir_ / "coord").string()};
    argv.insert(argv.end(), flags.begin(), flags.end());
    return argv;
  }

  std::unique_ptr<pp::v1::Coordinator::Stub> Client(const std::string& token) const {
    return pp::v1::Coordinator::NewStub(
        grpc::CreateChannel(cluster_->coordinator().grpc, ClientCredentials(certs_, "", token)));
  }

  pp::v1::JobSpec Spec(int steps) const {
    pp::v1::JobSpec spec = SpecFrom(R"pb(
      name: "exposed"
      model { n_layers: 2 seq_len: 32 d_model: 32 n_heads: 4 }
      parallel { pipeline: 2 }
      train { microbatches: 4 microbatch_size: 2 }
    )pb");
    spec.mutable_train()->set_steps(steps);
    return spec;
  }

  std::string certs_, tokens_;
};

// Tokens guard the job API only: without TLS anyone could still register a worker and be sent
// task plans, or fail jobs with reports. So ppcoord refuses the combination unless told.
TEST_F(ExposureTest, TokensWithoutTlsNeedInsecure) {
  const std::vector<std::string> argv = Ppcoord({"--grpc=127.0.0.1:0", "--auth_tokens=" + tokens_});
  absl::StatusOr<testing_support::CommandResult> refused =
      testing_support::RunCommand(argv, absl::Seconds(20));
  ASSERT_TRUE(refused.ok()) << refused.status() << ": it served instead of refusing";
  EXPECT_EQ(refused->exit_code, 2);
  EXPECT_THAT(refused->err, HasSubstr("--auth_tokens needs --tls_cert, --tls_key and --tls_ca"));
  EXPECT_EQ(std::count(refused->err.begin(), refused->err.end(), '\n'), 1) << refused->err;

  std::vector<std::string> insecure = argv;
  insecure.push_back("--insecure");
  absl::StatusOr<std::unique_ptr<testing_support::Process>> open =
      testing_support::Process::Start(insecure, (dir_ / "insecure.log").string());
  ASSERT_TRUE(open.ok()) << open.status();
  const std::string log = WaitForLog(**open, "ppcoord: serving", absl::Seconds(20));
  EXPECT_THAT(log, HasSubstr("ppcoord: serving"));
  EXPECT_THAT(log, HasSubstr("WARNING: --insecure: --auth_tokens without TLS"));
  size_t warnings = 0;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    warnings += absl::StrContains(line, "WARNING") ? 1 : 0;
  }
  EXPECT_EQ(warnings, 1) << log;
}

// A folder others may write into lets them swap the run's store, checkpoints or keys.
TEST_F(ExposureTest, PpctlUpKeepsItsDataDirToItsUser) {
  const std::string job = (dir_ / "tiny.json").string();
  std::ofstream(job) << R"({"name": "tiny",
      "model": {"vocabSize": 256, "seqLen": 16, "dModel": 16, "nHeads": 2, "nLayers": 1},
      "parallel": {"pipeline": 1, "schedule": "1f1b"},
      "train": {"steps": 2, "microbatches": 2, "microbatchSize": 2},
      "data": {"format": "generated", "generatedTokens": 8192, "generatedSeed": 3}})";
  const std::string ppctl = BinDir() + "/ppctl";
  auto up = [&](const std::string& data) {
    absl::StatusOr<testing_support::CommandResult> result = testing_support::RunCommand(
        {ppctl, "up", "--workers=1", "--job=" + job, "--data_dir=" + data}, absl::Seconds(90));
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *result : testing_support::CommandResult{};
  };
  for (const mode_t mode : {0777, 0770}) {
    const std::string data = (dir_ / absl::StrFormat("open-%o", mode)).string();
    std::filesystem::create_directories(data);
    ASSERT_EQ(chmod(data.c_str(), mode), 0);
    const testing_support::CommandResult refused = up(data);
    EXPECT_EQ(refused.exit_code, 1) << refused.out;
    EXPECT_THAT(refused.err, HasSubstr("ppctl up: --data_dir=" + data));
    EXPECT_THAT(refused.err, HasSubstr(absl::StrFormat("has mode %04o", mode)));
    EXPECT_THAT(refused.err, HasSubstr("chmod go-w"));
    EXPECT_TRUE(std::filesystem::is_empty(data)) << "nothing is written into it";
  }
  // A missing folder is made for this user alone.
  const std::string mine = (dir_ / "mine" / "data").string();
  const testing_support::CommandResult ran = up(mine);
  EXPECT_EQ(ran.exit_code, 0) << ran.err;
  struct stat info {};
  ASSERT_EQ(stat(mine.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 07777, 0700u);
}

// The secure overlay probes ppcoord's liveness on /metrics: idle connections, more than its
// threads (16, common/metrics_server.h), delay a scrape by one request timeout (2 s) at most.
TEST_F(ExposureTest, IdleConnectionsDoNotStallTheMetricsProbe) {
  testing_support::ClusterOptions options;
  options.bin_dir = BinDir();
  options.dir = (dir_ / "cluster").string();
  absl::StatusOr<std::unique_ptr<testing_support::Cluster>> cluster =
      testing_support::Cluster::Start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  cluster_ = *std::move(cluster);
  const std::string metrics = cluster_->coordinator().metrics;

  std::vector<std::unique_ptr<Connection>> idle;
  for (int i = 0; i < 20; ++i) {
    idle.push_back(std::make_unique<Connection>(metrics));
    ASSERT_TRUE(idle.back()->ok()) << metrics;
  }
  const absl::Time start = absl::Now();
  Connection probe(metrics);
  ASSERT_TRUE(probe.ok());
  ASSERT_TRUE(probe.Send("GET /metrics HTTP/1.0\r\nHost: " + metrics + "\r\n\r\n"));
  absl::StatusOr<std::string> answer = probe.ReadToEnd(start + absl::Seconds(10));
  ASSERT_TRUE(answer.ok()) << answer.status() << ": no answer with 20 idle connections open";
  EXPECT_THAT(*answer, StartsWith("HTTP/1.1 200"));
  EXPECT_THAT(*answer, HasSubstr("pp_jobs"));
  // And the server closes an idle connection itself, within its timeout (slack for load).
  EXPECT_TRUE(idle.front()->ReadToEnd(start + absl::Seconds(8)).ok());
}

// A port-forward or NAT puts every user behind one address: each still has its own 16 watches.
TEST_F(ExposureTest, EachUserBehindOneAddressHasItsOwnWatchAllowance) {
  ASSERT_NO_FATAL_FAILURE(StartSecure(0));
  absl::StatusOr<std::string> id = testing_support::SubmitJob(cluster_->stub(), Spec(3));
  ASSERT_TRUE(id.ok()) << id.status();  // QUEUED while no worker exists: its watches stay open
  std::unique_ptr<pp::v1::Coordinator::Stub> alice = Client("tok-alice"), bob = Client("tok-bob");
  std::vector<std::unique_ptr<Watch>> watches;
  for (int i = 0; i < 16; ++i) {
    watches.push_back(Watch::Open(*alice, *id));
    ASSERT_TRUE(watches.back()->open()) << "watch " << i;
  }
  std::unique_ptr<Watch> over = Watch::Open(*alice, *id);
  EXPECT_FALSE(over->open());
  const grpc::Status refused = over->Close();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(), HasSubstr("user alice holds 16"));
  std::unique_ptr<Watch> bobs = Watch::Open(*bob, *id);
  EXPECT_TRUE(bobs->open()) << "alice's watches took bob's allowance (same source address)";
}

// "127." is a spelling, not an address: the name must resolve to loopback, and this one never does
// (.example, RFC 2606). The lookup is bounded, so this ends even where DNS does not answer.
TEST_F(ExposureTest, ANameCountsAsLoopbackOnlyIfItResolvesThere) {
  absl::StatusOr<testing_support::CommandResult> refused =
      testing_support::RunCommand(Ppcoord({"--grpc=127.evil.example:0"}), absl::Seconds(30));
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_EQ(refused->exit_code, 2) << refused->err;
  EXPECT_THAT(refused->err, HasSubstr("--grpc=127.evil.example:0 is not a loopback address"));

  absl::StatusOr<std::unique_ptr<testing_support::Process>> local = testing_support::Process::Start(
      Ppcoord({"--grpc=localhost:0"}), (dir_ / "localhost.log").string());
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_THAT(WaitForLog(**local, "ppcoord: serving", absl::Seconds(20)),
              HasSubstr("ppcoord: serving"));
}

// train.steps may be INT_MAX; a draining report of that step used to make the stop step
// newest + 1, which overflowed to a negative step.
TEST_F(ExposureTest, AStepReportAtIntMaxStopsAtTheLastStep) {
  constexpr int kMax = std::numeric_limits<int32_t>::max();
  ASSERT_NO_FATAL_FAILURE(StartSecure(2));
  absl::StatusOr<std::string> id = testing_support::SubmitJob(cluster_->stub(), Spec(kMax));
  ASSERT_TRUE(id.ok()) << id.status();
  absl::StatusOr<pp::v1::Job> job = testing_support::WaitForJob(
      cluster_->stub(), *id,
      [](const pp::v1::Job& j) { return j.state() == pp::v1::RUNNING && j.step() > 0; },
      absl::Seconds(60));
  ASSERT_TRUE(job.ok()) << job.status() << cluster_->Logs();
  const std::string worker = job->placement(0).worker();
  pp::v1::StepReport report;
  report.set_job_id(*id);
  report.set_attempt(job->attempt());
  report.set_rank(0);
  report.set_step(kMax);
  report.set_draining(true);
  common::TlsPaths paths{.cert = Files(certs_, worker).cert,
                         .key = Files(certs_, worker).key,
                         .ca = Files(certs_, "ca").cert};
  absl::StatusOr<common::TlsConfig> tls = common::LoadTls(paths);
  ASSERT_TRUE(tls.ok()) << tls.status();
  std::unique_ptr<pp::v1::WorkerRegistry::Stub> registry = pp::v1::WorkerRegistry::NewStub(
      grpc::CreateChannel(cluster_->coordinator().grpc, common::ChannelCredentials(*tls)));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kCallTimeout));
  pp::v1::ReportResponse answer;
  const grpc::Status sent = registry->ReportStep(&context, report, &answer);
  ASSERT_TRUE(sent.ok()) << sent.error_message();
  EXPECT_EQ(answer.stop_after_step(), kMax);
}

}  // namespace
}  // namespace pp::security_test
