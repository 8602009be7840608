// Loading libpp_cuda.so: dlopen with RTLD_NOW, so a missing CUDA library shows up here as an
// error message instead of later as a crash, and RTLD_LOCAL, so its symbols stay its own.
#include "kernels/cuda/plugin.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"

namespace pp::kernels {
namespace {

constexpr char kPluginFile[] = "libpp_cuda.so";

std::vector<std::string> Candidates() {
  if (const char* path = std::getenv("PP_CUDA_PLUGIN"); path != nullptr && *path != '\0') {
    return {path};
  }
  std::error_code error;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return {};
  const std::filesystem::path dir = exe.parent_path();
  return {(dir.parent_path() / "lib" / kPluginFile).string(), (dir / kPluginFile).string()};
}

template <typename Fn>
bool Resolve(void* library, const char* name, Fn* fn) {
  *fn = reinterpret_cast<Fn>(dlsym(library, name));
  return *fn != nullptr;
}

// The CUDA driver reads these when it initialises, at the plugin's first CUDA call, so they are
// set before the plugin is loaded (under the loader's lock; a binary that called CUDA itself
// before, like a test linking cudart, must set them itself).
// - CUDA_MODULE_LOADING=EAGER, always: lazily loaded modules are loaded at a kernel's first
//   launch, and loading one waits for the device, which may be running a NCCL kernel that spins
//   until a peer launches its own kernel: a deadlock. Eager loading does all of it at start-up.
// - CUDA_DEVICE_MAX_CONNECTIONS=32 unless set: each stream maps onto one of this many hardware
//   queues (8 by default), and streams that share a queue run in order with each other. A
//   compute stream behind a NCCL stream whose kernel spins for its peer would then wait for it,
//   and with it the peer: the plugin uses 2 x channels streams per peer plus one per world
//   communicator and one for compute, so with its two pipeline neighbours as peers a rank's
//   streams each get a queue of their own.
void PrepareCudaEnvironment() {
  setenv("CUDA_MODULE_LOADING", "EAGER", /*overwrite=*/1);
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", /*overwrite=*/0);
}

absl::StatusOr<CudaPlugin> Open(const std::string& path) {
  PrepareCudaEnvironment();
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    return absl::UnavailableError(absl::StrCat("CUDA plugin ", path, " does not load: ", dlerror()));
  }
  int (*abi_version)() = nullptr;
  if (!Resolve(library, "pp_cuda_abi_version", &abi_version)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is not a CUDA plugin (no pp_cuda_abi_version)"));
  }
  if (abi_version() != PP_CUDA_PLUGIN_ABI_VERSION) {
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA plugin ", path, " has ABI version ", abi_version(),
                     ", this binary needs ", PP_CUDA_PLUGIN_ABI_VERSION, " (rebuild both)"));
  }
  CudaPlugin plugin;
  plugin.path = path;
  if (!Resolve(library, "pp_cuda_device_count", &plugin.device_count) ||
      !Resolve(library, "pp_cuda_make_ops", &plugin.make_ops)) {
    return absl::FailedPreconditionError(absl::StrCat("CUDA plugin ", path, ": ", dlerror()));
  }
  // All or none: a plugin built without NCCL has none of them.
  const bool nccl = Resolve(library, "pp_nccl_unique_id", &plugin.nccl_unique_id) &&
                    Resolve(library, "pp_nccl_connect", &plugin.nccl_connect) &&
                    Resolve(library, "pp_nccl_destroy", &plugin.nccl_destroy) &&
                    Resolve(library, "pp_nccl_send", &plugin.nccl_send) &&
                    Resolve(library, "pp_nccl_recv", &plugin.nccl_recv) &&
                    Resolve(library, "pp_nccl_wait", &plugin.nccl_wait) &&
                    Resolve(library, "pp_nccl_all_gather", &plugin.nccl_all_gather) &&
                    Resolve(library, "pp_nccl_all_reduce_sum", &plugin.nccl_all_reduce_sum) &&
                    Resolve(library, "pp_nccl_abort", &plugin.nccl_abort);
  if (!nccl) plugin.nccl_connect = nullptr;
  return plugin;
}

absl::StatusOr<CudaPlugin> Find() {
  const std::vector<std::string> candidates = Candidates();
  for (const std::string& path : candidates) {
    std::error_code error;
    if (std::filesystem::exists(path, error)) return Open(path);
  }
  return absl::UnavailableError(absl::StrCat(
      "CUDA plugin not found (tried ", absl::StrJoin(candidates, ", "),
      "; set PP_CUDA_PLUGIN to its path); a build configured without nvcc has none"));
}

}  // namespace

absl::StatusOr<const CudaPlugin*> LoadCudaPlugin() {
  static absl::Mutex mu(absl::kConstInit);
  static const CudaPlugin* loaded ABSL_GUARDED_BY(mu) = nullptr;
  absl::MutexLock lock(&mu);
  if (loaded == nullptr) {
    absl::StatusOr<CudaPlugin> plugin = Find();
    if (!plugin.ok()) return plugin.status();
    loaded = new CudaPlugin(*std::move(plugin));  // lives as long as the mapped library
  }
  return loaded;
}

}  // namespace pp::kernels
