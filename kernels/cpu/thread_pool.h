// ThreadPool: the CPU backend's own threads for the loops it parallelises itself (GEMM row
// blocks, attention heads, row-wise LayerNorm, the optimizer).
//
// Contract:
// - A pool of `threads` runs work on the calling thread plus threads-1 helpers; a pool of 1 has
//   no helper and runs everything inline (a pipeline worker with train.threads = 1 starts no
//   thread, so D worker processes on D cores never oversubscribe).
// - Run(n, fn) calls fn(i, worker) for every i in [0, n) and returns when all calls have
//   returned. The split is static: worker w runs the contiguous block [w*n/W, (w+1)*n/W), in
//   ascending i. Kernels give each i disjoint outputs and a fixed reduction order, so the bits
//   never depend on the thread count or on timing.
// - worker is in [0, threads()): an index for per-thread scratch.
// - Threading: one caller at a time (an Ops instance is not shared by threads); fn must not call
//   Run. Helpers spin briefly for the next Run (calls follow each other within microseconds in
//   a step), then sleep on a condition variable, so an idle pool costs no CPU.
#ifndef PP_KERNELS_CPU_THREAD_POOL_H_
#define PP_KERNELS_CPU_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"

namespace pp::kernels {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return threads_; }
  void Run(int64_t n, absl::FunctionRef<void(int64_t i, int worker)> fn);

 private:
  void HelperLoop(int worker);
  void RunBlock(int worker);

  const int threads_;
  std::vector<std::thread> helpers_;
  // The current job; written by the caller before `generation_` is bumped.
  absl::FunctionRef<void(int64_t, int)>* job_ = nullptr;
  int64_t job_n_ = 0;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};  // helpers still running the current job
  std::atomic<int> sleeping_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable wake_;
};

// Rows (or columns) per task when a loop is split over the pool: large enough that a task
// outweighs the hand-off (a few microseconds).
inline constexpr int64_t kRowsPerTask = 64;
// Where a split may cut by default: the own kernels give every row the same bits anywhere (16:
// whole vectors).
inline constexpr int64_t kVecAlign = 16;

// fn(begin, end) over min(threads, total / per_task) contiguous parts of [0, total) on the pool,
// cut at multiples of align; one call over all of it, inline, when that is at most one part.
void Split(ThreadPool& pool, int64_t total, absl::FunctionRef<void(int64_t, int64_t)> fn,
           int64_t align = kVecAlign, int64_t per_task = kRowsPerTask);

}  // namespace pp::kernels

#endif  // PP_KERNELS_CPU_THREAD_POOL_H_
