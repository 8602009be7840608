// The executor tests' fake pipeline: a fake model over real Gloo transports in threads, and
// hand-written programs lowered from per-rank compute orders.
//
// Fake model: stage s is y = a_s * x + b_s elementwise over kN floats; the last stage's
// microbatch loss is sum(y^2) / (2 kN), its gradient is seeded with y / (kN * M). SGD with the
// clip scale from the global L2 norm (tensor-name order).
#ifndef PP_TESTS_WORKER_EXECUTOR_FAKE_PIPELINE_H_
#define PP_TESTS_WORKER_EXECUTOR_FAKE_PIPELINE_H_

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/comm/transport.h"
#include "worker/executor/executor.h"

namespace pp::executor {

constexpr int kN = 33;  // a multiple of 3: fifo_schedules_test factors it into a shape
constexpr float kLr = 0.05f;
constexpr float kClip = 0.02f;  // small enough that clipping happens

class FakeCompute : public StageCompute {
 public:
  FakeCompute(std::vector<int> stages, int num_stages, int microbatches)
      : num_stages_(num_stages), microbatches_(microbatches) {
    for (int s : stages) {
      Params& p = params_[s];
      p.a.resize(kN);
      p.b.resize(kN);
      for (int i = 0; i < kN; ++i) {
        p.a[i] = 0.9f + 0.01f * ((s * 7 + i) % 11);
        p.b[i] = 0.03f * ((s + 3 * i) % 5) - 0.05f;
      }
    }
  }

  size_t InputSize(int stage) const override { return kN; }
  size_t OutputSize(int stage) const override { return kN; }
  // The boundary headers' shape: (1, 1, kN) unless a test states another one of kN floats.
  BoundaryShape InputShape(int stage, int mb) const override { return shape_; }
  BoundaryShape OutputShape(int stage, int mb) const override { return shape_; }
  void set_shape(const BoundaryShape& shape) { shape_ = shape; }
  float* AllocBuffer(size_t n) override { return new float[n](); }
  void FreeBuffer(float* buffer) override { delete[] buffer; }

  absl::Status BeginStep(int step) override {
    step_ = step;
    for (auto& [s, p] : params_) {
      p.da.assign(kN, 0.0f);
      p.db.assign(kN, 0.0f);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<double> Forward(int stage, int mb, const float* in, float* out) override {
    return RunForward(stage, mb, in, out, /*keep=*/true);
  }

  // Evaluation reads the inputs of step `batch` and keeps nothing.
  absl::Status BeginEval(int batch) override {
    step_ = batch;
    ++evaluations_;
    return absl::OkStatus();
  }
  absl::StatusOr<double> Evaluate(int stage, int mb, const float* in, float* out) override {
    return RunForward(stage, mb, in, out, /*keep=*/false);
  }
  int evaluations() const { return evaluations_; }
  // Microbatches held for a backward, over every stage.
  size_t Saved() const {
    size_t n = 0;
    for (const auto& [s, p] : params_) n += p.saved_x.size() + p.saved_y.size();
    return n;
  }

  absl::StatusOr<double> RunForward(int stage, int mb, const float* in, float* out, bool keep) {
    Params& p = params_.at(stage);
    std::vector<float> x(kN);
    for (int i = 0; i < kN; ++i) {
      x[i] = stage == 0 ? 0.1f * ((step_ * 13 + mb * 5 + i) % 9) - 0.4f : in[i];
    }
    std::vector<float> y(kN);
    for (int i = 0; i < kN; ++i) y[i] = p.a[i] * x[i] + p.b[i];
    if (keep) p.saved_x[mb] = x;
    if (stage + 1 < num_stages_) {
      std::memcpy(out, y.data(), kN * sizeof(float));
      return 0.0;
    }
    if (keep) p.saved_y[mb] = y;
    double loss = 0;
    for (float v : y) loss += static_cast<double>(v) * v;
    if (poison_.loss && step_ == poison_.step && stage == poison_.stage) return poison_.value;
    return loss / (2 * kN);
  }

  absl::Status Backward(int stage, int mb, const float* grad_out, float* grad_in) override {
    if (absl::Status s = BackwardInput(stage, mb, grad_out, grad_in); !s.ok()) return s;
    return BackwardWeight(stage, mb);
  }

  absl::Status BackwardInput(int stage, int mb, const float* grad_out, float* grad_in) override {
    Params& p = params_.at(stage);
    std::vector<float> g(kN);
    for (int i = 0; i < kN; ++i) {
      g[i] = stage + 1 < num_stages_ ? grad_out[i]
                                     : p.saved_y.at(mb)[i] / static_cast<float>(kN * microbatches_);
    }
    if (grad_in != nullptr) {
      for (int i = 0; i < kN; ++i) grad_in[i] = p.a[i] * g[i];
    }
    p.saved_g[mb] = g;
    return absl::OkStatus();
  }

  absl::Status BackwardWeight(int stage, int mb) override {
    Params& p = params_.at(stage);
    auto g = p.saved_g.find(mb);
    if (g == p.saved_g.end()) return absl::FailedPreconditionError("W before I");
    for (int i = 0; i < kN; ++i) {
      p.da[i] += g->second[i] * p.saved_x.at(mb)[i];
      p.db[i] += g->second[i];
    }
    if (!poison_.loss && step_ == poison_.step && stage == poison_.stage) {
      p.da[0] = static_cast<float>(poison_.value);
    }
    p.saved_g.erase(g);
    p.saved_x.erase(mb);
    p.saved_y.erase(mb);
    return absl::OkStatus();
  }

  std::vector<TensorSumSq> GradSumSquares() override {
    std::vector<TensorSumSq> sums;
    for (auto& [s, p] : params_) {
      sums.push_back({absl::StrCat("s", s, ".a"), SumSq(p.da)});
      sums.push_back({absl::StrCat("s", s, ".b"), SumSq(p.db)});
    }
    return sums;
  }

  absl::StatusOr<GradientClip> Clip(const std::vector<TensorSumSq>& all) override {
    std::map<std::string, double> by_name;
    for (const TensorSumSq& t : all) by_name[t.name] = t.sum_sq;
    double total = 0;
    for (auto& [name, sum] : by_name) total += sum;
    double norm = std::sqrt(total);
    return GradientClip{norm > kClip ? static_cast<float>(kClip / norm) : 1.0f, norm};
  }

  absl::Status OptimizerStep(int step, float clip_scale) override {
    for (auto& [s, p] : params_) {
      for (int i = 0; i < kN; ++i) {
        p.a[i] -= kLr * (clip_scale * p.da[i]);
        p.b[i] -= kLr * (clip_scale * p.db[i]);
      }
    }
    return absl::OkStatus();
  }

  // Makes step `step`'s values on `stage` non-finite: its microbatch losses (on the last stage,
  // gradients left finite) or, with loss false, its gradient of a.
  struct Poison {
    int step = -1;
    int stage = -1;
    bool loss = false;
    double value = std::nan("");
  };
  void set_poison(const Poison& poison) { poison_ = poison; }

  int64_t LiveActivationBytes() const override {
    int64_t bytes = 0;
    for (auto& [s, p] : params_) bytes += p.saved_x.size() * kN * sizeof(float);
    return bytes;
  }

  // a then b of every held stage, in stage order.
  std::vector<float> Weights() const {
    std::vector<float> out;
    for (auto& [s, p] : params_) {
      out.insert(out.end(), p.a.begin(), p.a.end());
      out.insert(out.end(), p.b.begin(), p.b.end());
    }
    return out;
  }

 private:
  struct Params {
    std::vector<float> a, b, da, db;
    std::map<int, std::vector<float>> saved_x, saved_y, saved_g;
  };
  static double SumSq(const std::vector<float>& v) {
    double s = 0;
    for (float x : v) s += static_cast<double>(x) * x;
    return s;
  }
  int num_stages_;
  int microbatches_;
  int step_ = 0;
  int evaluations_ = 0;
  std::map<int, Params> params_;
  Poison poison_;
  BoundaryShape shape_{1, 1, kN};
};

inline pp::v1::Action Act(pp::v1::ActionKind kind, int stage, int mb, int peer = -1) {
  pp::v1::Action a;
  a.set_kind(kind);
  a.set_stage(stage);
  a.set_microbatch(mb);
  if (peer >= 0) a.set_peer(peer);
  return a;
}

// Builds per-rank programs from each rank's compute order, lowering comms the simple way:
// a RECV right before the compute that needs it, a SEND right after the compute that made it.
// `receiver_stage`: comm actions name the receiving stage instead of the sending one.
struct Lowering {
  std::vector<int> stage_to_rank;
  bool receiver_stage = false;
};

inline std::vector<pp::v1::RankProgram> Lower(
    const std::vector<std::vector<pp::v1::Action>>& compute, const Lowering& lowering) {
  const auto& where = lowering.stage_to_rank;
  const int S = static_cast<int>(where.size());
  std::vector<pp::v1::RankProgram> programs(compute.size());
  for (size_t r = 0; r < compute.size(); ++r) {
    programs[r].set_rank(r);
    auto add = [&](const pp::v1::Action& a) { *programs[r].add_actions() = a; };
    for (const pp::v1::Action& a : compute[r]) {
      const int s = a.stage(), mb = a.microbatch();
      const bool forward = a.kind() == pp::v1::FORWARD;
      const bool makes_grad = a.kind() == pp::v1::BACKWARD || a.kind() == pp::v1::BACKWARD_INPUT;
      if (forward && s > 0 && where[s - 1] != where[s]) {
        add(Act(pp::v1::RECV_ACTIVATION, lowering.receiver_stage ? s : s - 1, mb, where[s - 1]));
      }
      if (makes_grad && s + 1 < S && where[s + 1] != where[s]) {
        add(Act(pp::v1::RECV_GRAD, lowering.receiver_stage ? s : s + 1, mb, where[s + 1]));
      }
      add(a);
      if (forward && s + 1 < S && where[s + 1] != where[s]) {
        add(Act(pp::v1::SEND_ACTIVATION, lowering.receiver_stage ? s + 1 : s, mb, where[s + 1]));
      }
      if (makes_grad && s > 0 && where[s - 1] != where[s]) {
        add(Act(pp::v1::SEND_GRAD, lowering.receiver_stage ? s - 1 : s, mb, where[s - 1]));
      }
    }
  }
  return programs;
}

// GPipe over one stage per rank.
inline std::vector<std::vector<pp::v1::Action>> GpipeOrder(int D, int M) {
  std::vector<std::vector<pp::v1::Action>> order(D);
  for (int r = 0; r < D; ++r) {
    for (int mb = 0; mb < M; ++mb) order[r].push_back(Act(pp::v1::FORWARD, r, mb));
    for (int mb = 0; mb < M; ++mb) order[r].push_back(Act(pp::v1::BACKWARD, r, mb));
  }
  return order;
}

// 1F1B over one stage per rank; split: B as I, with every W deferred to the end (zero-bubble
// style, weight gradients still in microbatch order).
inline std::vector<std::vector<pp::v1::Action>> OneFOneBOrder(int D, int M, bool split) {
  std::vector<std::vector<pp::v1::Action>> order(D);
  for (int r = 0; r < D; ++r) {
    const int warmup = std::min(D - r - 1, M);
    const pp::v1::ActionKind backward = split ? pp::v1::BACKWARD_INPUT : pp::v1::BACKWARD;
    int f = 0, b = 0;
    for (; f < warmup; ++f) order[r].push_back(Act(pp::v1::FORWARD, r, f));
    for (; f < M; ++f, ++b) {
      order[r].push_back(Act(pp::v1::FORWARD, r, f));
      order[r].push_back(Act(backward, r, b));
    }
    for (; b < M; ++b) order[r].push_back(Act(backward, r, b));
    if (split) {
      for (int mb = 0; mb < M; ++mb) order[r].push_back(Act(pp::v1::BACKWARD_WEIGHT, r, mb));
    }
  }
  return order;
}

// Stages placed by `where`; each rank runs all forwards stage by stage, then all backwards in
// reverse stage order (a looped GPipe, valid for any placement).
inline std::vector<std::vector<pp::v1::Action>> LoopedOrder(const std::vector<int>& where, int M) {
  const int S = static_cast<int>(where.size());
  int D = 0;
  for (int r : where) D = std::max(D, r + 1);
  std::vector<std::vector<pp::v1::Action>> order(D);
  for (int s = 0; s < S; ++s) {
    for (int mb = 0; mb < M; ++mb) order[where[s]].push_back(Act(pp::v1::FORWARD, s, mb));
  }
  for (int s = S - 1; s >= 0; --s) {
    for (int mb = 0; mb < M; ++mb) order[where[s]].push_back(Act(pp::v1::BACKWARD, s, mb));
  }
  return order;
}

struct RankOutcome {
  std::vector<StepResult> steps;
  std::vector<float> weights;
  absl::Status status;
};

// How RunPipeline connects each rank: Gloo (tag matching) or fifo (NCCL's rules).
using Connector = absl::StatusOr<std::unique_ptr<comm::Transport>> (*)(
    comm::KvStore&, const comm::TransportOptions&);

// Runs `steps` steps of `programs` (one per rank, ranks as threads), each rank's transport
// connected by `connect` with its programs' peers connected eagerly, as the worker does.
inline std::vector<RankOutcome> RunPipeline(const std::vector<pp::v1::RankProgram>& programs,
                                            const std::vector<int>& where, int M, int steps,
                                            int recv_lookahead = -1,
                                            const FakeCompute::Poison& poison = {},
                                            Connector connect = comm::ConnectGloo,
                                            const std::map<int, BoundaryShape>& shapes = {}) {
  const int D = static_cast<int>(programs.size());
  const int S = static_cast<int>(where.size());
  std::unique_ptr<comm::KvStore> store = comm::NewMemoryKvStore();
  std::vector<RankOutcome> outcomes(D);
  std::vector<std::thread> threads;
  for (int r = 0; r < D; ++r) {
    threads.emplace_back([&, r] {
      RankOutcome& out = outcomes[r];
      comm::TransportOptions topts;
      topts.rank = r;
      topts.size = D;
      topts.timeout = absl::Seconds(10);
      topts.peers = CommPeers({&programs[r]});
      topts.eager = !topts.peers.empty();
      absl::StatusOr<std::unique_ptr<comm::Transport>> transport = connect(*store, topts);
      if (!transport.ok()) {
        out.status = transport.status();
        return;
      }
      std::vector<int> mine;
      for (int s = 0; s < S; ++s) {
        if (where[s] == r) mine.push_back(s);
      }
      FakeCompute compute(mine, S, M);
      compute.set_poison(poison);
      if (auto it = shapes.find(r); it != shapes.end()) compute.set_shape(it->second);
      ExecutorOptions options{r, M, where, recv_lookahead};
      absl::StatusOr<std::unique_ptr<Executor>> executor =
          Executor::Create(options, programs[r], &compute, transport->get());
      if (!executor.ok()) {
        out.status = executor.status();
        return;
      }
      for (int step = 0; step < steps; ++step) {
        absl::StatusOr<StepResult> result = (*executor)->RunStep(step);
        if (!result.ok()) {
          out.status = result.status();
          return;
        }
        out.steps.push_back(*result);
      }
      out.weights = compute.Weights();
    });
  }
  for (auto& t : threads) t.join();
  return outcomes;
}

inline std::vector<int> OnePerRank(int D) {
  std::vector<int> where(D);
  for (int r = 0; r < D; ++r) where[r] = r;
  return where;
}

struct Run {
  std::vector<double> losses;      // per step
  std::vector<double> grad_norms;  // per step
  std::vector<float> weights;  // every stage, stage order
};

// The reference, all stages in one compute: forwards of every microbatch, then backwards in
// microbatch order.
inline Run Sequential(int S, int M, int steps) {
  std::vector<int> all(S);
  for (int s = 0; s < S; ++s) all[s] = s;
  FakeCompute compute(all, S, M);
  Run run;
  for (int step = 0; step < steps; ++step) {
    EXPECT_TRUE(compute.BeginStep(step).ok());
    double sum = 0;
    for (int mb = 0; mb < M; ++mb) {
      std::vector<float> x(kN), y(kN);
      for (int s = 0; s < S; ++s) {
        absl::StatusOr<double> loss = compute.Forward(s, mb, x.data(), y.data());
        if (s + 1 == S) sum += *loss;
        x = y;
      }
    }
    for (int mb = 0; mb < M; ++mb) {
      std::vector<float> g(kN), g_in(kN);
      for (int s = S - 1; s >= 0; --s) {
        EXPECT_TRUE(compute.Backward(s, mb, g.data(), g_in.data()).ok());
        g = g_in;
      }
    }
    const GradientClip clip = *compute.Clip(compute.GradSumSquares());
    EXPECT_TRUE(compute.OptimizerStep(step, clip.scale).ok());
    run.losses.push_back(sum / M);
    run.grad_norms.push_back(clip.norm);
  }
  run.weights = compute.Weights();
  return run;
}

// The outcomes of a pipeline run equal Sequential's losses, weights and gradient norms, bitwise;
// only the rank holding the last stage has losses, every rank has the norm.
inline void ExpectBitwiseEqual(const std::vector<RankOutcome>& outcomes,
                               const std::vector<int>& where, int M, int steps) {
  bool failed = false;  // every rank's error is shown: the first is often only the echo of another
  for (size_t r = 0; r < outcomes.size(); ++r) {
    EXPECT_TRUE(outcomes[r].status.ok()) << "rank " << r << ": " << outcomes[r].status;
    failed = failed || !outcomes[r].status.ok();
  }
  if (failed) return;
  const int S = static_cast<int>(where.size());
  Run reference = Sequential(S, M, steps);
  std::vector<float> weights;  // gathered in stage order
  for (int s = 0; s < S; ++s) {
    const RankOutcome& out = outcomes[where[s]];
    int index = 0;  // position of s among its rank's stages
    for (int t = 0; t < s; ++t) index += where[t] == where[s];
    weights.insert(weights.end(), out.weights.begin() + index * 2 * kN,
                   out.weights.begin() + (index + 1) * 2 * kN);
  }
  ASSERT_EQ(weights.size(), reference.weights.size());
  EXPECT_EQ(std::memcmp(weights.data(), reference.weights.data(), weights.size() * sizeof(float)),
            0);
  const RankOutcome& last = outcomes[where[S - 1]];
  ASSERT_EQ(last.steps.size(), static_cast<size_t>(steps));
  for (int step = 0; step < steps; ++step) {
    ASSERT_TRUE(last.steps[step].has_loss);
    EXPECT_EQ(std::memcmp(&last.steps[step].loss, &reference.losses[step], sizeof(double)), 0)
        << "step " << step << ": " << last.steps[step].loss << " vs " << reference.losses[step];
  }
  for (size_t r = 0; r < outcomes.size(); ++r) {
    for (size_t step = 0; step < outcomes[r].steps.size(); ++step) {
      const double norm = outcomes[r].steps[step].grad_norm;
      EXPECT_EQ(std::memcmp(&norm, &reference.grad_norms[step], sizeof(double)), 0)
          << "rank " << r << " step " << step << ": norm " << norm << " vs "
          << reference.grad_norms[step];
    }
    if (static_cast<int>(r) == where[S - 1]) continue;
    for (const StepResult& step : outcomes[r].steps) EXPECT_FALSE(step.has_loss);
  }
}

}  // namespace pp::executor

#endif  // PP_TESTS_WORKER_EXECUTOR_FAKE_PIPELINE_H_
