// DnnlGemm in a build without oneDNN (kernels/CMakeLists.txt did not find dnnl): every Create
// fails, so the bf16 precision takes the rounding fallback.
#include "kernels/cpu/dnnl_gemm.h"

namespace pp::kernels {

absl::StatusOr<std::unique_ptr<DnnlGemm>> DnnlGemm::Create(Type) {
  return absl::UnavailableError("this build has no oneDNN (libdnnl-dev was not found)");
}

}  // namespace pp::kernels
