// The one-line errors of spec validation: "FIELD: what is wrong". Shared by the spec checkers of
// common/ (job_spec, data_spec, data_globs, auto_plan_spec). Thread-safe: pure functions.
#ifndef PP_COMMON_SPEC_FIELD_H_
#define PP_COMMON_SPEC_FIELD_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"

namespace pp::common::spec {

// InvalidArgument "FIELD: WHAT".
inline absl::Status Field(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

// OK when `value` is one of `names` (an array or vector of strings), else
// "FIELD: unknown value "x" (one of a, b)".
template <typename Names>
absl::Status Choice(absl::string_view field, const std::string& value, const Names& names) {
  for (const auto& name : names) {
    if (value == name) return absl::OkStatus();
  }
  return Field(field, absl::StrCat("unknown value \"", value, "\" (one of ",
                                   absl::StrJoin(names, ", "), ")"));
}

}  // namespace pp::common::spec

#endif  // PP_COMMON_SPEC_FIELD_H_
