#include "program/dualpipe_v.h"

#include <deque>
#include <vector>

namespace pp::prog::internal {
namespace {

// One rank's program as DualPipe's phases build it: per chunk the next microbatch to run
// forward and backward, and the W passes queued by split backwards.
class RankProgram {
 public:
  RankProgram(int D, int r, std::vector<Action>& out) : stage_{r, 2 * D - 1 - r}, out_(out) {}

  void F(int chunk) { out_.push_back({Kind::kForward, stage_[chunk], next_f_[chunk]++}); }
  // A full backward, or with `split` its input half with the weight half queued.
  void B(int chunk, bool split = false) {
    const int m = next_b_[chunk]++;
    if (split) {
      out_.push_back({Kind::kBackwardInput, stage_[chunk], m});
      queued_w_.push_back({Kind::kBackwardWeight, stage_[chunk], m});
    } else {
      out_.push_back({Kind::kBackward, stage_[chunk], m});
    }
  }
  void W() {
    out_.push_back(queued_w_.front());
    queued_w_.pop_front();
  }

 private:
  const int stage_[2];
  int next_f_[2] = {0, 0};
  int next_b_[2] = {0, 0};
  std::deque<Action> queued_w_;
  std::vector<Action>& out_;
};

void Phases(int D, int M, int r, std::vector<Action>& out) {
  RankProgram p(D, r, out);
  const int down = D - 1 - r;  // ranks below this one
  for (int i = 0; i < 2 * down; ++i) p.F(0);
  for (int i = 0; i <= r; ++i) p.F(0), p.F(1);
  for (int i = 0; i < down; ++i) p.B(1, true), p.W(), p.F(1);
  for (int i = 0; i < M - 2 * D + r + 1; ++i) p.F(0), p.B(1), p.F(1), p.B(0);
  for (int i = 0; i < down; ++i) p.B(1), p.F(1), p.B(0);
  // Phase 6: the split starts halfway, on chunk 1 of odd ranks and chunk 0 of even ones, which
  // leaves r+1 queued W for phases 7 and 8 to run in the gradients' wake.
  bool split = false;
  for (int i = 0; i <= r; ++i) {
    if (i == (r + 1) / 2 && r % 2 == 1) split = true;
    p.B(1, split);
    if (i == (r + 1) / 2 && r % 2 == 0) split = true;
    p.B(0, split);
  }
  for (int i = 0; i < down; ++i) p.W(), p.B(0, true);
  for (int i = 0; i <= r; ++i) p.W();
}

}  // namespace

Schedule DualPipeV(int D, int M) {
  Schedule schedule;
  schedule.name = "dualpipe-v";
  schedule.pipeline = D;
  schedule.chunks = 2;
  schedule.microbatches = M;
  schedule.stage_to_rank = VShapeStageToRank(D);
  schedule.programs.resize(D);
  for (int r = 0; r < D; ++r) Phases(D, M, r, schedule.programs[r]);
  return schedule;
}

}  // namespace pp::prog::internal
