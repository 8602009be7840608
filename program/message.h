// What a comm action moves: one boundary tensor of one microbatch across one stage edge
// (lo -> lo+1), an activation going up or a gradient coming down. The planner (its validator's
// channel-order check) and the worker (its executor's tags and channels) both name messages here,
// so a program the planner accepts is a program the worker posts the same way.
//
// Naming: the planner writes every comm action with the stage on its own rank (ir.h). A worker
// also accepts the stage at the other end of the edge (tests and hand-written programs use
// either); MessageOf resolves both against the layout.
//
// Thread-safe: pure functions.
#ifndef PP_PROGRAM_MESSAGE_H_
#define PP_PROGRAM_MESSAGE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "program/ir.h"

namespace pp::prog {

struct Message {
  bool gradient = false;
  int lo = 0;  // the edge's lower stage
  int microbatch = 0;

  bool operator==(const Message&) const = default;
};

// The stages at the two ends of comm action `a` run by `rank`: `mine` on this rank, `other` on
// the peer (either may be out of range or misplaced; rules.h's ActionProblem says which). An
// activation's sender and a gradient's receiver hold the lower stage.
struct Ends {
  int mine = 0;
  int other = 0;
};
Ends EndsOf(const std::vector<int>& stage_to_rank, int rank, const Action& a);

// The message comm action `a` moves. REQUIRES: a comm action with no ActionProblem on `rank`.
Message MessageOf(const std::vector<int>& stage_to_rank, int rank, const Action& a);
// The same for an action named by the stage on its own rank, as the planner writes them (and so
// as workers trace them). REQUIRES: a comm action.
Message MessageOf(const Action& a);

// The transports' channels: activations flow on one, gradients on the other, and a transport
// matches each channel's messages in posting order (NCCL's rule), so each kind keeps its own
// order (the validator checks every program for it).
inline constexpr int kActivationChannel = 0;
inline constexpr int kGradientChannel = 1;
inline int ChannelOf(const Message& m) {
  return m.gradient ? kGradientChannel : kActivationChannel;
}

// The tag both ends give a message: its kind, lo and microbatch, each field below 2^27.
// DescribeTag names it ("gradient 2->3 mb 5"); any other tag is named by its number.
uint64_t BoundaryTag(bool gradient, int lo_stage, int microbatch);
inline uint64_t TagOf(const Message& m) { return BoundaryTag(m.gradient, m.lo, m.microbatch); }
std::string DescribeTag(uint64_t tag);

}  // namespace pp::prog

#endif  // PP_PROGRAM_MESSAGE_H_
