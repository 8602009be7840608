// common/loopback.h: loopback is decided on addresses: numeric ones by their range, names by
// every address they resolve to, within a bounded time.
#include "common/loopback.h"

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace pp::common {
namespace {

TEST(IsLoopbackHostTest, NumericAddressesByTheirRange) {
  for (const char* host : {"127.0.0.1", "127.1.2.3", "127.255.255.254", "::1", "[::1]",
                           "::ffff:127.0.0.1", "[::ffff:127.0.0.9]"}) {
    EXPECT_TRUE(IsLoopbackHost(host)) << host;
  }
  for (const char* host : {"", "0.0.0.0", "::", "[::]", "10.0.0.1", "128.0.0.1", "::2",
                           "::ffff:10.0.0.1", "[::1", "::1]"}) {
    EXPECT_FALSE(IsLoopbackHost(host)) << host;
  }
}

TEST(IsLoopbackHostTest, NamesByWhatTheyResolveTo) {
  EXPECT_TRUE(IsLoopbackHost("localhost"));  // /etc/hosts
  // .example never resolves (RFC 2606): however it is spelled, it is no loopback address. The
  // lookup ends within its bound whether or not a DNS server answers.
  const absl::Time start = absl::Now();
  EXPECT_FALSE(IsLoopbackHost("127.evil.example"));
  EXPECT_FALSE(IsLoopbackHost("127.0.0.1.example"));
  EXPECT_LT(absl::Now() - start, 2 * kLoopbackLookupTimeout + absl::Seconds(2));
}

}  // namespace
}  // namespace pp::common
