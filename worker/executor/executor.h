// Runs one rank's pp.v1.RankProgram, step after step: compute actions through a StageCompute,
// SEND/RECV through a comm::Transport, then the canonical gradient norm and the optimizer step.
//
// Contract:
// - Every action is checked and resolved by the program's own rules (program/rules.h
//   ActionProblem, program/message.h MessageOf: the planner's validator applies the same), so
//   what the planner accepts is what runs here. Comm actions may name either end of their edge in
//   `stage` (the sending or the receiving stage); each resolves to the edge (s -> s+1) it moves,
//   and both ends tag the message (prog::BoundaryTag: activation|gradient, s, microbatch). `peer`
//   must be the other end's rank. Activations travel on prog::kActivationChannel, gradients on
//   kGradientChannel, and a transport matches each channel's messages in posting order (NCCL's
//   rule): between two ranks, the program must send and receive each kind in one order. The
//   planner's validator refuses programs that do not (coordinator/plan/validate.h); the fifo
//   transport fails the step naming both messages if one gets here.
// - Every tensor travels as a header stating its tag and shape, then its payload
//   (boundary_message.h; StageCompute::InputShape/OutputShape give the shapes): the receiver
//   posts both receives together, sized from the shape it expects (the same pure function of the
//   step's data the sender wrote its header from), and fails the step, naming both, when the
//   header is not that tensor (boundary_transfers.h). Receives are posted `recv_lookahead` actions
//   ahead of their RECV (all at step start when negative); sends complete in the background and
//   are awaited at the end of the step. Boundary buffers are freed as soon as
//   their consumer ran (or their send completed).
// - After the program: every rank's per-tensor gradient sums of squares (and the step loss of a
//   rank holding the last stage) are all-gathered, the compute turns them into one clip scale
//   (the same on every rank), then OptimizerStep, unless the gather holds a non-finite loss or
//   gradient norm: then every rank skips the update alike (StepResult::non_finite).
// - Step loss (on the rank holding the last stage): StageCompute::StepLoss of the microbatch
//   losses (by default summed in double in microbatch order, divided by M).
// - With ExecutorOptions::forward_only the program may hold only forwards and their comms (the
//   planner's forward-only schedule): RunStep(batch) calls BeginEval(batch), Evaluate for each F,
//   and neither gathers gradient norms nor steps the optimizer; the loss is that of the batch.
// - Any failure (missing input, malformed program, transport timeout, Abort) ends the step with
//   an error naming the rank and action; the executor is then unusable.
#ifndef PP_WORKER_EXECUTOR_EXECUTOR_H_
#define PP_WORKER_EXECUTOR_EXECUTOR_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pp/v1/schedule.pb.h"
#include "program/ir.h"
#include "worker/comm/transport.h"
#include "worker/executor/boundary_message.h"
#include "worker/executor/slowdown.h"
#include "worker/executor/sum_squares.h"

namespace pp::executor {

// The numeric side of the stages one rank holds. Buffers are backend memory of AllocBuffer. An
// output (out, grad_in) is complete when the call returns: the executor hands it straight to the
// transport, which may work on a stream of its own (NCCL).
// What the optimizer step applies: the global gradient norm (sqrt of every tensor's sum of
// squares, each counted once) and the scale that clips it.
struct GradientClip {
  float scale = 1.0f;
  double norm = 0;
};

class StageCompute {
 public:
  virtual ~StageCompute() = default;
  // Floats of the activation (= its gradient) entering / leaving a held stage.
  virtual size_t InputSize(int stage) const = 0;   // unused for the first stage
  virtual size_t OutputSize(int stage) const = 0;  // unused for the last stage
  virtual float* AllocBuffer(size_t n) = 0;
  virtual void FreeBuffer(float* buffer) = 0;
  // The shape of the activation (= its gradient) entering / leaving a held stage for microbatch
  // mb: what a boundary message's header states (boundary_message.h), and the receiver expects.
  // BoundaryFloats of it must be InputSize / OutputSize. Defaults: (1, 1, size).
  virtual BoundaryShape InputShape(int stage, int mb) const;
  virtual BoundaryShape OutputShape(int stage, int mb) const;
  // The step loss from the microbatch losses of this rank's step (or of every replica's, in
  // global order): default their sum in double in microbatch order over their count.
  virtual double StepLoss(const std::vector<double>& loss_by_mb) const;
  // Between host memory and AllocBuffer's (a header's words); complete when they return.
  // Defaults: memcpy, for a compute whose buffers are host memory.
  virtual void CopyToHost(float* host, const float* buffer, size_t n);
  virtual void CopyFromHost(float* buffer, const float* host, size_t n);

  // Zeroes gradients and prepares the step's data.
  virtual absl::Status BeginStep(int step) = 0;
  // in (activation) is null for stage 0; out is null for the last stage, which returns the
  // microbatch's mean loss. Must copy what backward needs: `in` is freed right after.
  virtual absl::StatusOr<double> Forward(int stage, int mb, const float* in, float* out) = 0;
  // Evaluation: prepares eval batch `batch`'s data; then Forward's computation on it, bitwise,
  // keeping nothing for a backward and touching no gradient.
  virtual absl::Status BeginEval(int batch) = 0;
  virtual absl::StatusOr<double> Evaluate(int stage, int mb, const float* in, float* out) = 0;
  // grad_out is null for the last stage; grad_in (overwritten) is null for stage 0.
  virtual absl::Status Backward(int stage, int mb, const float* grad_out, float* grad_in) = 0;
  virtual absl::Status BackwardInput(int stage, int mb, const float* grad_out,
                                     float* grad_in) = 0;
  virtual absl::Status BackwardWeight(int stage, int mb) = 0;

  virtual std::vector<TensorSumSq> GradSumSquares() = 0;
  // The global norm and clip scale from every tensor of the model (any order in `all`);
  // deterministic.
  virtual absl::StatusOr<GradientClip> Clip(const std::vector<TensorSumSq>& all) = 0;
  virtual absl::Status OptimizerStep(int step, float clip_scale) = 0;
  // Activations saved for backward by in-flight microbatches.
  virtual int64_t LiveActivationBytes() const = 0;
};

struct ExecutorOptions {
  int rank = 0;
  int microbatches = 1;             // M
  std::vector<int> stage_to_rank;   // S entries
  int recv_lookahead = -1;          // actions; negative: post every receive at step start
  bool forward_only = false;        // an evaluation program (see the contract above)
  // Test hook (slowdown.h): stretches every compute action, counts training steps. Null: none.
  Slowdown* slowdown = nullptr;
};

// The ranks `programs` send to or receive from (sorted, unique): TransportOptions::peers.
std::vector<int> CommPeers(const std::vector<const pp::v1::RankProgram*>& programs);

// Phases of pp_busy_seconds_total.
enum class Phase { kForward, kBackward, kBackwardInput, kBackwardWeight, kOptimizer, kSend, kRecv };
inline constexpr int kNumPhases = 7;
const char* PhaseName(Phase phase);  // "forward", ..., "recv"

struct StepResult {
  int step = 0;
  bool has_loss = false;
  double loss = 0;
  std::vector<double> loss_by_mb;  // last stage: each microbatch's mean loss
  double step_seconds = 0;     // step start to the end of the optimizer step
  double busy_seconds[kNumPhases] = {};
  double compute_seconds = 0;  // forward + backward + I + W
  double wait_seconds = 0;     // blocked on peers (receives, send completion, the norm gather)
  double bubble_ratio = 0;     // 1 - compute / (last action end - first action start)
  int64_t peak_activation_bytes = 0;
  pp::v1::RankTrace trace;
  // Set when the step's loss or global gradient norm was not finite: the optimizer update was
  // skipped (weights and moments as before the step), on every rank alike.
  std::optional<NonFinite> non_finite;
  double grad_norm = 0;  // global gradient norm before clipping, the same on every rank
};

class Executor {
 public:
  // Checks the program against the layout (held stages, peers, microbatch range). compute and
  // transport must outlive the executor.
  static absl::StatusOr<std::unique_ptr<Executor>> Create(const ExecutorOptions& options,
                                                          const pp::v1::RankProgram& program,
                                                          StageCompute* compute,
                                                          comm::Transport* transport);
  ~Executor();

  absl::StatusOr<StepResult> RunStep(int step);
  // Any thread: the running (and every later) step fails with Aborted.
  void Abort();

 private:
  struct Op;
  struct Buffers;
  using Clock = std::chrono::steady_clock;
  using BufferKey = std::pair<int, int>;  // (stage, microbatch)
  using InputGradient = std::function<absl::Status(int stage, int mb, const float* grad_out,
                                                   float* grad_in)>;
  Executor(const ExecutorOptions& options, std::vector<Op> ops, StageCompute* compute,
           comm::Transport* transport);

  // Create: the layout, then each action resolved to its edge and tag.
  static absl::Status CheckOptions(const ExecutorOptions& options, int world_size);
  static absl::StatusOr<Op> ResolveAction(const ExecutorOptions& options, int index,
                                          const pp::v1::Action& action);

  // RunStep, in order; Fail frees the step's buffers after any error.
  absl::Status RunProgram(int step, Clock::time_point start, Buffers& buffers,
                          StepResult& result);
  void RecordAction(const prog::Action& action, double t0, double t1, StepResult& result);
  absl::Status DrainSends(Clock::time_point start, Buffers& buffers, StepResult& result);
  absl::Status CheckAllConsumed(const Buffers& buffers) const;
  absl::Status UpdateWeights(int step, Clock::time_point start, StepResult& result);
  absl::StatusOr<std::vector<RankSums>> GatherSums(StepResult& result);
  absl::Status Fail(Buffers& buffers, absl::Status status);

  // One method per action kind; Execute dispatches (and fails on a kind it has no case for).
  absl::Status Execute(size_t index, Buffers& buffers, StepResult& result);
  absl::Status ExecuteForward(size_t index, Buffers& buffers, StepResult& result);
  absl::Status ExecuteBackward(size_t index, Buffers& buffers);
  absl::Status ExecuteBackwardInput(size_t index, Buffers& buffers);
  absl::Status ExecuteBackwardWeight(size_t index);
  absl::Status ExecuteSendActivation(size_t index, Buffers& buffers);
  absl::Status ExecuteSendGrad(size_t index, Buffers& buffers);
  absl::Status ExecuteRecvActivation(size_t index, Buffers& buffers);
  absl::Status ExecuteRecvGrad(size_t index, Buffers& buffers);
  // What the kinds share.
  absl::Status RunInputGradient(size_t index, Buffers& buffers, const InputGradient& backward);
  absl::Status Send(size_t index, Buffers& buffers, float* data, const BoundaryShape& shape);
  absl::Status Receive(size_t index, Buffers& buffers, std::map<BufferKey, float*>& into,
                       BufferKey at);
  absl::Status PostReceivesUpTo(size_t index, Buffers& buffers);

  // Boundary buffers: moved out of a map (null when absent), allocated, released.
  static float* Take(std::map<BufferKey, float*>& from, BufferKey key);
  float* Alloc(Buffers& buffers, size_t n);
  // Stores a produced buffer of n floats under `key`; a second one for the same tensor would
  // leak the first, so it is released and the action fails.
  absl::Status Put(size_t index, Buffers& buffers, std::map<BufferKey, float*>& into,
                   BufferKey key, float* data, size_t n);
  void Release(Buffers& buffers, float* data, size_t n);
  absl::Status Missing(size_t index, const std::string& what) const;
  bool IsLocal(int stage) const;
  // Floats of stage `stage`'s input / output tensor of microbatch mb (its boundary shape's).
  size_t InputFloats(int stage, int mb) const;
  size_t OutputFloats(int stage, int mb) const;
  int NumStages() const;
  static double SecondsSince(Clock::time_point from);

  ExecutorOptions options_;
  std::vector<Op> ops_;
  StageCompute* compute_;
  comm::Transport* transport_;
  std::atomic<bool> aborted_{false};
};

}  // namespace pp::executor

#endif  // PP_WORKER_EXECUTOR_EXECUTOR_H_
