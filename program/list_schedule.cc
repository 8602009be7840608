#include "program/list_schedule.h"

#include <algorithm>
#include <cstddef>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pp::prog::internal {
namespace {

Schedule Empty(const ListPolicy& policy, int D, int M) {
  Schedule schedule;
  schedule.name = policy.name;
  schedule.pipeline = D;
  schedule.chunks = policy.chunks;
  schedule.microbatches = M;
  schedule.stage_to_rank = policy.chunks == 2 ? VShapeStageToRank(D) : LoopedStageToRank(D, 1);
  schedule.programs.resize(D);
  return schedule;
}

// The list scheduler's state: what each stage has run and when, what each rank holds.
class ListScheduler {
 public:
  ListScheduler(const ListPolicy& policy, int D, int M)
      : policy_(policy),
        D_(D),
        M_(M),
        S_(D * policy.chunks),
        next_f_(S_, 0),
        next_i_(S_, 0),
        f_end_(static_cast<size_t>(S_) * M, kNever),
        i_end_(static_cast<size_t>(S_) * M, kNever),
        pending_w_(D),
        w_head_(D, 0),
        live_(D, 0),
        free_at_(D, 0) {}

  absl::StatusOr<Schedule> Run() {
    Schedule schedule = Empty(policy_, D_, M_);
    int remaining = 3 * S_ * M_;
    for (int t = 0; remaining > 0;) {
      for (int r = 0; r < D_; ++r) {
        if (free_at_[r] > t || !RunNext(r, t, schedule.programs[r])) continue;
        free_at_[r] = t + 1;
        --remaining;
      }
      int next = kNever;
      for (int r = 0; r < D_; ++r) {
        if (free_at_[r] > t) next = std::min(next, free_at_[r]);
      }
      if (next == kNever && remaining > 0) {
        return absl::InternalError(absl::StrCat(policy_.name, " list scheduler stalled at time ", t,
                                                " (D=", D_, " M=", M_, ")"));
      }
      t = next;
    }
    return schedule;
  }

 private:
  static constexpr int kNever = std::numeric_limits<int>::max();
  struct Pending {
    int stage;
    int microbatch;
  };

  // The stage of rank r farther from the loss (the first chunk) and nearer to it.
  int Far(int r) const { return r; }
  int Near(int r) const { return policy_.chunks == 2 ? S_ - 1 - r : r; }

  bool ForwardReady(int r, int s, int t) const {
    const int m = next_f_[s];
    if (m >= M_ || (s > 0 && f_end_[(s - 1) * M_ + m] > t)) return false;
    const bool admits = policy_.keep_slot && s == Far(r) && Near(r) != s;
    return live_[r] + (admits ? 2 : 1) <= policy_.cap;
  }
  bool InputGradReady(int s, int t) const {
    const int m = next_i_[s];
    return m < M_ && f_end_[s * M_ + m] <= t && (s + 1 == S_ || i_end_[(s + 1) * M_ + m] <= t);
  }

  void Forward(int r, int s, int t, std::vector<Action>& program) {
    const int m = next_f_[s]++;
    program.push_back({Kind::kForward, s, m});
    f_end_[s * M_ + m] = t + 1;
    ++live_[r];
  }
  void InputGrad(int r, int s, int t, std::vector<Action>& program) {
    const int m = next_i_[s]++;
    program.push_back({Kind::kBackwardInput, s, m});
    i_end_[s * M_ + m] = t + 1;
    pending_w_[r].push_back({s, m});
  }

  // Rank r is free at time t: appends the first ready pick of the priority list, or returns
  // false when it idles until something it waits for finishes.
  bool RunNext(int r, int t, std::vector<Action>& program) {
    for (Pick pick : policy_.priority) {
      switch (pick) {
        case Pick::kForwardNear:
        case Pick::kForwardFar: {
          const int s = pick == Pick::kForwardNear ? Near(r) : Far(r);
          if (!ForwardReady(r, s, t)) break;
          Forward(r, s, t, program);
          return true;
        }
        case Pick::kInputNear:
        case Pick::kInputFar: {
          const int s = pick == Pick::kInputNear ? Near(r) : Far(r);
          if (!InputGradReady(s, t)) break;
          InputGrad(r, s, t, program);
          return true;
        }
        case Pick::kWeight: {
          if (w_head_[r] == pending_w_[r].size()) break;
          const Pending w = pending_w_[r][w_head_[r]++];
          program.push_back({Kind::kBackwardWeight, w.stage, w.microbatch});
          --live_[r];
          return true;
        }
      }
    }
    return false;
  }

  const ListPolicy& policy_;
  const int D_, M_, S_;
  std::vector<int> next_f_, next_i_;             // per stage: the next microbatch to run
  std::vector<int> f_end_, i_end_;               // per (stage, microbatch): when its F / I ends
  std::vector<std::vector<Pending>> pending_w_;  // per rank, in I order
  std::vector<size_t> w_head_;
  std::vector<int> live_, free_at_;  // per rank
};

}  // namespace

absl::StatusOr<Schedule> ListSchedule(const ListPolicy& policy, int D, int M) {
  return ListScheduler(policy, D, M).Run();
}

absl::StatusOr<Schedule> ZbV(int D, int M) {
  using enum Pick;
  return ListSchedule(
      {"zb-v", 2, 2 * D, false, {kForwardNear, kForwardFar, kInputFar, kInputNear, kWeight}}, D, M);
}

absl::StatusOr<Schedule> ZbH2(int D, int M) {
  using enum Pick;
  return ListSchedule({"zb-h2", 1, 2 * D - 1, false, {kInputNear, kForwardNear, kWeight}}, D, M);
}

absl::StatusOr<Schedule> VHalf(int D, int M) {
  using enum Pick;
  return ListSchedule(
      {"v-half", 2, D + 1, true, {kForwardNear, kInputNear, kInputFar, kForwardFar, kWeight}}, D,
      M);
}

absl::StatusOr<Schedule> VMin(int D, int M) {
  using enum Pick;
  return ListSchedule({"v-min",
                       2,
                       (2 * D + 2) / 3 + 1,
                       true,
                       {kForwardNear, kInputNear, kInputFar, kForwardFar, kWeight}},
                      D, M);
}

}  // namespace pp::prog::internal
