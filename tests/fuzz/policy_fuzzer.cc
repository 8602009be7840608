// libFuzzer harness: coordinator/policy.h Policy::Parse (ppcoord's --policy file, proto text
// format) on arbitrary bytes. A refusal is one InvalidArgument line starting with the source. An
// accepted policy is one ppcoord can schedule by: every class resolves to its own value for an
// admin, the default class is one of them, each quota owner finds its own entry, the preemption
// figures are filled in, and proto() printed as text parses back to the same policy.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "coordinator/policy.h"
#include "google/protobuf/text_format.h"

namespace {

constexpr size_t kMaxInput = 4096;
constexpr absl::string_view kSource = "--policy=fuzz.txt";

std::string Text(const pp::v1::SchedulingPolicy& policy) {
  std::string text;
  if (!google::protobuf::TextFormat::PrintToString(policy, &text)) std::abort();
  return text;
}

void CheckAccepted(const pp::coordinator::Policy& policy) {
  const pp::coordinator::Caller admin{"ops", pp::coordinator::Role::kAdmin};
  if (policy.proto().priority_class().empty()) std::abort();
  for (const pp::v1::PriorityClass& c : policy.proto().priority_class()) {
    absl::StatusOr<int> value = policy.PriorityOf(c.name(), admin);
    if (!value.ok() || *value != c.value()) std::abort();
  }
  if (!policy.PriorityOf("", admin).ok() || policy.ClassName("").empty()) std::abort();
  for (const pp::v1::Quota& q : policy.proto().quota()) {
    const pp::v1::Quota* found = policy.QuotaOf(q.owner());
    if (found == nullptr || found->owner() != q.owner()) std::abort();
  }
  if (policy.preemption().max_per_hour() <= 0 || !(policy.preemption().grace_seconds() > 0)) {
    std::abort();
  }
  const std::string text = Text(policy.proto());
  absl::StatusOr<pp::coordinator::Policy> again = pp::coordinator::Policy::Parse(text, kSource);
  if (!again.ok() || Text(again->proto()) != text) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > kMaxInput) return 0;
  absl::StatusOr<pp::coordinator::Policy> policy = pp::coordinator::Policy::Parse(
      absl::string_view(reinterpret_cast<const char*>(data), size), kSource);
  if (policy.ok()) {
    CheckAccepted(*policy);
    return 0;
  }
  const absl::string_view message = policy.status().message();
  if (!absl::IsInvalidArgument(policy.status()) || !absl::StartsWith(message, kSource) ||
      absl::StrContains(message, '\n')) {
    std::abort();
  }
  return 0;
}
