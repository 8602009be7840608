#include "worker/daemon/metrics.h"

namespace pp::daemon {
namespace {

const prometheus::Histogram::BucketBoundaries kStepBuckets = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};

}  // namespace

WorkerMetrics::WorkerMetrics(prometheus::Registry& registry)
    : step_seconds_(prometheus::BuildHistogram()
                        .Name("pp_step_seconds")
                        .Help("Wall time of one training step on this rank")
                        .Register(registry)),
      busy_seconds_(prometheus::BuildCounter()
                        .Name("pp_busy_seconds_total")
                        .Help("Seconds spent per phase of the rank program")
                        .Register(registry)),
      wait_seconds_(prometheus::BuildCounter()
                        .Name("pp_wait_seconds_total")
                        .Help("Seconds blocked on a peer (receives, send completion, norm gather)")
                        .Register(registry)),
      bubble_ratio_(prometheus::BuildGauge()
                        .Name("pp_bubble_ratio")
                        .Help("Measured idle fraction of the last step, first to last action")
                        .Register(registry)),
      activation_bytes_(prometheus::BuildGauge()
                            .Name("pp_activation_bytes")
                            .Help("Peak live activation bytes of the last step")
                            .Register(registry)),
      loss_(prometheus::BuildGauge()
                .Name("pp_loss")
                .Help("Loss of the last step (last stage only)")
                .Register(registry)),
      tokens_(prometheus::BuildCounter()
                  .Name("pp_tokens_total")
                  .Help("Tokens of the global batch processed by this rank's pipeline")
                  .Register(registry)),
      skipped_steps_(prometheus::BuildCounter()
                         .Name("pp_skipped_steps_total")
                         .Help("Steps not applied: non-finite loss or gradient norm")
                         .Register(registry)),
      checkpoint_seconds_(prometheus::BuildHistogram()
                              .Name("pp_checkpoint_seconds")
                              .Help("Time to write this rank's checkpoint shard")
                              .Register(registry)),
      rpc_errors_(prometheus::BuildCounter()
                      .Name("pp_rpc_errors_total")
                      .Help("Failed RPCs to the coordinator, by method")
                      .Register(registry)) {}

void WorkerMetrics::DropTaskSeries() {
  if (!active_) return;
  step_seconds_.Remove(task_.step_seconds);
  for (prometheus::Counter* c : task_.busy) busy_seconds_.Remove(c);
  wait_seconds_.Remove(task_.wait);
  bubble_ratio_.Remove(task_.bubble);
  activation_bytes_.Remove(task_.activation);
  if (task_.loss != nullptr) loss_.Remove(task_.loss);
  tokens_.Remove(task_.tokens);
  skipped_steps_.Remove(task_.skipped);
  checkpoint_seconds_.Remove(task_.checkpoint);
  task_ = TaskSeries();
  active_ = false;
}

void WorkerMetrics::StartTask(const std::string& job, int rank) {
  absl::MutexLock lock(&mu_);
  DropTaskSeries();
  const prometheus::Labels labels = {{"job", job}, {"rank", std::to_string(rank)}};
  task_.step_seconds = &step_seconds_.Add(labels, kStepBuckets);
  for (int p = 0; p < executor::kNumPhases; ++p) {
    prometheus::Labels with_phase = labels;
    with_phase["phase"] = executor::PhaseName(static_cast<executor::Phase>(p));
    task_.busy[p] = &busy_seconds_.Add(with_phase);
  }
  task_.wait = &wait_seconds_.Add(labels);
  task_.bubble = &bubble_ratio_.Add(labels);
  task_.activation = &activation_bytes_.Add(labels);
  task_.tokens = &tokens_.Add(labels);
  task_.skipped = &skipped_steps_.Add(labels);
  task_.checkpoint = &checkpoint_seconds_.Add({{"job", job}}, kStepBuckets);
  job_ = job;
  active_ = true;
}

void WorkerMetrics::RecordStep(const executor::StepResult& result, int64_t tokens) {
  absl::MutexLock lock(&mu_);
  if (!active_) return;
  task_.step_seconds->Observe(result.step_seconds);
  for (int p = 0; p < executor::kNumPhases; ++p) task_.busy[p]->Increment(result.busy_seconds[p]);
  task_.wait->Increment(result.wait_seconds);
  task_.bubble->Set(result.bubble_ratio);
  task_.activation->Set(static_cast<double>(result.peak_activation_bytes));
  task_.tokens->Increment(static_cast<double>(tokens));
  if (result.non_finite) task_.skipped->Increment();
  if (result.has_loss) {
    if (task_.loss == nullptr) task_.loss = &loss_.Add({{"job", job_}});
    task_.loss->Set(result.loss);
  }
}

void WorkerMetrics::RecordCheckpoint(double seconds) {
  absl::MutexLock lock(&mu_);
  if (active_) task_.checkpoint->Observe(seconds);
}

void WorkerMetrics::RpcError(const std::string& method) {
  rpc_errors_.Add({{"method", method}}).Increment();
}

}  // namespace pp::daemon
