#include "bench/chaos/load_run.h"

#include <signal.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <iostream>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/chaos/jobs.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "pp/v1/coordinator.grpc.pb.h"
#include "tests/support/cluster.h"

namespace pp::chaos {
namespace {

using testing_support::Cluster;

constexpr absl::Duration kHeartbeatEvery = absl::Milliseconds(100);

void SetDeadline(grpc::ClientContext* context) {
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
}

// Times `call` (which makes one `method` RPC) into `stats`.
void Timed(RpcStats& stats, const std::string& method, const std::function<grpc::Status()>& call) {
  const absl::Time start = absl::Now();
  const grpc::Status status = call();
  stats.Record(method, status, absl::ToDoubleSeconds(absl::Now() - start));
}

// One client's share of the load: its own channel, its own seeded mix of calls.
class Client {
 public:
  Client(const std::string& address, const pp::v1::JobSpec& small, const pp::v1::JobSpec& big,
         std::string job_id, uint64_t seed, RpcStats& stats)
      : stub_(pp::v1::Coordinator::NewStub(
            grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))),
        small_(small), big_(big), job_id_(std::move(job_id)), rng_(seed), stats_(stats) {}

  void Run(int rpcs) {
    for (int n = 0; n < rpcs; ++n) {
      const int pick = std::uniform_int_distribution<int>(0, 99)(rng_);
      if (pick < 30) {
        Get();
      } else if (pick < 55) {
        List();
      } else if (pick < 75) {
        Plan();
      } else if (pick < 90) {
        Watch();
      } else {
        SubmitAndCancel();
      }
    }
  }

 private:
  void Get() {
    Timed(stats_, "GetJob", [&] {
      grpc::ClientContext context;
      SetDeadline(&context);
      pp::v1::GetJobRequest request;
      request.set_job_id(job_id_);
      pp::v1::Job job;
      return stub_->GetJob(&context, request, &job);
    });
  }

  // Up to three pages of 20, as a client scrolling the list would.
  void List() {
    std::string token;
    for (int page = 0; page < 3; ++page) {
      pp::v1::ListJobsResponse response;
      Timed(stats_, "ListJobs", [&] {
        grpc::ClientContext context;
        SetDeadline(&context);
        pp::v1::ListJobsRequest request;
        request.set_page_size(20);
        request.set_page_token(token);
        return stub_->ListJobs(&context, request, &response);
      });
      token = response.next_page_token();
      if (token.empty()) return;
    }
  }

  void Plan() {
    Timed(stats_, "PlanJob", [&] {
      grpc::ClientContext context;
      SetDeadline(&context);
      pp::v1::PlanJobRequest request;
      *request.mutable_spec() = small_;
      pp::v1::PlanJobResponse response;
      return stub_->PlanJob(&context, request, &response);
    });
  }

  // The stream's latency is its first event's; the cancel that ends it is not an error.
  void Watch() {
    Timed(stats_, "WatchJob", [&] {
      grpc::ClientContext context;
      SetDeadline(&context);
      pp::v1::WatchJobRequest request;
      request.set_job_id(job_id_);
      std::unique_ptr<grpc::ClientReader<pp::v1::JobEvent>> reader =
          stub_->WatchJob(&context, request);
      pp::v1::JobEvent event;
      // Cancelled only once the event came: a refused stream must report the server's code.
      const bool got = reader->Read(&event);
      if (got) context.TryCancel();
      grpc::Status status = reader->Finish();
      return got ? grpc::Status::OK : status;
    });
  }

  // A job too big for the cluster stays QUEUED (others run past it) until cancelled.
  void SubmitAndCancel() {
    pp::v1::SubmitJobResponse submitted;
    grpc::Status status;
    Timed(stats_, "SubmitJob", [&] {
      grpc::ClientContext context;
      SetDeadline(&context);
      pp::v1::SubmitJobRequest request;
      *request.mutable_spec() = big_;
      status = stub_->SubmitJob(&context, request, &submitted);
      return status;
    });
    if (!status.ok()) return;
    Timed(stats_, "CancelJob", [&] {
      grpc::ClientContext context;
      SetDeadline(&context);
      pp::v1::CancelJobRequest request;
      request.set_job_id(submitted.job_id());
      pp::v1::Job job;
      return stub_->CancelJob(&context, request, &job);
    });
  }

  std::unique_ptr<pp::v1::Coordinator::Stub> stub_;
  pp::v1::JobSpec small_, big_;
  std::string job_id_;
  std::mt19937_64 rng_;
  RpcStats& stats_;
};

// A worker that only registers and heartbeats, timing each heartbeat. Its address has no
// server: it must never be given a task, so the jobs of the run fit on the real workers and it
// sorts after them.
class Heartbeater {
 public:
  explicit Heartbeater(const std::string& address)
      : stub_(pp::v1::WorkerRegistry::NewStub(
            grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))) {}

  void Start() {
    thread_ = std::thread([this] { Loop(); });
  }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  const RpcStats& stats() const { return stats_; }

 private:
  grpc::Status Register() {
    grpc::ClientContext context;
    SetDeadline(&context);
    pp::v1::RegisterWorkerRequest request;
    pp::v1::WorkerInfo* worker = request.mutable_worker();
    worker->set_name("zz-heartbeat");
    worker->set_address("127.0.0.1:1");
    worker->set_device("cpu");
    worker->set_memory_bytes(int64_t{1} << 30);
    pp::v1::RegisterWorkerResponse response;
    return stub_->RegisterWorker(&context, request, &response);
  }

  void Loop() {
    bool registered = Register().ok();
    while (!stop_) {
      absl::SleepFor(kHeartbeatEvery);
      if (!registered) {
        registered = Register().ok();
        continue;
      }
      pp::v1::HeartbeatResponse response;
      Timed(stats_, "Heartbeat", [&] {
        grpc::ClientContext context;
        SetDeadline(&context);
        pp::v1::HeartbeatRequest request;
        request.set_name("zz-heartbeat");
        return stub_->Heartbeat(&context, request, &response);
      });
      registered = response.known();
    }
  }

  std::unique_ptr<pp::v1::WorkerRegistry::Stub> stub_;
  RpcStats stats_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// ppcoord + 2 workers training a long job (a checkpoint every 5 steps, so commits run under
// the load); the job's id.
absl::StatusOr<std::string> StartTraining(Cluster& cluster, const pp::v1::JobSpec& spec) {
  if (absl::Status s = cluster.AddWorkers(2); !s.ok()) return s;
  absl::StatusOr<std::string> id = testing_support::SubmitJob(cluster.stub(), spec);
  if (!id.ok()) return id.status();
  absl::StatusOr<pp::v1::Job> running = testing_support::WaitForJob(
      cluster.stub(), *id, [](const pp::v1::Job& j) { return j.step() >= 1; },
      absl::Seconds(60));
  if (!running.ok()) return running.status();
  return id;
}

void RunClients(const LoadOptions& options, const std::string& address,
                const pp::v1::JobSpec& train, const std::string& job_id, RpcStats& stats) {
  pp::v1::JobSpec big = train;
  big.mutable_parallel()->set_pipeline(8);
  big.mutable_model()->set_n_layers(8);
  pp::v1::JobSpec small = train;
  small.mutable_train()->set_steps(10);
  std::vector<std::thread> threads;
  for (int c = 0; c < options.clients; ++c) {
    threads.emplace_back([&, c] {
      Client(address, small, big, job_id, options.seed * 1000 + c, stats).Run(options.rpcs);
    });
  }
  for (std::thread& t : threads) t.join();
}

}  // namespace

Report RunLoad(const LoadOptions& options) {
  Report report;
  report.title = absl::StrCat("load run: seed ", options.seed, ", ", options.clients,
                              " clients x ", options.rpcs, " RPCs");
  report.expected_codes = {grpc::RESOURCE_EXHAUSTED};
  const absl::Time start = absl::Now();
  testing_support::ClusterOptions cluster_options;
  cluster_options.bin_dir = options.bin_dir;
  cluster_options.dir = options.dir + "/cluster";
  absl::StatusOr<std::unique_ptr<Cluster>> cluster = Cluster::Start(cluster_options);
  const std::string corpus = options.dir + "/corpus.txt";
  WriteCorpus(corpus, 50000);
  const pp::v1::JobSpec train = TrainSpec(corpus, 5, /*steps=*/1000000, /*checkpoint_every=*/5);
  absl::StatusOr<std::string> job_id =
      cluster.ok() ? StartTraining(**cluster, train) : cluster.status();
  if (!job_id.ok()) {
    report.jobs.push_back({"(start)", "not started", 0, false, job_id.status().ToString()});
    return report;
  }
  Heartbeater heartbeat((*cluster)->coordinator().grpc);
  heartbeat.Start();
  std::atomic<bool> done{false};
  std::thread rss([&] {
    while (!done) {
      report.coordinator_peak_rss_kib = std::max(
          report.coordinator_peak_rss_kib, PeakRssKiB((*cluster)->coordinator_process().pid()));
      absl::SleepFor(absl::Milliseconds(100));
    }
  });
  RpcStats stats;
  RunClients(options, (*cluster)->coordinator().grpc, train, *job_id, stats);
  done = true;
  rss.join();
  heartbeat.Stop();
  // The load must not have stopped the training under it.
  absl::StatusOr<pp::v1::Job> trained = testing_support::GetJob((*cluster)->stub(), *job_id);
  report.notes["training job under load"] =
      trained.ok() ? absl::StrCat(pp::v1::JobState_Name(trained->state()), " at step ",
                                  trained->step(), " ", trained->reason())
                   : trained.status().ToString();
  report.training_ok = trained.ok() && trained->state() == pp::v1::RUNNING;
  report.rpc_errors = stats.errors();
  for (const auto& [code, count] : heartbeat.stats().errors()) report.rpc_errors[code] += count;
  report.rpc_seconds = stats.latencies();
  report.rpc_seconds_by_method = stats.by_method();
  report.heartbeat_seconds = heartbeat.stats().latencies();
  report.wall_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return report;
}

}  // namespace pp::chaos
