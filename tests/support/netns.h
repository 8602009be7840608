// Several hosts on one machine, for the tests that must cross a real network: each host a
// network namespace of its own, joined by a veth pair to a bridge in this (the root) namespace,
// with its own IPv4 address, and its link optionally shaped with tc (tbf for the rate, netem for
// the delay where the kernel has it). Processes started through Exec's argv run in the host's
// namespace and reach the others and the root side's address through the bridge.
//
// Contract: Create needs CAP_NET_ADMIN (root) and a kernel with namespaces, veth and bridges;
// where any of that is refused it returns Unavailable naming the command, and the test skips
// (tests/gpu style: say why, exit cleanly). Names and the /24 subnet derive from this process's
// pid, so beds of concurrent test processes do not collide. ~NetnsBed removes every namespace,
// link and qdisc it made, whatever state a failed test left; a bed is for one thread.
#ifndef PP_TESTS_SUPPORT_NETNS_H_
#define PP_TESTS_SUPPORT_NETNS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pp::testing_support {

// One direction's shaping, applied to both directions of a host's link. Zero fields: none.
struct LinkShape {
  int64_t rate_bits_per_second = 0;  // tbf
  absl::Duration delay;              // netem; Unavailable where the kernel lacks it
};

class NetnsBed {
 public:
  static absl::StatusOr<std::unique_ptr<NetnsBed>> Create(int hosts);
  ~NetnsBed();
  NetnsBed(const NetnsBed&) = delete;
  NetnsBed& operator=(const NetnsBed&) = delete;

  int hosts() const { return static_cast<int>(namespaces_.size()); }
  // The bridge's address in the root namespace (where ppcoord and the test run): 10.A.B.1.
  const std::string& root_address() const { return root_address_; }
  // Host h's address (10.A.B.(h+2)) and namespace name.
  const std::string& address(int h) const { return addresses_.at(h); }
  const std::string& name(int h) const { return namespaces_.at(h); }
  // argv run inside host h's namespace: "ip netns exec NAME argv..." (ip execs argv itself, so
  // the process started is the program, and signals reach it).
  std::vector<std::string> Exec(int h, const std::vector<std::string>& argv) const;
  // Shapes host h's link both ways (replacing an earlier shape; a zero shape removes it).
  absl::Status Shape(int h, const LinkShape& shape);

 private:
  NetnsBed() = default;
  absl::Status AddHost(int h);

  std::string prefix_;  // "pp<pid>": namespace, veth and bridge names start with it
  std::string subnet_;  // "10.A.B."
  std::string root_address_;
  std::string bridge_;
  std::vector<std::string> namespaces_, addresses_, root_links_;
};

}  // namespace pp::testing_support

#endif  // PP_TESTS_SUPPORT_NETNS_H_
