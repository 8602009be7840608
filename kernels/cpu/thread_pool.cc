#include "kernels/cpu/thread_pool.h"

#include <algorithm>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PP_PAUSE() _mm_pause()
#else
#define PP_PAUSE() std::this_thread::yield()
#endif

namespace pp::kernels {
namespace {

// About a millisecond of pause instructions: longer than the gap between two kernels of a step,
// far shorter than the gap between steps of a pipeline rank waiting on its peers.
constexpr int kSpinIterations = 1 << 14;

}  // namespace

ThreadPool::ThreadPool(int threads) : threads_(threads < 1 ? 1 : threads) {
  for (int w = 1; w < threads_; ++w) helpers_.emplace_back([this, w] { HelperLoop(w); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(mu_);
    wake_.notify_all();
  }
  for (std::thread& t : helpers_) t.join();
}

void ThreadPool::RunBlock(int worker) {
  const int64_t begin = job_n_ * worker / threads_, end = job_n_ * (worker + 1) / threads_;
  for (int64_t i = begin; i < end; ++i) (*job_)(i, worker);
}

void ThreadPool::Run(int64_t n, absl::FunctionRef<void(int64_t, int)> fn) {
  if (n <= 0) return;
  if (threads_ == 1 || n == 1) {
    for (int64_t i = 0; i < n; ++i) fn(i, 0);
    return;
  }
  job_ = &fn;
  job_n_ = n;
  pending_.store(threads_ - 1);
  // seq_cst bump then seq_cst read of sleeping_: pairs with the helper's store of sleeping_ and
  // re-read of generation_ under mu_, so a helper going to sleep never misses this job.
  generation_.fetch_add(1);
  if (sleeping_.load() > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    wake_.notify_all();
  }
  RunBlock(0);
  for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins < kSpinIterations) {
      PP_PAUSE();
    } else {
      std::this_thread::yield();
    }
  }
  job_ = nullptr;
}

void ThreadPool::HelperLoop(int worker) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spins = 0; gen == seen && spins < kSpinIterations; ++spins) {
      PP_PAUSE();
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      sleeping_.fetch_add(1);
      wake_.wait(lock, [&] { return generation_.load() != seen; });
      sleeping_.fetch_sub(1);
      gen = generation_.load();
    }
    if (stop_.load()) return;
    seen = gen;
    RunBlock(worker);
    pending_.fetch_sub(1, std::memory_order_release);
  }
}

void Split(ThreadPool& pool, int64_t total, absl::FunctionRef<void(int64_t, int64_t)> fn,
           int64_t align, int64_t per_task) {
  const int64_t parts = std::min<int64_t>(pool.threads(), total / per_task);
  if (parts <= 1) {
    fn(int64_t{0}, total);
    return;
  }
  const int64_t blocks = (total + align - 1) / align;
  pool.Run(parts, [&](int64_t i, int) {
    const int64_t b = std::min(total, blocks * i / parts * align);
    const int64_t e = std::min(total, blocks * (i + 1) / parts * align);
    if (b < e) fn(b, e);
  });
}

}  // namespace pp::kernels
