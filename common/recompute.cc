#include "common/recompute.h"

#include "absl/strings/str_cat.h"

namespace pp::common {

absl::StatusOr<Recompute> RecomputeFromName(const std::string& name) {
  if (name.empty() || name == "none") return Recompute::kNone;
  if (name == "full") return Recompute::kFull;
  if (name == "selective") return Recompute::kSelective;
  if (name == "auto") {
    return absl::InvalidArgumentError(
        "parallel.recompute \"auto\" is chosen by ppcoord at submission; here name none, "
        "selective or full");
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "parallel.recompute: unknown value \"", name, "\" (one of none, full, selective, auto)"));
}

const char* RecomputeName(Recompute mode) {
  switch (mode) {
    case Recompute::kFull:
      return "full";
    case Recompute::kSelective:
      return "selective";
    case Recompute::kNone:
      break;
  }
  return "none";
}

}  // namespace pp::common
