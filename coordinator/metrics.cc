#include "coordinator/metrics.h"

#include <utility>

#include "absl/status/status.h"
#include "common/host_port.h"

namespace pp::coordinator {

absl::StatusOr<std::unique_ptr<CoordinatorMetrics>> CoordinatorMetrics::Serve(
    const std::string& address) {
  absl::StatusOr<common::HostPort> at = common::ParseHostPort(address, "metrics");
  if (!at.ok()) return at.status();
  std::unique_ptr<CoordinatorMetrics> m(new CoordinatorMetrics());
  absl::StatusOr<std::unique_ptr<common::MetricsServer>> server =
      common::MetricsServer::Serve(*at, m->registry_);
  if (!server.ok()) return server.status();
  m->server_ = *std::move(server);

  prometheus::Registry& r = *m->registry_;
  m->jobs_ = &prometheus::BuildGauge().Name("pp_jobs").Help("Jobs by state.").Register(r);
  m->workers_ =
      &prometheus::BuildGauge().Name("pp_workers").Help("Registered workers by state.").Register(r);
  m->steps_ = &prometheus::BuildCounter()
                   .Name("pp_job_steps_total")
                   .Help("Training steps completed by every rank.")
                   .Register(r);
  m->loss_ =
      &prometheus::BuildGauge().Name("pp_job_loss").Help("Loss of the last step.").Register(r);
  m->learning_rate_ = &prometheus::BuildGauge()
                           .Name("pp_job_learning_rate")
                           .Help("Learning rate the last step applied.")
                           .Register(r);
  m->eval_loss_ = &prometheus::BuildGauge().Name("pp_job_eval_loss").Help(
      "Mean loss of the job's newest evaluation on its eval windows.").Register(r);
  m->epoch_ = &prometheus::BuildGauge().Name("pp_job_epoch").Help(
      "Passes over the training windows at the last step: completed + fraction.").Register(r);
  m->restarts_ = &prometheus::BuildCounter()
                      .Name("pp_job_restarts_total")
                      .Help("Automatic restarts of a job.")
                      .Register(r);
  m->resizes_ = &prometheus::BuildCounter()
                     .Name("pp_job_resizes_total")
                     .Help("Layout changes of an elastic job: shrinks and grows.")
                     .Register(r);
  m->job_workers_ = &prometheus::BuildGauge()
                         .Name("pp_job_workers")
                         .Help("Workers the job's attempt holds now (0: queued or ended).")
                         .Register(r);
  m->skipped_ = &prometheus::BuildCounter()
                     .Name("pp_job_skipped_steps_total")
                     .Help("Steps not applied: non-finite loss or gradient norm.")
                     .Register(r);
  m->bubble_ = &prometheus::BuildGauge()
                    .Name("pp_job_bubble_ratio")
                    .Help("Measured idle share of the last step over all ranks.")
                    .Register(r);
  m->planned_bubble_ = &prometheus::BuildGauge()
                            .Name("pp_job_planned_bubble_ratio")
                            .Help("Simulated idle share of the compiled schedule (uniform costs).")
                            .Register(r);
  m->prediction_error_ =
      &prometheus::BuildGauge()
           .Name("pp_job_step_prediction_error_ratio")
           .Help("schedule auto: |measured - predicted| / predicted seconds of the last step.")
           .Register(r);
  m->checkpoint_step_ = &prometheus::BuildGauge()
                             .Name("pp_checkpoint_last_step")
                             .Help("Step of the newest committed checkpoint.")
                             .Register(r);
  m->checkpoint_time_ = &prometheus::BuildGauge()
                             .Name("pp_checkpoint_last_commit_timestamp_seconds")
                             .Help("Unix time of the newest checkpoint commit.")
                             .Register(r);
  m->checkpoint_failures_ = &prometheus::BuildCounter()
                                 .Name("pp_checkpoint_failures_total")
                                 .Help("Checkpoints that could not be committed.")
                                 .Register(r);
  m->rpc_errors_ = &prometheus::BuildCounter()
                        .Name("pp_rpc_errors_total")
                        .Help("RPCs answered or ended with an error, by method.")
                        .Register(r);
  m->queue_jobs_ = &prometheus::BuildGauge()
                        .Name("pp_queue_jobs")
                        .Help("QUEUED jobs by priority class.")
                        .Register(r);
  m->owner_workers_ = &prometheus::BuildGauge()
                           .Name("pp_owner_workers_in_use")
                           .Help("Workers the owner's RUNNING jobs hold.")
                           .Register(r);
  m->preemptions_ = &prometheus::BuildCounter()
                         .Name("pp_preemptions_total")
                         .Help("Jobs asked to stop at a checkpoint for a higher-priority job.")
                         .Register(r)
                         .Add({});
  return m;
}

namespace {

// Sets one gauge per key of `values` in `family` and removes the series of keys gone since the
// last call (`series`), so a class or owner that left does not linger in the scrape.
void ReplaceSeries(prometheus::Family<prometheus::Gauge>* family, const std::string& label,
                   const std::map<std::string, int>& values,
                   std::map<std::string, prometheus::Gauge*>& series) {
  for (auto it = series.begin(); it != series.end();) {
    if (values.count(it->first) == 0) {
      family->Remove(it->second);
      it = series.erase(it);
    } else {
      ++it;
    }
  }
  for (const auto& [key, n] : values) {
    prometheus::Gauge*& gauge = series[key];
    if (gauge == nullptr) gauge = &family->Add({{label, key}});
    gauge->Set(n);
  }
}

}  // namespace

void CoordinatorMetrics::SetQueueByPriority(const std::map<std::string, int>& by_class) {
  ReplaceSeries(queue_jobs_, "priority", by_class, queue_series_);
}

void CoordinatorMetrics::SetOwnerWorkers(const std::map<std::string, int>& by_owner) {
  ReplaceSeries(owner_workers_, "owner", by_owner, owner_series_);
}

void CoordinatorMetrics::JobPreempted() { preemptions_->Increment(); }

void CoordinatorMetrics::SetJobCounts(const std::map<std::string, int>& by_state) {
  for (const auto& [state, n] : by_state) jobs_->Add({{"state", state}}).Set(n);
}

void CoordinatorMetrics::SetWorkerCounts(const std::map<std::string, int>& by_state) {
  for (const auto& [state, n] : by_state) workers_->Add({{"state", state}}).Set(n);
}

void CoordinatorMetrics::JobCreated(const std::string& job_id, double planned_bubble_ratio) {
  steps_->Add({{"job", job_id}});
  restarts_->Add({{"job", job_id}});
  resizes_->Add({{"job", job_id}});
  skipped_->Add({{"job", job_id}});
  checkpoint_failures_->Add({{"job", job_id}});
  planned_bubble_->Add({{"job", job_id}}).Set(planned_bubble_ratio);
}

void CoordinatorMetrics::StepCompleted(const std::string& job_id, double loss,
                                       double learning_rate, double bubble_ratio) {
  steps_->Add({{"job", job_id}}).Increment();
  loss_->Add({{"job", job_id}}).Set(loss);
  learning_rate_->Add({{"job", job_id}}).Set(learning_rate);
  bubble_->Add({{"job", job_id}}).Set(bubble_ratio);
}

void CoordinatorMetrics::StepPredicted(const std::string& job_id, double error_ratio) {
  prediction_error_->Add({{"job", job_id}}).Set(error_ratio);
}

void CoordinatorMetrics::EvalCompleted(const std::string& job_id, double eval_loss) {
  eval_loss_->Add({{"job", job_id}}).Set(eval_loss);
}

void CoordinatorMetrics::EpochReached(const std::string& job_id, double epoch) {
  epoch_->Add({{"job", job_id}}).Set(epoch);
}

void CoordinatorMetrics::CheckpointCommitted(const std::string& job_id, int step,
                                             double time_unix) {
  checkpoint_step_->Add({{"job", job_id}}).Set(step);
  checkpoint_time_->Add({{"job", job_id}}).Set(time_unix);
}

void CoordinatorMetrics::CheckpointFailed(const std::string& job_id) {
  checkpoint_failures_->Add({{"job", job_id}}).Increment();
}

void CoordinatorMetrics::StepSkipped(const std::string& job_id) {
  skipped_->Add({{"job", job_id}}).Increment();
}

void CoordinatorMetrics::JobRestarted(const std::string& job_id) {
  restarts_->Add({{"job", job_id}}).Increment();
}

void CoordinatorMetrics::JobResized(const std::string& job_id) {
  resizes_->Add({{"job", job_id}}).Increment();
}

void CoordinatorMetrics::JobWorkers(const std::string& job_id, int workers) {
  job_workers_->Add({{"job", job_id}}).Set(workers);
}

namespace {

template <typename T>
void RemoveSeries(prometheus::Family<T>* family, const prometheus::Labels& labels) {
  if (family->Has(labels)) family->Remove(&family->Add(labels));
}

}  // namespace

void CoordinatorMetrics::JobExpired(const std::string& job_id) {
  const prometheus::Labels labels = {{"job", job_id}};
  for (prometheus::Family<prometheus::Gauge>* gauges :
       {loss_, learning_rate_, eval_loss_, epoch_, bubble_, planned_bubble_, prediction_error_,
        checkpoint_step_, checkpoint_time_, job_workers_}) {
    RemoveSeries(gauges, labels);
  }
  for (prometheus::Family<prometheus::Counter>* counters :
       {steps_, restarts_, resizes_, skipped_, checkpoint_failures_}) {
    RemoveSeries(counters, labels);
  }
}

void CoordinatorMetrics::RpcError(const std::string& method) {
  rpc_errors_->Add({{"method", method}}).Increment();
}

}  // namespace pp::coordinator
