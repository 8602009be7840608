// Training precisions (train.precision), named once for the job-spec validation, the kernels'
// backends (kernels/ops.h MakeOps) and the planner's memory model. Thread-safe, no state.
//
//   fp32  every tensor and every op in fp32 (the default)
//   bf16  the operands of the three matrix-product ops (MatmulForward, MatmulBackwardInput,
//         MatmulBackwardWeight) are rounded to bfloat16 (round to nearest, ties to even); the
//         products accumulate in fp32 and are stored in fp32. Everything else stays fp32:
//         weights, gradients and AdamW moments (the master copies), biases and their gradients,
//         LayerNorm, attention (its products and softmax), GELU, the loss, the optimizer, and the
//         activations sent between stages. docs/jobs.md "Precision" says why.
#ifndef PP_COMMON_PRECISION_H_
#define PP_COMMON_PRECISION_H_

#include <string>

#include "absl/status/statusor.h"

namespace pp::common {

enum class Precision { kFp32, kBf16 };

// "" (the default) and "fp32", "bf16"; InvalidArgument naming train.precision otherwise.
absl::StatusOr<Precision> PrecisionFromName(const std::string& name);
const char* PrecisionName(Precision precision);

}  // namespace pp::common

#endif  // PP_COMMON_PRECISION_H_
