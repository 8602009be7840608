#include "tests/support/netns.h"

#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/support/process.h"

namespace pp::testing_support {
namespace {

constexpr absl::Duration kCommandTimeout = absl::Seconds(10);

// ip and tc where Debian's iproute2 puts them (RunCommand does not search PATH).
std::string Tool(const std::string& name) {
  for (const char* dir : {"/usr/sbin/", "/sbin/", "/usr/bin/", "/bin/"}) {
    const std::string path = dir + name;
    if (::access(path.c_str(), X_OK) == 0) return path;
  }
  return name;  // RunCommand then says it cannot start it
}

// Runs one ip/tc command; Unavailable with its stderr when it fails (permissions, a kernel
// without the feature), so that the caller can tell the test to skip.
absl::StatusOr<CommandResult> RunTool(std::vector<std::string> argv) {
  argv[0] = Tool(argv[0]);
  return RunCommand(argv, kCommandTimeout);
}

absl::Status Run(const std::vector<std::string>& argv) {
  absl::StatusOr<CommandResult> ran = RunTool(argv);
  if (!ran.ok()) return ran.status();
  if (ran->exit_code == 0) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrCat("`", absl::StrJoin(argv, " "), "` exited ", ran->exit_code, ": ", ran->err));
}

// The tc arguments of one direction's shape: "tbf ..." or "netem ..." (netem carries the rate
// itself when both are asked for).
std::vector<std::string> Qdisc(const LinkShape& shape) {
  const std::string rate = absl::StrCat(shape.rate_bits_per_second, "bit");
  if (shape.delay > absl::ZeroDuration()) {
    std::vector<std::string> netem = {
        "netem", "delay", absl::StrCat(absl::ToInt64Microseconds(shape.delay), "us")};
    if (shape.rate_bits_per_second > 0) netem.insert(netem.end(), {"rate", rate});
    return netem;
  }
  // A burst of 10 ms at the rate (at least 2 full-size frames), queueing up to 100 ms.
  const int64_t burst = std::max<int64_t>(shape.rate_bits_per_second / 8 / 100, 3028);
  return {"tbf", "rate", rate, "burst", absl::StrCat(burst), "latency", "100ms"};
}

}  // namespace

absl::StatusOr<std::unique_ptr<NetnsBed>> NetnsBed::Create(int hosts) {
  std::unique_ptr<NetnsBed> bed(new NetnsBed());
  const int pid = static_cast<int>(::getpid());
  bed->prefix_ = absl::StrCat("pp", pid % 100000);
  bed->subnet_ = absl::StrCat("10.", 200 + (pid / 256) % 50, ".", pid % 256, ".");
  bed->root_address_ = bed->subnet_ + "1";
  const std::string bridge = bed->prefix_ + "br";
  if (absl::Status s = Run({"ip", "link", "add", bridge, "type", "bridge"}); !s.ok()) return s;
  bed->bridge_ = bridge;
  for (const std::vector<std::string>& argv :
       {std::vector<std::string>{"ip", "addr", "add", bed->root_address_ + "/24", "dev", bridge},
        {"ip", "link", "set", bridge, "up"}}) {
    if (absl::Status s = Run(argv); !s.ok()) return s;
  }
  for (int h = 0; h < hosts; ++h) {
    if (absl::Status s = bed->AddHost(h); !s.ok()) return s;
  }
  return bed;
}

absl::Status NetnsBed::AddHost(int h) {
  const std::string ns = absl::StrCat(prefix_, "h", h);
  if (absl::Status s = Run({"ip", "netns", "add", ns}); !s.ok()) return s;
  namespaces_.push_back(ns);
  const std::string root_link = absl::StrCat(prefix_, "r", h), host_link = absl::StrCat(prefix_, "v", h);
  if (absl::Status s = Run({"ip", "link", "add", root_link, "type", "veth", "peer", "name", host_link});
      !s.ok()) {
    return s;
  }
  root_links_.push_back(root_link);
  const std::string address = absl::StrCat(subnet_, h + 2);
  addresses_.push_back(address);
  const std::vector<std::vector<std::string>> steps = {
      {"ip", "link", "set", host_link, "netns", ns},
      {"ip", "link", "set", root_link, "master", bridge_},
      {"ip", "link", "set", root_link, "up"},
      {"ip", "-n", ns, "addr", "add", address + "/24", "dev", host_link},
      {"ip", "-n", ns, "link", "set", host_link, "up"},
      {"ip", "-n", ns, "link", "set", "lo", "up"},
  };
  for (const std::vector<std::string>& argv : steps) {
    if (absl::Status s = Run(argv); !s.ok()) return s;
  }
  return absl::OkStatus();
}

NetnsBed::~NetnsBed() {
  // Deleting a namespace deletes its end of the veth, and with it the root end; links whose
  // namespace was never made are deleted by name. Errors are ignored: the point is to try all.
  for (const std::string& ns : namespaces_) (void)Run({"ip", "netns", "del", ns});
  for (const std::string& link : root_links_) {
    (void)RunTool({"ip", "link", "del", link});
  }
  if (!bridge_.empty()) (void)Run({"ip", "link", "del", bridge_});
}

std::vector<std::string> NetnsBed::Exec(int h, const std::vector<std::string>& argv) const {
  std::vector<std::string> full = {Tool("ip"), "netns", "exec", namespaces_.at(h)};
  full.insert(full.end(), argv.begin(), argv.end());
  return full;
}

absl::Status NetnsBed::Shape(int h, const LinkShape& shape) {
  const std::string ns = namespaces_.at(h);
  const std::vector<std::vector<std::string>> devices = {
      {"tc"}, {"tc", "-n", ns}};  // the root end (toward the host), the host's end (from it)
  const std::string root_link = root_links_.at(h), host_link = absl::StrCat(prefix_, "v", h);
  for (int side = 0; side < 2; ++side) {
    std::vector<std::string> del = devices[side];
    const std::string& dev = side == 0 ? root_link : host_link;
    del.insert(del.end(), {"qdisc", "del", "dev", dev, "root"});
    (void)RunTool(del);  // none yet is fine
    if (shape.rate_bits_per_second <= 0 && shape.delay <= absl::ZeroDuration()) continue;
    std::vector<std::string> add = devices[side];
    add.insert(add.end(), {"qdisc", "add", "dev", dev, "root"});
    const std::vector<std::string> qdisc = Qdisc(shape);
    add.insert(add.end(), qdisc.begin(), qdisc.end());
    if (absl::Status s = Run(add); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace pp::testing_support
