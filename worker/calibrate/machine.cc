// Calibration's machine identity and cores (calibrate.h): what lets the coordinator see that
// workers in different network namespaces of one machine share its cores.
#include <sched.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "worker/calibrate/calibrate.h"

namespace pp::calibrate {

std::string MachineIdentity() {
  // A namespace gives a process its own network and hostname, but the kernel's boot id is one per
  // boot of the machine.
  std::ifstream file("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  if (file && std::getline(file, boot_id)) {
    boot_id = std::string(absl::StripAsciiWhitespace(boot_id));
    if (!boot_id.empty()) return absl::StrCat("boot:", boot_id);
  }
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) == 0 && name[0] != '\0') {
    return absl::StrCat("host:", name);
  }
  return "";
}

int UsableCores() {
  // cpu_set_t holds 1024 CPUs: on a larger machine the call fails and hardware_concurrency
  // answers instead.
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int count = CPU_COUNT(&set);
    if (count > 0) return count;
  }
  const unsigned hardware = std::thread::hardware_concurrency();
  return hardware > 0 ? static_cast<int>(hardware) : 1;
}

}  // namespace pp::calibrate
