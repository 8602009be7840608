// Temporary: replaced by the real CPU backend.
#include "kernels/cpu/cpu_ops.h"
namespace pp::kernels {
std::unique_ptr<Ops> MakeCpuOps(int) { return nullptr; }
}  // namespace pp::kernels
