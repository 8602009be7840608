#include "common/precision.h"

#include "absl/strings/str_cat.h"

namespace pp::common {

absl::StatusOr<Precision> PrecisionFromName(const std::string& name) {
  if (name.empty() || name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  return absl::InvalidArgumentError(
      absl::StrCat("train.precision: unknown value \"", name, "\" (one of fp32, bf16)"));
}

const char* PrecisionName(Precision precision) {
  return precision == Precision::kBf16 ? "bf16" : "fp32";
}

}  // namespace pp::common
