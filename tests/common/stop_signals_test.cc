// common/stop_signals.h, in a process shaped like the daemons: main() below starts one thread
// that blocks nothing before StopSignals::Install, as OpenBLAS's load-time thread pool does.
// Stop signals sent while main is not waiting must neither kill the process nor get lost.
#include "common/stop_signals.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace pp::common {
namespace {

StopSignals* g_stop = nullptr;
std::atomic<bool> g_early_blocks_sigterm{true};

// Whether the calling thread has `signal` blocked.
bool Blocked(int signal) {
  sigset_t mask;
  pthread_sigmask(SIG_BLOCK, nullptr, &mask);
  return sigismember(&mask, signal) == 1;
}

class StopSignalsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    while (g_stop->Wait(absl::ZeroDuration()).has_value()) {
    }
  }
};

TEST_F(StopSignalsTest, TimesOutWithoutASignal) {
  const absl::Time start = absl::Now();
  EXPECT_EQ(g_stop->Wait(absl::Milliseconds(100)), std::nullopt);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
}

TEST_F(StopSignalsTest, TheEarlyThreadIsUnblockedAndLaterThreadsInheritTheBlock) {
  EXPECT_FALSE(g_early_blocks_sigterm);
  EXPECT_TRUE(Blocked(SIGTERM));
  bool later_blocks[3] = {};
  std::thread([&] {
    later_blocks[0] = Blocked(SIGINT);
    later_blocks[1] = Blocked(SIGTERM);
    later_blocks[2] = Blocked(SIGHUP);
  }).join();
  EXPECT_TRUE(later_blocks[0]);
  EXPECT_TRUE(later_blocks[1]);
  EXPECT_FALSE(later_blocks[2]);  // not one of the signals installed
}

// Sent while nobody waits: the early thread may take it (its handler writes the pipe) or it waits
// pending; either way the process lives on and the next Wait returns it.
TEST_F(StopSignalsTest, ASignalWhileNotWaitingIsKeptForTheNextWait) {
  ASSERT_EQ(kill(getpid(), SIGTERM), 0);
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(g_stop->Wait(absl::ZeroDuration()), SIGTERM);
  EXPECT_EQ(g_stop->Wait(absl::ZeroDuration()), std::nullopt);  // each signal once
}

TEST_F(StopSignalsTest, WakesAWaiterWithNoTimeout) {
  std::thread sender([] {
    absl::SleepFor(absl::Milliseconds(100));
    kill(getpid(), SIGINT);
  });
  const absl::Time start = absl::Now();
  EXPECT_EQ(g_stop->Wait(absl::InfiniteDuration()), SIGINT);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  sender.join();
}

TEST_F(StopSignalsTest, TwoDifferentSignalsAreBothReturned) {
  ASSERT_EQ(kill(getpid(), SIGINT), 0);
  ASSERT_EQ(kill(getpid(), SIGTERM), 0);
  const std::optional<int> first = g_stop->Wait(absl::Seconds(5));
  const std::optional<int> second = g_stop->Wait(absl::Seconds(5));
  ASSERT_TRUE(first.has_value() && second.has_value());
  EXPECT_EQ(*first + *second, SIGINT + SIGTERM);
  EXPECT_NE(*first, *second);
}

// A child forked by ppctl up restores original_mask() before exec; a SIGTERM that reaches it in
// between ends the child (default action) and does not show up in the parent's Wait.
TEST_F(StopSignalsTest, AForkedChildDiesOfItsSignalInsteadOfForwardingIt) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Still blocked (inherited from main): wait, bounded, until the parent's SIGTERM is pending.
    for (int i = 0; i < 500; ++i) {
      sigset_t pending;
      sigpending(&pending);
      if (sigismember(&pending, SIGTERM) == 1) break;
      usleep(10'000);
    }
    sigprocmask(SIG_SETMASK, &g_stop->original_mask(), nullptr);
    _exit(3);  // reached only if the signal did not end the child
  }
  ASSERT_EQ(kill(child, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit code " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  EXPECT_EQ(g_stop->Wait(absl::Milliseconds(100)), std::nullopt);
}

TEST_F(StopSignalsTest, InstallingTwiceIsRefused) {
  absl::StatusOr<StopSignals> again = StopSignals::Install();
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace pp::common

int main(int argc, char** argv) {
  // The early thread: started before Install, so it keeps an empty mask, and parked for good.
  std::atomic<bool> started = false;
  std::thread([&started] {
    pp::common::g_early_blocks_sigterm = pp::common::Blocked(SIGTERM);
    started = true;
    while (true) pause();  // a stop signal's handler may run here; pause then resumes
  }).detach();
  while (!started) std::this_thread::yield();
  absl::StatusOr<pp::common::StopSignals> stop = pp::common::StopSignals::Install();
  if (!stop.ok()) {
    std::cerr << stop.status() << "\n";
    return 1;
  }
  pp::common::g_stop = &*stop;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
