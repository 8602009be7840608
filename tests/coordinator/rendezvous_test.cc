// The rendezvous store's bounds: value size, keys and bytes per job attempt and in total, and
// the idle TTL (with a fake clock), the cap on one wait. Its waits are tested in logic_test.cc.
#include "coordinator/rendezvous.h"

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pp::coordinator {
namespace {

using ::testing::HasSubstr;

RendezvousLimits Small() {
  RendezvousLimits limits;
  limits.max_value_bytes = 8;
  limits.max_attempt_keys = 3;
  limits.max_attempt_bytes = 40;
  limits.max_total_keys = 5;
  limits.max_total_bytes = 1000;
  return limits;
}

void ExpectExhausted(const absl::Status& status, const std::string& names) {
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_THAT(status.message(), HasSubstr(names));
  EXPECT_THAT(status.message(), HasSubstr("over the limit"));
}

TEST(RendezvousLimits, ValueOverItsLimitIsRefusedAndNotStored) {
  RendezvousStore kv(Small());
  ExpectExhausted(kv.Set("j/0/a", "123456789"), "the value of key \"j/0/a\"");
  EXPECT_EQ(kv.size(), 0u);
  EXPECT_TRUE(kv.Set("j/0/a", "12345678").ok());
}

TEST(RendezvousLimits, AttemptKeysAreCappedUntilTheAttemptIsErased) {
  RendezvousStore kv(Small());
  for (const char* key : {"j/0/a", "j/0/b", "j/0/c"}) EXPECT_TRUE(kv.Set(key, "v").ok()) << key;
  ExpectExhausted(kv.Set("j/0/d", "v"), "the keys of \"j/0/\"");
  EXPECT_TRUE(kv.Set("j/0/a", "w").ok()) << "replacing a key adds none";
  EXPECT_TRUE(kv.Set("j/1/a", "v").ok()) << "another attempt has its own budget";
  EXPECT_EQ(kv.EraseWithPrefix("j/0/"), 3);
  EXPECT_TRUE(kv.Set("j/0/d", "v").ok());
}

TEST(RendezvousLimits, AttemptBytesCountNameAndValue) {
  RendezvousStore kv(Small());
  // "j/0/key1" is 8 bytes, with an 8-byte value 16; two fit in 40, a third does not.
  EXPECT_TRUE(kv.Set("j/0/key1", "12345678").ok());
  EXPECT_TRUE(kv.Set("j/0/key2", "12345678").ok());
  ExpectExhausted(kv.Set("j/0/key3", "12345678"), "the bytes of \"j/0/\"");
  EXPECT_TRUE(kv.Set("j/0/key2", "").ok()) << "a smaller value frees bytes: 16 + 8 + 16 = 40";
  EXPECT_TRUE(kv.Set("j/0/key3", "12345678").ok());
}

TEST(RendezvousLimits, StoreTotalsSpanAttempts) {
  RendezvousStore kv(Small());
  for (const char* key : {"a/0/x", "b/0/x", "c/0/x", "d/0/x", "e/0/x"}) {
    EXPECT_TRUE(kv.Set(key, "v").ok()) << key;
  }
  ExpectExhausted(kv.Set("f/0/x", "v"), "the keys of the store");
  RendezvousLimits bytes = Small();
  bytes.max_total_bytes = 20;
  RendezvousStore small(bytes);
  EXPECT_TRUE(small.Set("a/0/x", "12345678").ok());  // 13 bytes
  ExpectExhausted(small.Set("b/0/x", "12345678"), "the bytes of the store");
}

TEST(RendezvousLimits, KeysIdleForTheTtlAreDropped) {
  absl::Time now = absl::FromUnixSeconds(1000000);
  RendezvousLimits limits = Small();
  limits.idle_ttl = absl::Hours(1);
  RendezvousStore kv(limits, [&now] { return now; });
  EXPECT_TRUE(kv.Set("j/0/old", "v").ok());
  EXPECT_TRUE(kv.Set("j/0/read", "v").ok());
  EXPECT_TRUE(kv.Set("j/0/third", "v").ok());
  now += absl::Minutes(40);
  EXPECT_TRUE(kv.Get({"j/0/read"}, absl::ZeroDuration()).ok());  // reading keeps it alive
  now += absl::Minutes(21);
  // Sweeping frees the idle keys' share of the attempt's budget before this Set is counted.
  EXPECT_TRUE(kv.Set("j/0/new", "v").ok());
  EXPECT_EQ(kv.size(), 2u);
  EXPECT_FALSE(kv.Get({"j/0/old"}, absl::ZeroDuration()).ok());
  EXPECT_TRUE(kv.Get({"j/0/read", "j/0/new"}, absl::ZeroDuration()).ok());
}

// A wait holds a server thread: one Get waits at most max_wait, however long its caller asked.
TEST(RendezvousLimits, AGetWaitsAtMostMaxWaitWhateverItsCallerAsked) {
  EXPECT_EQ(RendezvousLimits{}.max_wait, kMaxRendezvousWait);
  RendezvousLimits limits = Small();
  limits.max_wait = absl::Milliseconds(200);
  RendezvousStore kv(limits);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<std::string>> got = kv.Get({"j/0/late"}, absl::Seconds(30));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr("j/0/late"));
  EXPECT_TRUE(kv.Set("j/0/late", "v").ok());
  EXPECT_TRUE(kv.Get({"j/0/late"}, absl::Seconds(30)).ok());
}

}  // namespace
}  // namespace pp::coordinator
