#include "coordinator/plan/validate.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/plan/execute.h"
#include "program/message.h"
#include "program/rules.h"

namespace pp::plan {
namespace {

using prog::Deps;
using prog::Event;

absl::Status Bad(int rank, size_t index, const prog::Action& a, const std::string& why) {
  return absl::InvalidArgumentError(
      absl::StrCat("rank ", rank, ", action ", index, " (", prog::Describe(a), "): ", why));
}

// One bit per kind (or event) for each (stage, microbatch): small enough to stay in cache for
// the largest schedules, so the checks run at memory speed.
class Bits {
 public:
  explicit Bits(const prog::Schedule& schedule)
      : M_(schedule.microbatches), bits_(static_cast<size_t>(schedule.stages()) * M_, 0) {}
  bool Has(int what, int stage, int microbatch) const {
    return bits_[static_cast<size_t>(stage) * M_ + microbatch] >> what & 1;
  }
  bool Any(int mask, int stage, int microbatch) const {
    return bits_[static_cast<size_t>(stage) * M_ + microbatch] & mask;
  }
  void Set(int what, int stage, int microbatch) {
    bits_[static_cast<size_t>(stage) * M_ + microbatch] |= 1 << what;
  }

 private:
  size_t M_;
  std::vector<uint8_t> bits_;
};

int Bit(prog::Kind kind) { return static_cast<int>(kind); }

// Where the first action of `kind` for (stage, microbatch) sits: "rank R, action I". For error
// messages only.
std::string FirstPlace(const prog::Schedule& schedule, prog::Kind kind, int stage, int microbatch) {
  for (int r = 0; r < schedule.pipeline; ++r) {
    for (size_t i = 0; i < schedule.programs[r].size(); ++i) {
      const prog::Action& a = schedule.programs[r][i];
      if (a.kind == kind && a.stage == stage && a.microbatch == microbatch) {
        return absl::StrCat("rank ", r, ", action ", i);
      }
    }
  }
  return "nowhere";
}

// The kinds whose action produces `event`.
int ProducerBits(Event event) {
  switch (event) {
    case prog::kForwardDone:
      return 1 << Bit(prog::Kind::kForward);
    case prog::kGradDone:
      return 1 << Bit(prog::Kind::kBackward) | 1 << Bit(prog::Kind::kBackwardInput);
    case prog::kWeightDone:
      return 1 << Bit(prog::Kind::kBackwardWeight);
    case prog::kActSent:
      return 1 << Bit(prog::Kind::kSendActivation);
    case prog::kGradSent:
      return 1 << Bit(prog::Kind::kSendGrad);
    case prog::kActRecvd:
      return 1 << Bit(prog::Kind::kRecvActivation);
    case prog::kGradRecvd:
      return 1 << Bit(prog::Kind::kRecvGrad);
  }
  return 0;
}

// Check 2, inputs of one action: what it consumes on its own rank was produced earlier there. Every
// local input is produced on the consumer's rank, so while the census walks the ranks one after
// another, "in the census" means "earlier in this rank's program".
absl::Status CheckInputs(const prog::Schedule& schedule, const Bits& census, int r, size_t i) {
  const std::vector<prog::Action>& program = schedule.programs[r];
  const prog::Action& a = program[i];
  const Deps deps = prog::DepsOf(a, schedule);
  for (int d = 0; d < deps.count && !deps.remote; ++d) {
    if (census.Any(ProducerBits(deps.event[d]), deps.stage[d], a.microbatch)) continue;
    static const char* const kProducer[] = {"FORWARD",         "BACKWARD_INPUT or BACKWARD",
                                            "BACKWARD_WEIGHT", "SEND_ACTIVATION",
                                            "SEND_GRAD",       "RECV_ACTIVATION",
                                            "RECV_GRAD"};
    const char* producer =
        a.kind == prog::Kind::kBackwardWeight ? "BACKWARD_INPUT" : kProducer[deps.event[d]];
    const std::string needed =
        absl::StrCat(producer, " stage ", deps.stage[d], " microbatch ", a.microbatch);
    for (size_t j = i + 1; j < program.size(); ++j) {
      const prog::Action& later = program[j];
      if (prog::Produces(later.kind) == deps.event[d] && later.stage == deps.stage[d] &&
          later.microbatch == a.microbatch) {
        return Bad(r, i, a, absl::StrCat("runs before ", needed, " (action ", j, ")"));
      }
    }
    return Bad(r, i, a, absl::StrCat("needs ", needed, ", which this rank never runs"));
  }
  return absl::OkStatus();
}

// Check 2, in one walk over the programs: no action twice, B never next to I, inputs produced
// before use. Fills `census` with what exists.
absl::Status TakeCensus(const prog::Schedule& schedule, Bits& census) {
  for (int r = 0; r < schedule.pipeline; ++r) {
    const std::vector<prog::Action>& program = schedule.programs[r];
    for (size_t i = 0; i < program.size(); ++i) {
      const prog::Action& a = program[i];
      if (census.Has(Bit(a.kind), a.stage, a.microbatch)) {
        return Bad(
            r, i, a,
            absl::StrCat("duplicate of ", FirstPlace(schedule, a.kind, a.stage, a.microbatch)));
      }
      const prog::Kind other =
          a.kind == prog::Kind::kBackward ? prog::Kind::kBackwardInput : prog::Kind::kBackward;
      const bool backward = a.kind == prog::Kind::kBackward || a.kind == prog::Kind::kBackwardInput;
      if (backward && census.Has(Bit(other), a.stage, a.microbatch)) {
        return Bad(r, i, a,
                   absl::StrCat("this stage and microbatch already has a ", prog::KindName(other),
                                " at ", FirstPlace(schedule, other, a.stage, a.microbatch),
                                "; use either B or I + W"));
      }
      if (absl::Status status = CheckInputs(schedule, census, r, i); !status.ok()) return status;
      census.Set(Bit(a.kind), a.stage, a.microbatch);
    }
  }
  return absl::OkStatus();
}

// Check 3: nothing missing.
absl::Status CheckComplete(const prog::Schedule& schedule, const Bits& census) {
  for (int s = 0; s < schedule.stages(); ++s) {
    for (int m = 0; m < schedule.microbatches; ++m) {
      const bool b = census.Has(Bit(prog::Kind::kBackward), s, m);
      const bool i = census.Has(Bit(prog::Kind::kBackwardInput), s, m);
      const bool w = census.Has(Bit(prog::Kind::kBackwardWeight), s, m);
      const char* why = nullptr;
      if (!census.Has(Bit(prog::Kind::kForward), s, m)) {
        why = "has no FORWARD";
      } else if (!schedule.trains()) {
        if (b || i || w) why = "has a backward in a forward-only schedule";
      } else if (!b && !i && !w) {
        why = "has no BACKWARD (nor BACKWARD_INPUT and BACKWARD_WEIGHT)";
      } else if (b && w) {
        why = "has a BACKWARD_WEIGHT next to a full BACKWARD";
      } else if (i && !w) {
        why = "has a BACKWARD_INPUT but no BACKWARD_WEIGHT";
      } else if (w && !i) {
        why = "has a BACKWARD_WEIGHT but no BACKWARD_INPUT";
      }
      if (why != nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("stage ", s, " microbatch ", m, " (rank ",
                                                       schedule.stage_to_rank[s], ") ", why));
      }
    }
  }
  return absl::OkStatus();
}

// Check 4: a send's partner is the receive of the neighbouring stage, and back.
absl::Status CheckPairs(const prog::Schedule& schedule, const Bits& census) {
  for (int r = 0; r < schedule.pipeline; ++r) {
    const std::vector<prog::Action>& program = schedule.programs[r];
    for (size_t i = 0; i < program.size(); ++i) {
      const prog::Action& a = program[i];
      if (!prog::IsComm(a.kind)) continue;
      prog::Kind partner = a.kind;
      int stage = a.stage;
      switch (a.kind) {
        case prog::Kind::kSendActivation:
          partner = prog::Kind::kRecvActivation, ++stage;
          break;
        case prog::Kind::kRecvActivation:
          partner = prog::Kind::kSendActivation, --stage;
          break;
        case prog::Kind::kSendGrad:
          partner = prog::Kind::kRecvGrad, --stage;
          break;
        default:
          partner = prog::Kind::kSendGrad, ++stage;
          break;
      }
      if (census.Has(Bit(partner), stage, a.microbatch)) continue;
      const bool send = prog::IsSend(a.kind);
      return Bad(r, i, a,
                 absl::StrCat(send ? "no matching " : "never sent: no ", prog::KindName(partner),
                              " stage ", stage, " microbatch ", a.microbatch, " on rank ", a.peer));
    }
  }
  return absl::OkStatus();
}

// A message (program/message.h) where the action naming it sits on its own rank.
struct Posted {
  prog::Message message;
  size_t index = 0;  // in its rank's program
};

// Check 6: NCCL matches the messages of one communicator by posting order alone, and the
// worker's transports keep one channel per ordered pair of ranks and kind (activations,
// gradients; worker/comm/transport.h). So per (sender, receiver, kind) the sender's SENDs and the
// receiver's RECVs must name the same messages in the same order, or the k-th receive would get
// another microbatch's tensor of the same size, silently.
absl::Status CheckChannelOrder(const prog::Schedule& schedule) {
  const int D = schedule.pipeline;
  // [from][to][gradient]: the messages in program order, as the sender posts them and as the
  // receiver posts them.
  auto lists = [D] {
    return std::vector<std::vector<std::vector<std::vector<Posted>>>>(
        D, std::vector<std::vector<std::vector<Posted>>>(D, std::vector<std::vector<Posted>>(2)));
  };
  auto sent = lists(), received = lists();
  for (int r = 0; r < D; ++r) {
    const std::vector<prog::Action>& program = schedule.programs[r];
    for (size_t i = 0; i < program.size(); ++i) {
      const prog::Action& a = program[i];
      if (!prog::IsComm(a.kind)) continue;
      const Posted m{prog::MessageOf(a), i};
      if (prog::IsSend(a.kind)) {
        sent[r][a.peer][m.message.gradient].push_back(m);
      } else {
        received[a.peer][r][m.message.gradient].push_back(m);
      }
    }
  }
  for (int from = 0; from < D; ++from) {
    for (int to = 0; to < D; ++to) {
      for (int kind = 0; kind < 2; ++kind) {
        const std::vector<Posted>& out = sent[from][to][kind];
        const std::vector<Posted>& in = received[from][to][kind];
        for (size_t k = 0; k < std::min(out.size(), in.size()); ++k) {
          if (out[k].message == in[k].message) continue;
          return Bad(to, in[k].index, schedule.programs[to][in[k].index],
                     absl::StrCat("receive #", k + 1, " on the ", kind ? "gradient" : "activation",
                                  " channel from rank ", from, " meets rank ", from, "'s send #",
                                  k + 1, " on it, action ", out[k].index, " (",
                                  prog::Describe(schedule.programs[from][out[k].index]),
                                  "): NCCL matches a channel's messages by posting order alone, "
                                  "so between two ranks each kind must be sent and received in "
                                  "one order"));
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

namespace internal {

absl::Status CheckStatically(const prog::Schedule& schedule) {
  if (absl::Status status = prog::CheckIndices(schedule); !status.ok()) return status;
  Bits census(schedule);
  if (absl::Status status = TakeCensus(schedule, census); !status.ok()) return status;
  if (absl::Status status = CheckComplete(schedule, census); !status.ok()) return status;
  if (absl::Status status = CheckPairs(schedule, census); !status.ok()) return status;
  return CheckChannelOrder(schedule);
}

absl::Status CheckDeadlock(const prog::Schedule& schedule, const Execution& exec) {
  if (!exec.deadlocked) return absl::OkStatus();
  std::vector<std::string> stuck;
  for (int r = 0; r < schedule.pipeline; ++r) {
    const size_t i = exec.ran[r];
    if (i == schedule.programs[r].size()) continue;
    stuck.push_back(absl::StrCat("rank ", r, " waits forever at action ", i, " (",
                                 prog::Describe(schedule.programs[r][i]), ")"));
  }
  return absl::InvalidArgumentError(absl::StrCat("deadlock: ", absl::StrJoin(stuck, "; ")));
}

}  // namespace internal

}  // namespace pp::plan
