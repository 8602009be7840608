// The pipeline program: a schedule is one ordered program of actions per rank plus the stage->rank
// map. The planner builds and checks it (coordinator/plan/), the worker's executor runs one rank of
// it (worker/executor/); both read actions through this module, so there is one contract.
// Plain structs; proto.h converts them to and from pp.v1.
//
// Conventions every pass relies on:
// - Stage s (0..S-1, S = D*V) is a global index; rank stage_to_rank[s] holds it.
// - A comm action names the stage on ITS OWN rank: SEND_ACTIVATION(s) ships F(s)'s output to the
//   rank of s+1, whose RECV_ACTIVATION(s+1) takes it; SEND_GRAD(s) ships B/I(s)'s input-gradient
//   to the rank of s-1, whose RECV_GRAD(s-1) takes it. A message is identified by (kind, stage,
//   microbatch), so a receiver may post any receive as early as it likes.
#ifndef PP_PROGRAM_IR_H_
#define PP_PROGRAM_IR_H_

#include <cstdint>
#include <string>
#include <vector>

namespace pp::prog {

// Same order and names as pp.v1.ActionKind (minus UNSPECIFIED).
enum class Kind : uint8_t {
  kForward,
  kBackward,        // full backward: input and weight gradients
  kBackwardInput,   // I: input gradient only (zero-bubble split)
  kBackwardWeight,  // W: weight gradient only
  kSendActivation,
  kRecvActivation,
  kSendGrad,
  kRecvGrad,
};

struct Action {
  Kind kind;
  int stage;
  int microbatch;
  int peer = -1;  // comm actions: the other rank; -1 otherwise

  bool operator==(const Action&) const = default;
};

struct Schedule {
  std::string name;
  int pipeline = 0;                           // D ranks
  int chunks = 0;                             // V stages per rank
  int microbatches = 0;                       // M
  std::vector<int> stage_to_rank;             // S entries
  std::vector<std::vector<Action>> programs;  // D programs, in execution order

  int stages() const { return static_cast<int>(stage_to_rank.size()); }
  // False for the forward-only schedule: its F keeps nothing for a backward that never comes.
  bool trains() const;
};

// Inline: every pass asks them of every action.
inline bool IsComm(Kind kind) { return kind >= Kind::kSendActivation; }
inline bool IsSend(Kind kind) { return kind == Kind::kSendActivation || kind == Kind::kSendGrad; }
// "FORWARD", "SEND_GRAD", ... (the proto enum names).
const char* KindName(Kind kind);
// "FORWARD stage 2 microbatch 0", with " to rank 3" / " from rank 1" for comm actions.
std::string Describe(const Action& action);

// Looped placement (Megatron): stage s on rank s % D.
std::vector<int> LoopedStageToRank(int D, int V);
// V-shaped placement (ZB-V): rank r holds stages r and 2D-1-r.
std::vector<int> VShapeStageToRank(int D);

}  // namespace pp::prog

#endif  // PP_PROGRAM_IR_H_
