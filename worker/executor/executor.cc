#include "worker/executor/executor.h"

#include <chrono>
#include <cstring>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pp::executor {
namespace {

using pp::v1::ActionKind;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kGradientTagBit = uint64_t{1} << 60;

bool IsComm(ActionKind kind) {
  return kind == pp::v1::SEND_ACTIVATION || kind == pp::v1::RECV_ACTIVATION ||
         kind == pp::v1::SEND_GRAD || kind == pp::v1::RECV_GRAD;
}

Phase PhaseOf(ActionKind kind) {
  switch (kind) {
    case pp::v1::FORWARD: return Phase::kForward;
    case pp::v1::BACKWARD: return Phase::kBackward;
    case pp::v1::BACKWARD_INPUT: return Phase::kBackwardInput;
    case pp::v1::BACKWARD_WEIGHT: return Phase::kBackwardWeight;
    case pp::v1::SEND_ACTIVATION:
    case pp::v1::SEND_GRAD: return Phase::kSend;
    default: return Phase::kRecv;
  }
}

std::string Describe(int rank, size_t index, const pp::v1::Action& action) {
  std::string text = absl::StrCat("rank ", rank, " action ", index, " ",
                                  pp::v1::ActionKind_Name(action.kind()), " stage ",
                                  action.stage(), " mb ", action.microbatch());
  if (action.has_peer()) absl::StrAppend(&text, " peer ", action.peer());
  return text;
}

absl::Status Annotate(const absl::Status& status, int rank, size_t index,
                      const pp::v1::Action& action) {
  return absl::Status(status.code(),
                      absl::StrCat(Describe(rank, index, action), ": ", status.message()));
}

// Per-tensor sums as bytes for the all-gather: (name length u32, name, sum f64) repeated.
std::string EncodeSums(const std::vector<TensorSumSq>& sums) {
  std::string out;
  for (const TensorSumSq& t : sums) {
    uint32_t length = static_cast<uint32_t>(t.name.size());
    out.append(reinterpret_cast<const char*>(&length), sizeof(length));
    out.append(t.name);
    out.append(reinterpret_cast<const char*>(&t.sum_sq), sizeof(t.sum_sq));
  }
  return out;
}

absl::Status DecodeSums(const std::string& bytes, int from_rank, std::vector<TensorSumSq>& out) {
  size_t at = 0;
  while (at < bytes.size()) {
    uint32_t length = 0;
    if (bytes.size() - at < sizeof(length)) break;
    std::memcpy(&length, bytes.data() + at, sizeof(length));
    at += sizeof(length);
    if (bytes.size() - at < length + sizeof(double)) break;
    TensorSumSq t;
    t.name = bytes.substr(at, length);
    at += length;
    std::memcpy(&t.sum_sq, bytes.data() + at, sizeof(double));
    at += sizeof(double);
    out.push_back(std::move(t));
  }
  if (at != bytes.size()) {
    return absl::DataLossError(absl::StrCat("malformed gradient norms from rank ", from_rank));
  }
  return absl::OkStatus();
}

}  // namespace

const char* PhaseName(Phase phase) {
  static const char* const kNames[kNumPhases] = {
      "forward", "backward", "backward_input", "backward_weight", "optimizer", "send", "recv"};
  return kNames[static_cast<int>(phase)];
}

// One program action, resolved: comm actions know their edge (lo -> lo+1) and message tag.
struct Executor::Op {
  pp::v1::Action action;
  int lo = -1;
  uint64_t tag = 0;
};

// Boundary tensors of one step, keyed by (stage, microbatch).
struct Executor::Buffers {
  using Key = std::pair<int, int>;
  struct Posted {
    comm::Handle handle;
    float* data;
  };
  std::map<Key, float*> act_in;     // input activation of a stage
  std::map<Key, float*> act_out;    // output activation of a stage, waiting for its send
  std::map<Key, float*> grad_out;   // gradient of a stage's output
  std::map<Key, float*> grad_in;    // gradient of a stage's input, waiting for its send
  std::map<size_t, Posted> receives;  // by op index
  std::vector<Posted> sends;
  size_t next_receive = 0;          // op index from which receives are not posted yet
  int64_t bytes = 0;
};

absl::StatusOr<std::unique_ptr<Executor>> Executor::Create(const ExecutorOptions& options,
                                                           const pp::v1::RankProgram& program,
                                                           StageCompute* compute,
                                                           comm::Transport* transport) {
  const int S = static_cast<int>(options.stage_to_rank.size());
  if (S == 0) return absl::InvalidArgumentError("stage_to_rank is empty");
  if (options.microbatches < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("microbatches must be positive, got ", options.microbatches));
  }
  for (int s = 0; s < S; ++s) {
    int r = options.stage_to_rank[s];
    if (r < 0 || r >= transport->size()) {
      return absl::InvalidArgumentError(absl::StrCat("stage_to_rank[", s, "] = ", r,
                                                     " is outside world size ",
                                                     transport->size()));
    }
  }
  auto local = [&](int s) { return s >= 0 && s < S && options.stage_to_rank[s] == options.rank; };
  std::vector<Op> ops;
  for (int i = 0; i < program.actions_size(); ++i) {
    const pp::v1::Action& action = program.actions(i);
    auto bad = [&](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat(Describe(options.rank, i, action), ": ", why));
    };
    if (action.microbatch() < 0 || action.microbatch() >= options.microbatches) {
      return bad(absl::StrCat("microbatch outside [0, ", options.microbatches, ")"));
    }
    if (action.stage() < 0 || action.stage() >= S) {
      return bad(absl::StrCat("stage outside [0, ", S, ")"));
    }
    Op op{action};
    if (!IsComm(action.kind())) {
      if (action.kind() < pp::v1::FORWARD || action.kind() > pp::v1::BACKWARD_WEIGHT) {
        return bad("unknown action kind");
      }
      if (!local(action.stage())) return bad("stage is not held by this rank");
      ops.push_back(op);
      continue;
    }
    // The end of the edge this rank is on: the activation's sender and the gradient's receiver
    // hold the lower stage.
    const bool mine_is_lo =
        action.kind() == pp::v1::SEND_ACTIVATION || action.kind() == pp::v1::RECV_GRAD;
    const int x = action.stage();
    if (local(x)) {
      op.lo = mine_is_lo ? x : x - 1;
    } else {
      op.lo = mine_is_lo ? x - 1 : x;
    }
    const int mine = mine_is_lo ? op.lo : op.lo + 1;
    const int other = mine_is_lo ? op.lo + 1 : op.lo;
    if (!local(mine) || other < 0 || other >= S || local(other)) {
      return bad("no edge between a stage of this rank and a stage of another rank");
    }
    if (!action.has_peer() || action.peer() != options.stage_to_rank[other]) {
      return bad(absl::StrCat("peer must be rank ", options.stage_to_rank[other], " (stage ",
                              other, ")"));
    }
    const bool gradient =
        action.kind() == pp::v1::SEND_GRAD || action.kind() == pp::v1::RECV_GRAD;
    op.tag = (gradient ? kGradientTagBit : 0) | (static_cast<uint64_t>(op.lo) << 30) |
             static_cast<uint64_t>(action.microbatch());
    ops.push_back(op);
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
    const ActionKind kind = op.action.kind();
    if (kind != pp::v1::RECV_ACTIVATION && kind != pp::v1::RECV_GRAD) continue;
    // An activation arrives into stage lo+1's input, a gradient into stage lo's output gradient.
    const size_t n = kind == pp::v1::RECV_ACTIVATION ? compute_->InputSize(op.lo + 1)
                                                     : compute_->OutputSize(op.lo);
    float* data = compute_->AllocBuffer(n);
    if (data == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat(
          Describe(options_.rank, buffers.next_receive, op.action), ": cannot allocate ", n,
          " floats"));
    }
    buffers.bytes += static_cast<int64_t>(n * sizeof(float));
    absl::StatusOr<comm::Handle> handle =
        transport_->Irecv(op.action.peer(), op.tag, data, n);
    if (!handle.ok()) {
      compute_->FreeBuffer(data);
      return Annotate(handle.status(), options_.rank, buffers.next_receive, op.action);
    }
    buffers.receives[buffers.next_receive] = {*handle, data};
  }
  return absl::OkStatus();
}

absl::Status Executor::Execute(size_t index, Buffers& buffers, StepResult& result) {
  const Op& op = ops_[index];
  const pp::v1::Action& action = op.action;
  const int s = action.stage();
  const int mb = action.microbatch();
  const int S = static_cast<int>(options_.stage_to_rank.size());
  const Buffers::Key key{s, mb};
  auto local = [&](int stage) { return options_.stage_to_rank[stage] == options_.rank; };
  auto missing = [&](const std::string& what) {
    return absl::FailedPreconditionError(
        absl::StrCat(Describe(options_.rank, index, action), ": ", what, " is not available"));
  };
  // Moves a buffer out of `from`, or null when absent.
  auto take = [](std::map<Buffers::Key, float*>& from, Buffers::Key k) -> float* {
    auto it = from.find(k);
    if (it == from.end()) return nullptr;
    float* data = it->second;
    from.erase(it);
    return data;
  };
  auto alloc = [&](size_t n) {
    buffers.bytes += static_cast<int64_t>(n * sizeof(float));
    return compute_->AllocBuffer(n);
  };
  auto release = [&](float* data, size_t n) {
    if (data == nullptr) return;
    buffers.bytes -= static_cast<int64_t>(n * sizeof(float));
    compute_->FreeBuffer(data);
  };
  // Stores a produced buffer; a second one for the same tensor would leak the first.
  auto put = [&](std::map<Buffers::Key, float*>& into, Buffers::Key k, float* data, size_t n) {
    if (into.emplace(k, data).second) return absl::OkStatus();
    release(data, n);
    return absl::InvalidArgumentError(
        absl::StrCat(Describe(options_.rank, index, action), ": produced the same tensor twice"));
  };

  switch (action.kind()) {
    case pp::v1::FORWARD: {
      float* in = nullptr;
      if (s > 0) {
        in = take(buffers.act_in, key);
        if (in == nullptr) return missing(absl::StrCat("the input activation of stage ", s));
      }
      float* out = s + 1 < S ? alloc(compute_->OutputSize(s)) : nullptr;
      absl::StatusOr<double> loss = compute_->Forward(s, mb, in, out);
      if (s > 0) release(in, compute_->InputSize(s));
      if (!loss.ok()) {
        release(out, compute_->OutputSize(s));
        return loss.status();
      }
      if (s + 1 == S) {
        result.has_loss = true;
        result.loss_by_mb[mb] = *loss;
        return absl::OkStatus();
      }
      return local(s + 1) ? put(buffers.act_in, {s + 1, mb}, out, compute_->OutputSize(s))
                          : put(buffers.act_out, key, out, compute_->OutputSize(s));
    }
    case pp::v1::BACKWARD:
    case pp::v1::BACKWARD_INPUT: {
      float* grad_out = nullptr;
      if (s + 1 < S) {
        grad_out = take(buffers.grad_out, key);
        if (grad_out == nullptr) return missing(absl::StrCat("the output gradient of stage ", s));
      }
      float* grad_in = s > 0 ? alloc(compute_->InputSize(s)) : nullptr;
      absl::Status status = action.kind() == pp::v1::BACKWARD
                                ? compute_->Backward(s, mb, grad_out, grad_in)
                                : compute_->BackwardInput(s, mb, grad_out, grad_in);
      if (s + 1 < S) release(grad_out, compute_->OutputSize(s));
      if (!status.ok()) {
        release(grad_in, compute_->InputSize(s));
        return status;
      }
      if (s == 0) return absl::OkStatus();
      return local(s - 1) ? put(buffers.grad_out, {s - 1, mb}, grad_in, compute_->InputSize(s))
                          : put(buffers.grad_in, key, grad_in, compute_->InputSize(s));
    }
    case pp::v1::BACKWARD_WEIGHT:
      return compute_->BackwardWeight(s, mb);
    case pp::v1::SEND_ACTIVATION:
    case pp::v1::SEND_GRAD: {
      const bool activation = action.kind() == pp::v1::SEND_ACTIVATION;
      float* data = activation ? take(buffers.act_out, {op.lo, mb})
                               : take(buffers.grad_in, {op.lo + 1, mb});
      if (data == nullptr) {
        return missing(activation ? absl::StrCat("the output activation of stage ", op.lo)
                                  : absl::StrCat("the input gradient of stage ", op.lo + 1));
      }
      const size_t n = activation ? compute_->OutputSize(op.lo) : compute_->InputSize(op.lo + 1);
      absl::StatusOr<comm::Handle> handle = transport_->Isend(action.peer(), op.tag, data, n);
      if (!handle.ok()) {
        release(data, n);
        return Annotate(handle.status(), options_.rank, index, action);
      }
      buffers.sends.push_back({*handle, data});
      return absl::OkStatus();
    }
    default: {  // RECV_ACTIVATION, RECV_GRAD
      if (absl::Status s = PostReceivesUpTo(index, buffers); !s.ok()) return s;
      Buffers::Posted posted = buffers.receives.at(index);
      buffers.receives.erase(index);
      const bool activation = action.kind() == pp::v1::RECV_ACTIVATION;
      const size_t n = activation ? compute_->InputSize(op.lo + 1) : compute_->OutputSize(op.lo);
      if (absl::Status status = transport_->Wait(posted.handle); !status.ok()) {
        // posted.data is not freed: the transport may still write it.
        return Annotate(status, options_.rank, index, action);
      }
      auto& into = activation ? buffers.act_in : buffers.grad_out;
      const Buffers::Key at = activation ? Buffers::Key{op.lo + 1, mb} : Buffers::Key{op.lo, mb};
      if (into.count(at) > 0) {
        release(posted.data, n);
        return absl::InvalidArgumentError(absl::StrCat(Describe(options_.rank, index, action),
                                                       ": received the same tensor twice"));
      }
      into[at] = posted.data;
      return absl::OkStatus();
    }
  }
}

absl::StatusOr<StepResult> Executor::RunStep(int step) {
  StepResult result;
  result.step = step;
  result.trace.set_rank(options_.rank);
  result.loss_by_mb.assign(options_.microbatches, 0.0);
  const Clock::time_point start = Clock::now();
  auto seconds_since = [](Clock::time_point from) {
    return std::chrono::duration<double>(Clock::now() - from).count();
  };

  if (absl::Status s = compute_->BeginStep(step); !s.ok()) return s;
  Buffers buffers;
  // Whatever happens, every boundary buffer goes back to the compute.
  auto fail = [&](absl::Status status) {
    // Buffers with a transfer in flight are left alone (leaked): the transport may still write
    // them after Abort. Everything else goes back to the compute.
    transport_->Abort();
    for (auto* map : {&buffers.act_in, &buffers.act_out, &buffers.grad_out, &buffers.grad_in}) {
      for (auto& [key, data] : *map) compute_->FreeBuffer(data);
    }
    return status;
  };

  double first_start = -1, last_end = 0;
  for (size_t i = 0; i < ops_.size(); ++i) {
    if (aborted_) return fail(absl::AbortedError(absl::StrCat("rank ", options_.rank,
                                                              ": step ", step, " aborted")));
    const size_t horizon = options_.recv_lookahead < 0 ? ops_.size() : i + options_.recv_lookahead;
    if (absl::Status s = PostReceivesUpTo(horizon, buffers); !s.ok()) return fail(s);
    const double t0 = seconds_since(start);
    absl::Status status = Execute(i, buffers, result);
    const double t1 = seconds_since(start);
    if (!status.ok()) return fail(status);

    pp::v1::TimedAction* timed = result.trace.add_actions();
    *timed->mutable_action() = ops_[i].action;
    timed->set_start(t0);
    timed->set_end(t1);
    const Phase phase = PhaseOf(ops_[i].action.kind());
    result.busy_seconds[static_cast<int>(phase)] += t1 - t0;
    if (phase == Phase::kRecv) result.wait_seconds += t1 - t0;
    if (!IsComm(ops_[i].action.kind())) result.compute_seconds += t1 - t0;
    if (first_start < 0) first_start = t0;
    last_end = t1;
    result.peak_activation_bytes = std::max(
        result.peak_activation_bytes, buffers.bytes + compute_->LiveActivationBytes());
  }

  const double drain_start = seconds_since(start);
  while (!buffers.sends.empty()) {
    Buffers::Posted posted = buffers.sends.back();
    if (absl::Status s = transport_->Wait(posted.handle); !s.ok()) return fail(s);
    buffers.sends.pop_back();
    compute_->FreeBuffer(posted.data);
  }
  const double drained = seconds_since(start) - drain_start;
  result.wait_seconds += drained;
  result.busy_seconds[static_cast<int>(Phase::kSend)] += drained;

  const size_t leftovers = buffers.act_in.size() + buffers.act_out.size() +
                           buffers.grad_out.size() + buffers.grad_in.size() +
                           buffers.receives.size();
  if (leftovers > 0) {
    return fail(absl::InvalidArgumentError(absl::StrCat(
        "rank ", options_.rank, ": the program left ", leftovers,
        " boundary tensors unused (a forward without backward, or a send/recv missing)")));
  }

  absl::StatusOr<float> clip_scale = GatherClipScale(result);
  if (!clip_scale.ok()) return fail(clip_scale.status());
  const double optimizer_start = seconds_since(start);
  if (absl::Status s = compute_->OptimizerStep(step, *clip_scale); !s.ok()) return fail(s);
  result.busy_seconds[static_cast<int>(Phase::kOptimizer)] +=
      seconds_since(start) - optimizer_start;
  result.step_seconds = seconds_since(start);

  if (result.has_loss) {
    double sum = 0;
    for (double loss : result.loss_by_mb) sum += loss;
    result.loss = sum / options_.microbatches;
  }
  const double span = last_end - first_start;
  result.bubble_ratio = span > 0 ? 1.0 - result.compute_seconds / span : 0.0;
  return result;
}

absl::StatusOr<float> Executor::GatherClipScale(StepResult& result) {
  const Clock::time_point start = Clock::now();
  absl::StatusOr<std::vector<std::string>> gathered =
      transport_->AllGather(EncodeSums(compute_->GradSumSquares()));
  result.wait_seconds += std::chrono::duration<double>(Clock::now() - start).count();
  if (!gathered.ok()) return gathered.status();
  std::vector<TensorSumSq> all;
  for (int r = 0; r < static_cast<int>(gathered->size()); ++r) {
    if (absl::Status s = DecodeSums((*gathered)[r], r, all); !s.ok()) return s;
  }
  return compute_->ClipScale(all);
}

}  // namespace pp::executor
