#include "worker/executor/executor.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/bubble.h"
#include "program/message.h"
#include "program/proto.h"
#include "program/rules.h"
#include "worker/executor/boundary_transfers.h"

namespace pp::executor {
namespace {

using prog::Kind;

Phase PhaseOf(Kind kind) {
  // In prog::Kind's order (program/ir.h): F, B, I, W, SEND_ACTIVATION, RECV_ACTIVATION, SEND_GRAD,
  // RECV_GRAD. ResolveAction admits only these kinds.
  static constexpr Phase kPhases[] = {
      Phase::kForward, Phase::kBackward, Phase::kBackwardInput, Phase::kBackwardWeight,
      Phase::kSend,    Phase::kRecv,     Phase::kSend,          Phase::kRecv};
  return kPhases[static_cast<int>(kind)];
}

// "rank 1 action 4 SEND_GRAD stage 2 mb 0 peer 0": how the executor's errors name an action.
std::string Describe(int rank, size_t index, const prog::Action& action) {
  std::string text =
      absl::StrCat("rank ", rank, " action ", index, " ", prog::KindName(action.kind), " stage ",
                   action.stage, " mb ", action.microbatch);
  if (action.peer >= 0) absl::StrAppend(&text, " peer ", action.peer);
  return text;
}

std::string Describe(int rank, size_t index, const pp::v1::Action& proto) {
  std::optional<prog::Action> action = prog::ActionFromProto(proto);
  if (action) return Describe(rank, index, *action);
  return absl::StrCat("rank ", rank, " action ", index, " ", pp::v1::ActionKind_Name(proto.kind()));
}

absl::Status Annotate(const absl::Status& status, int rank, size_t index,
                      const prog::Action& action) {
  return absl::Status(status.code(),
                      absl::StrCat(Describe(rank, index, action), ": ", status.message()));
}

}  // namespace

std::vector<int> CommPeers(const std::vector<const pp::v1::RankProgram*>& programs) {
  std::set<int> peers;
  for (const pp::v1::RankProgram* program : programs) {
    for (const pp::v1::Action& proto : program->actions()) {
      std::optional<prog::Action> action = prog::ActionFromProto(proto);
      if (action && prog::IsComm(action->kind) && action->peer >= 0) peers.insert(action->peer);
    }
  }
  return std::vector<int>(peers.begin(), peers.end());
}

// A compute's shapes are bounded (its models were built for them): BoundaryFloats holds.
size_t Executor::InputFloats(int stage, int mb) const {
  return BoundaryFloats(compute_->InputShape(stage, mb)).value_or(0);
}
size_t Executor::OutputFloats(int stage, int mb) const {
  return BoundaryFloats(compute_->OutputShape(stage, mb)).value_or(0);
}

const char* PhaseName(Phase phase) {
  static const char* const kNames[kNumPhases] = {
      "forward", "backward", "backward_input", "backward_weight", "optimizer", "send", "recv"};
  return kNames[static_cast<int>(phase)];
}

// One program action, resolved: comm actions know their edge (lo -> lo+1), their channel (one
// per kind: the transport matches each channel's messages in posting order) and message tag
// (program/message.h).
struct Executor::Op {
  prog::Action action;
  int lo = -1;
  int channel = 0;
  uint64_t tag = 0;
};

// Boundary tensors of one step, keyed by (stage, microbatch), and the messages in flight.
struct Executor::Buffers {
  using Key = BufferKey;
  Buffers(comm::Transport* transport, StageCompute* compute) : transfers(transport, compute) {}
  std::map<Key, float*> act_in;     // input activation of a stage
  std::map<Key, float*> act_out;    // output activation of a stage, waiting for its send
  std::map<Key, float*> grad_out;   // gradient of a stage's output
  std::map<Key, float*> grad_in;    // gradient of a stage's input, waiting for its send
  BoundaryTransfers transfers;      // receives posted by op index, sends until drained
  size_t next_receive = 0;          // op index from which receives are not posted yet
  int64_t bytes = 0;
};

absl::Status Executor::CheckOptions(const ExecutorOptions& options, int world_size) {
  const int S = static_cast<int>(options.stage_to_rank.size());
  if (S == 0) return absl::InvalidArgumentError("stage_to_rank is empty");
  if (options.microbatches < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("microbatches must be positive, got ", options.microbatches));
  }
  for (int s = 0; s < S; ++s) {
    int r = options.stage_to_rank[s];
    if (r < 0 || r >= world_size) {
      return absl::InvalidArgumentError(absl::StrCat("stage_to_rank[", s, "] = ", r,
                                                     " is outside world size ", world_size));
    }
  }
  return absl::OkStatus();
}

// The program's rules decide (program/rules.h, the same the planner's validator applies); the
// executor adds only that a forward-only program holds nothing a training step would.
absl::StatusOr<Executor::Op> Executor::ResolveAction(const ExecutorOptions& options, int index,
                                                     const pp::v1::Action& proto) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat(Describe(options.rank, index, proto), ": ", why));
  };
  const std::optional<prog::Action> action = prog::ActionFromProto(proto);
  if (!action) return bad("unknown action kind");
  if (std::optional<std::string> why =
          prog::ActionProblem(options.stage_to_rank, options.microbatches, options.rank, *action,
                              prog::StageNaming::kEitherEnd)) {
    return bad(*why);
  }
  const bool forward = action->kind == Kind::kForward || action->kind == Kind::kSendActivation ||
                       action->kind == Kind::kRecvActivation;
  if (options.forward_only && !forward) {
    return bad("a forward-only program holds only forwards and activation transfers");
  }
  Op op{*action};
  if (!prog::IsComm(action->kind)) return op;
  const prog::Message message = prog::MessageOf(options.stage_to_rank, options.rank, *action);
  op.lo = message.lo;
  op.channel = prog::ChannelOf(message);
  op.tag = prog::TagOf(message);
  return op;
}

absl::StatusOr<std::unique_ptr<Executor>> Executor::Create(const ExecutorOptions& options,
                                                           const pp::v1::RankProgram& program,
                                                           StageCompute* compute,
                                                           comm::Transport* transport) {
  if (absl::Status s = CheckOptions(options, transport->size()); !s.ok()) return s;
  std::vector<Op> ops;
  for (int i = 0; i < program.actions_size(); ++i) {
    absl::StatusOr<Op> op = ResolveAction(options, i, program.actions(i));
    if (!op.ok()) return op.status();
    ops.push_back(*std::move(op));
  }
  return std::unique_ptr<Executor>(new Executor(options, std::move(ops), compute, transport));
}

Executor::Executor(const ExecutorOptions& options, std::vector<Op> ops, StageCompute* compute,
                   comm::Transport* transport)
    : options_(options), ops_(std::move(ops)), compute_(compute), transport_(transport) {}

Executor::~Executor() = default;

void Executor::Abort() {
  aborted_ = true;
  transport_->Abort();
}

absl::Status Executor::PostReceivesUpTo(size_t index, Buffers& buffers) {
  const size_t end = std::min(index + 1, ops_.size());
  for (; buffers.next_receive < end; ++buffers.next_receive) {
    const Op& op = ops_[buffers.next_receive];
    const Kind kind = op.action.kind;
    if (kind != Kind::kRecvActivation && kind != Kind::kRecvGrad) continue;
    // An activation arrives as stage lo+1's input, a gradient as stage lo's output gradient.
    const int mb = op.action.microbatch;
    const BoundaryShape shape = kind == Kind::kRecvActivation ? compute_->InputShape(op.lo + 1, mb)
                                                              : compute_->OutputShape(op.lo, mb);
    if (absl::Status s =
            buffers.transfers.Post(buffers.next_receive, op.action.peer, op.channel, op.tag, shape);
        !s.ok()) {
      return Annotate(s, options_.rank, buffers.next_receive, op.action);
    }
  }
  return absl::OkStatus();
}

float* Executor::Take(std::map<BufferKey, float*>& from, BufferKey key) {
  auto it = from.find(key);
  if (it == from.end()) return nullptr;
  float* data = it->second;
  from.erase(it);
  return data;
}

float* Executor::Alloc(Buffers& buffers, size_t n) {
  buffers.bytes += static_cast<int64_t>(n * sizeof(float));
  return compute_->AllocBuffer(n);
}

absl::Status Executor::Put(size_t index, Buffers& buffers, std::map<BufferKey, float*>& into,
                           BufferKey key, float* data, size_t n) {
  if (into.emplace(key, data).second) return absl::OkStatus();
  Release(buffers, data, n);
  return absl::InvalidArgumentError(
      absl::StrCat(Describe(options_.rank, index, ops_[index].action),
                   ": produced the same tensor twice"));
}

void Executor::Release(Buffers& buffers, float* data, size_t n) {
  if (data == nullptr) return;
  buffers.bytes -= static_cast<int64_t>(n * sizeof(float));
  compute_->FreeBuffer(data);
}

absl::Status Executor::Missing(size_t index, const std::string& what) const {
  return absl::FailedPreconditionError(
      absl::StrCat(Describe(options_.rank, index, ops_[index].action), ": ", what,
                   " is not available"));
}

bool Executor::IsLocal(int stage) const { return options_.stage_to_rank[stage] == options_.rank; }

int Executor::NumStages() const { return static_cast<int>(options_.stage_to_rank.size()); }

absl::Status Executor::Execute(size_t index, Buffers& buffers, StepResult& result) {
  const prog::Action& action = ops_[index].action;
  // clang-format off: one line per kind
  switch (action.kind) {
    case Kind::kForward: return ExecuteForward(index, buffers, result);
    case Kind::kBackward: return ExecuteBackward(index, buffers);
    case Kind::kBackwardInput: return ExecuteBackwardInput(index, buffers);
    case Kind::kBackwardWeight: return ExecuteBackwardWeight(index);
    case Kind::kSendActivation: return ExecuteSendActivation(index, buffers);
    case Kind::kSendGrad: return ExecuteSendGrad(index, buffers);
    case Kind::kRecvActivation: return ExecuteRecvActivation(index, buffers);
    case Kind::kRecvGrad: return ExecuteRecvGrad(index, buffers);
    default:  // Create refuses these; a new kind must get its own case
      return absl::InternalError(absl::StrCat(Describe(options_.rank, index, action),
                                              ": the executor has no case for this action"));
  }
  // clang-format on
}

// Stage s of microbatch mb: consumes its input activation (s > 0), hands the output to stage
// s+1 (held here) or to its SEND, or records the loss (last stage).
absl::Status Executor::ExecuteForward(size_t index, Buffers& buffers, StepResult& result) {
  const int s = ops_[index].action.stage, mb = ops_[index].action.microbatch;
  const int S = NumStages();
  float* in = nullptr;
  if (s > 0) {
    in = Take(buffers.act_in, {s, mb});
    if (in == nullptr) return Missing(index, absl::StrCat("the input activation of stage ", s));
  }
  float* out = s + 1 < S ? Alloc(buffers, OutputFloats(s, mb)) : nullptr;
  absl::StatusOr<double> loss =
      options_.forward_only ? compute_->Evaluate(s, mb, in, out) : compute_->Forward(s, mb, in, out);
  if (s > 0) Release(buffers, in, InputFloats(s, mb));
  if (!loss.ok()) {
    Release(buffers, out, OutputFloats(s, mb));
    return loss.status();
  }
  if (s + 1 == S) {
    result.has_loss = true;
    result.loss_by_mb[mb] = *loss;
    return absl::OkStatus();
  }
  const size_t n = OutputFloats(s, mb);
  return IsLocal(s + 1) ? Put(index, buffers, buffers.act_in, {s + 1, mb}, out, n)
                        : Put(index, buffers, buffers.act_out, {s, mb}, out, n);
}

absl::Status Executor::ExecuteBackward(size_t index, Buffers& buffers) {
  return RunInputGradient(index, buffers,
                          [&](int s, int mb, const float* grad_out, float* grad_in) {
                            return compute_->Backward(s, mb, grad_out, grad_in);
                          });
}

absl::Status Executor::ExecuteBackwardInput(size_t index, Buffers& buffers) {
  return RunInputGradient(index, buffers,
                          [&](int s, int mb, const float* grad_out, float* grad_in) {
                            return compute_->BackwardInput(s, mb, grad_out, grad_in);
                          });
}

absl::Status Executor::ExecuteBackwardWeight(size_t index) {
  const prog::Action& action = ops_[index].action;
  return compute_->BackwardWeight(action.stage, action.microbatch);
}

// A backward that makes stage s's input gradient: consumes its output gradient (unless last),
// hands the input gradient to stage s-1 (held here) or to its SEND (unless first).
absl::Status Executor::RunInputGradient(
    size_t index, Buffers& buffers,
    const std::function<absl::Status(int, int, const float*, float*)>& backward) {
  const int s = ops_[index].action.stage, mb = ops_[index].action.microbatch;
  const int S = NumStages();
  float* grad_out = nullptr;
  if (s + 1 < S) {
    grad_out = Take(buffers.grad_out, {s, mb});
    if (grad_out == nullptr) {
      return Missing(index, absl::StrCat("the output gradient of stage ", s));
    }
  }
  float* grad_in = s > 0 ? Alloc(buffers, InputFloats(s, mb)) : nullptr;
  absl::Status status = backward(s, mb, grad_out, grad_in);
  if (s + 1 < S) Release(buffers, grad_out, OutputFloats(s, mb));
  if (!status.ok()) {
    Release(buffers, grad_in, InputFloats(s, mb));
    return status;
  }
  if (s == 0) return absl::OkStatus();
  const size_t n = InputFloats(s, mb);
  return IsLocal(s - 1) ? Put(index, buffers, buffers.grad_out, {s - 1, mb}, grad_in, n)
                        : Put(index, buffers, buffers.grad_in, {s, mb}, grad_in, n);
}

absl::Status Executor::ExecuteSendActivation(size_t index, Buffers& buffers) {
  const Op& op = ops_[index];
  float* data = Take(buffers.act_out, {op.lo, op.action.microbatch});
  if (data == nullptr) {
    return Missing(index, absl::StrCat("the output activation of stage ", op.lo));
  }
  return Send(index, buffers, data, compute_->OutputShape(op.lo, op.action.microbatch));
}

absl::Status Executor::ExecuteSendGrad(size_t index, Buffers& buffers) {
  const Op& op = ops_[index];
  float* data = Take(buffers.grad_in, {op.lo + 1, op.action.microbatch});
  if (data == nullptr) {
    return Missing(index, absl::StrCat("the input gradient of stage ", op.lo + 1));
  }
  return Send(index, buffers, data, compute_->InputShape(op.lo + 1, op.action.microbatch));
}

// Starts sending `data` (a tensor of `shape`) to the op's peer; it is freed once the send
// completed. Its bytes stay counted until the step ends: the transfer may still read it.
absl::Status Executor::Send(size_t index, Buffers& buffers, float* data,
                            const BoundaryShape& shape) {
  const Op& op = ops_[index];
  absl::Status status = buffers.transfers.Send(op.action.peer, op.channel, op.tag, shape, data);
  if (!status.ok()) {
    // The transfers freed `data`.
    buffers.bytes -= static_cast<int64_t>(BoundaryFloats(shape).value_or(0) * sizeof(float));
    return Annotate(status, options_.rank, index, op.action);
  }
  return absl::OkStatus();
}

// The activation of edge lo -> lo+1 arrives as stage lo+1's input.
absl::Status Executor::ExecuteRecvActivation(size_t index, Buffers& buffers) {
  const Op& op = ops_[index];
  return Receive(index, buffers, buffers.act_in, {op.lo + 1, op.action.microbatch});
}

// The gradient of edge lo -> lo+1 arrives as stage lo's output gradient.
absl::Status Executor::ExecuteRecvGrad(size_t index, Buffers& buffers) {
  const Op& op = ops_[index];
  return Receive(index, buffers, buffers.grad_out, {op.lo, op.action.microbatch});
}

// Receives the op's message and files the tensor under `into`[at].
absl::Status Executor::Receive(size_t index, Buffers& buffers, std::map<BufferKey, float*>& into,
                               BufferKey at) {
  const prog::Action& action = ops_[index].action;
  if (absl::Status s = PostReceivesUpTo(index, buffers); !s.ok()) return s;
  absl::StatusOr<BoundaryTransfers::Received> got = buffers.transfers.Receive(index);
  if (!got.ok()) return Annotate(got.status(), options_.rank, index, action);
  buffers.bytes += static_cast<int64_t>(got->n * sizeof(float));
  if (into.count(at) > 0) {
    Release(buffers, got->data, got->n);
    return absl::InvalidArgumentError(absl::StrCat(Describe(options_.rank, index, action),
                                                   ": received the same tensor twice"));
  }
  into[at] = got->data;
  return absl::OkStatus();
}

double Executor::SecondsSince(Clock::time_point from) {
  return std::chrono::duration<double>(Clock::now() - from).count();
}

absl::StatusOr<StepResult> Executor::RunStep(int step) {
  StepResult result;
  result.step = step;
  result.trace.set_rank(options_.rank);
  result.loss_by_mb.assign(options_.microbatches, 0.0);
  const Clock::time_point start = Clock::now();
  if (absl::Status s = options_.forward_only ? compute_->BeginEval(step) : compute_->BeginStep(step);
      !s.ok()) {
    return s;
  }
  Buffers buffers(transport_, compute_);
  absl::Status status = RunProgram(step, start, buffers, result);
  if (status.ok()) status = DrainSends(start, buffers, result);
  if (status.ok()) status = CheckAllConsumed(buffers);
  if (status.ok() && result.has_loss) result.loss = compute_->StepLoss(result.loss_by_mb);
  if (status.ok() && !options_.forward_only) status = UpdateWeights(step, start, result);
  if (!status.ok()) return Fail(buffers, status);
  if (!options_.forward_only && options_.slowdown != nullptr) options_.slowdown->CountStep();
  if (options_.forward_only) result.step_seconds = SecondsSince(start);
  return result;
}

absl::Status Executor::Fail(Buffers& buffers, absl::Status status) {
  // Buffers with a transfer in flight are left alone (leaked): the transport may still write
  // them after Abort. Everything else goes back to the compute.
  transport_->Abort();
  for (auto* map : {&buffers.act_in, &buffers.act_out, &buffers.grad_out, &buffers.grad_in}) {
    for (auto& [key, data] : *map) compute_->FreeBuffer(data);
  }
  return status;
}

// Every action of the program in order, each timed into the trace and its phase.
absl::Status Executor::RunProgram(int step, Clock::time_point start, Buffers& buffers,
                                  StepResult& result) {
  double first_start = -1, last_end = 0;
  for (size_t i = 0; i < ops_.size(); ++i) {
    if (aborted_) {
      return absl::AbortedError(absl::StrCat("rank ", options_.rank, ": step ", step, " aborted"));
    }
    const size_t horizon = options_.recv_lookahead < 0 ? ops_.size() : i + options_.recv_lookahead;
    if (absl::Status s = PostReceivesUpTo(horizon, buffers); !s.ok()) return s;
    const double t0 = SecondsSince(start);
    absl::Status status = Execute(i, buffers, result);
    double t1 = SecondsSince(start);
    if (!status.ok()) return status;
    if (options_.slowdown != nullptr && !prog::IsComm(ops_[i].action.kind) &&
        options_.slowdown->Stretch(t1 - t0) > 0) {
      t1 = SecondsSince(start);
    }
    RecordAction(ops_[i].action, t0, t1, result);
    if (first_start < 0) first_start = t0;
    last_end = t1;
    result.peak_activation_bytes = std::max(
        result.peak_activation_bytes, buffers.bytes + compute_->LiveActivationBytes());
  }
  result.bubble_ratio = common::IdleFraction({result.compute_seconds}, last_end - first_start);
  return absl::OkStatus();
}

void Executor::RecordAction(const prog::Action& action, double t0, double t1, StepResult& result) {
  pp::v1::TimedAction* timed = result.trace.add_actions();
  *timed->mutable_action() = prog::ActionToProto(action);
  timed->set_start(t0);
  timed->set_end(t1);
  const Phase phase = PhaseOf(action.kind);
  result.busy_seconds[static_cast<int>(phase)] += t1 - t0;
  if (phase == Phase::kRecv) result.wait_seconds += t1 - t0;
  if (!prog::IsComm(action.kind)) result.compute_seconds += t1 - t0;
}

// Waits for every send of the step and frees its buffer.
absl::Status Executor::DrainSends(Clock::time_point start, Buffers& buffers,
                                  StepResult& result) {
  const double drain_start = SecondsSince(start);
  if (absl::Status s = buffers.transfers.DrainSends(); !s.ok()) return s;
  const double drained = SecondsSince(start) - drain_start;
  result.wait_seconds += drained;
  result.busy_seconds[static_cast<int>(Phase::kSend)] += drained;
  return absl::OkStatus();
}

absl::Status Executor::CheckAllConsumed(const Buffers& buffers) const {
  const size_t leftovers = buffers.act_in.size() + buffers.act_out.size() +
                           buffers.grad_out.size() + buffers.grad_in.size() +
                           buffers.transfers.unreceived();
  if (leftovers == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "rank ", options_.rank, ": the program left ", leftovers,
      " boundary tensors unused (a forward without backward, or a send/recv missing)"));
}

}  // namespace pp::executor
