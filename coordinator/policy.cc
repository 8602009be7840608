#include "coordinator/policy.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/file_io.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace pp::coordinator {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using ParseInfoTree = google::protobuf::TextFormat::ParseInfoTree;

// A policy file over this is no policy file (it is read whole on every SIGHUP).
constexpr uint64_t kMaxPolicyFileBytes = 1 << 20;
constexpr int kMaxClassValue = 1000000;
constexpr size_t kMaxClassNameLength = 40;

// Default()'s policy, in the same words docs/jobs.md gives it, so that the two are easy to compare.
constexpr absl::string_view kDefaultPolicy = R"pb(
  priority_class { name: "low" value: 0 }
  priority_class { name: "normal" value: 100 }
  priority_class { name: "high" value: 200 }
  default_class: "normal"
  aging { every_seconds: 60 step: 5 max_boost: 100 reserve_after_seconds: 900 }
  preemption { max_per_hour: 4 grace_seconds: 120 }
)pb";
constexpr absl::string_view kDefaultClassName = "normal";
constexpr int kDefaultMaxPerHour = 4;
constexpr double kDefaultGraceSeconds = 120;

// Keeps the parser's first complaint (the later ones tend to follow from it) instead of logging.
class FirstError : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (!error_.empty()) return;
    // The message may quote the file's text: the refusal stays one line whatever it holds.
    error_ = absl::StrCat(line + 1, ":", column + 1, ": ",
                          absl::StrReplaceAll(message, {{"\n", "\\n"}, {"\r", "\\r"}}));
  }
  const std::string& error() const { return error_; }

 private:
  std::string error_;
};

// Text from the file, quoted on one line whatever bytes it holds.
std::string Quoted(absl::string_view text) {
  return absl::StrCat("\"", absl::CHexEscape(text), "\"");
}

const char* RoleName(Role role) {
  switch (role) {
    case Role::kView:
      return "view";
    case Role::kSubmit:
      return "submit";
    case Role::kAdmin:
      return "admin";
  }
  return "?";
}

const FieldDescriptor* Field(const Message& message, absl::string_view name) {
  return message.GetDescriptor()->FindFieldByName(std::string(name));
}

// The 1-based line of the index-th value of `field` (index -1: a singular field), 0 when the text
// has none. The parser records one line for a whole list ("allowed: [...]"), so a later value of a
// list takes the line of the list's first.
int LineOf(const ParseInfoTree* tree, const FieldDescriptor* field, int index) {
  if (tree == nullptr || field == nullptr) return 0;
  for (int i = index; i >= std::min(index, 0); --i) {
    const int line = tree->GetLocation(field, i).line;
    if (line >= 0) return line + 1;
  }
  return 0;
}

// Where a message value's problem is: the line of its field `child` (value `child_index`) when the
// text sets it there, else the line of the value itself (the `parent` field's index-th).
int ChildLine(const ParseInfoTree* tree, const FieldDescriptor* parent, int index,
              const FieldDescriptor* child, int child_index = -1) {
  if (tree == nullptr || parent == nullptr) return 0;
  const int line = LineOf(tree->GetTreeForNested(parent, index), child, child_index);
  return line > 0 ? line : LineOf(tree, parent, index);
}

// Refusals of one text, each naming its source and line.
struct Source {
  absl::string_view name;
  const ParseInfoTree* tree;

  absl::Status Refuse(int line, absl::string_view why) const {
    if (line <= 0) return absl::InvalidArgumentError(absl::StrCat(name, ": ", why));
    return absl::InvalidArgumentError(absl::StrCat(name, ":", line, ": ", why));
  }
};

absl::Status ParseText(absl::string_view text, const Source& source, pp::v1::SchedulingPolicy* out,
                       ParseInfoTree* tree) {
  google::protobuf::TextFormat::Parser parser;
  FirstError errors;
  parser.RecordErrorsTo(&errors);
  parser.WriteLocationsTo(tree);
  if (parser.ParseFromString(std::string(text), out)) return absl::OkStatus();
  if (errors.error().empty()) return source.Refuse(0, "not a pp.v1.SchedulingPolicy");
  return absl::InvalidArgumentError(absl::StrCat(source.name, ":", errors.error()));
}

bool ValidClassName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxClassNameLength) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
  });
}

std::string ClassList(const pp::v1::SchedulingPolicy& policy) {
  std::vector<std::string> names;
  for (const pp::v1::PriorityClass& c : policy.priority_class()) names.push_back(c.name());
  return absl::StrJoin(names, ", ");
}

// `what`, a figure of the policy at `line`: negative is refused (and NaN, which is no figure).
absl::Status NonNegative(const Source& source, int line, absl::string_view what, double value) {
  if (value >= 0) return absl::OkStatus();
  return source.Refuse(line, absl::StrCat(what, " is ", value, "; it must be 0 or more"));
}

absl::Status CheckClass(const Source& source, const pp::v1::SchedulingPolicy& policy, int index) {
  const pp::v1::PriorityClass& c = policy.priority_class(index);
  const FieldDescriptor* field = Field(policy, "priority_class");
  const std::string name = Quoted(c.name());
  if (!ValidClassName(c.name())) {
    return source.Refuse(ChildLine(source.tree, field, index, Field(c, "name")),
                         absl::StrCat("priority_class name ", name, " must be 1 to ",
                                      kMaxClassNameLength, " characters of a-z, 0-9 and -"));
  }
  for (int i = 0; i < index; ++i) {
    if (policy.priority_class(i).name() == c.name()) {
      return source.Refuse(ChildLine(source.tree, field, index, Field(c, "name")),
                           absl::StrCat("priority_class ", name, " is listed twice"));
    }
  }
  if (c.value() < 0 || c.value() > kMaxClassValue) {
    return source.Refuse(ChildLine(source.tree, field, index, Field(c, "value")),
                         absl::StrCat("priority_class ", name, ": value ", c.value(),
                                      " is outside 0..", kMaxClassValue));
  }
  for (int i = 0; i < c.allowed_size(); ++i) {
    if (!c.allowed(i).empty()) continue;
    return source.Refuse(ChildLine(source.tree, field, index, Field(c, "allowed"), i),
                         absl::StrCat("priority_class ", name, ": an allowed entry is empty"));
  }
  return absl::OkStatus();
}

absl::Status CheckDefaultClass(const Source& source, const pp::v1::SchedulingPolicy& policy) {
  const std::string& name = policy.default_class();
  const absl::string_view wanted = name.empty() ? kDefaultClassName : absl::string_view(name);
  for (const pp::v1::PriorityClass& c : policy.priority_class()) {
    if (c.name() == wanted) return absl::OkStatus();
  }
  if (name.empty()) {  // nothing in the text to point at but the classes
    return source.Refuse(LineOf(source.tree, Field(policy, "priority_class"), 0),
                         absl::StrCat("default_class is unset and no priority_class is named \"",
                                      kDefaultClassName, "\": name one of ", ClassList(policy)));
  }
  return source.Refuse(LineOf(source.tree, Field(policy, "default_class"), -1),
                       absl::StrCat("default_class ", Quoted(name),
                                    " is not a priority_class: ", ClassList(policy)));
}

absl::Status CheckQuota(const Source& source, const pp::v1::SchedulingPolicy& policy, int index) {
  const pp::v1::Quota& q = policy.quota(index);
  const FieldDescriptor* field = Field(policy, "quota");
  const std::string owner = Quoted(q.owner());
  for (int i = 0; i < index; ++i) {
    if (policy.quota(i).owner() == q.owner()) {
      return source.Refuse(ChildLine(source.tree, field, index, Field(q, "owner")),
                           absl::StrCat("quota owner ", owner, " is listed twice"));
    }
  }
  for (absl::string_view figure : {"max_workers", "max_queued_jobs"}) {
    const int value = figure == "max_workers" ? q.max_workers() : q.max_queued_jobs();
    const int line = ChildLine(source.tree, field, index, Field(q, figure));
    if (absl::Status s =
            NonNegative(source, line, absl::StrCat("quota ", owner, ": ", figure), value);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

// Each figure of the singular message field `parent` of `policy`, named "parent.figure".
absl::Status CheckFigures(const Source& source, const pp::v1::SchedulingPolicy& policy,
                          absl::string_view parent,
                          const std::vector<std::pair<absl::string_view, double>>& figures) {
  const FieldDescriptor* field = Field(policy, parent);
  const Message& message = policy.GetReflection()->GetMessage(policy, field);
  for (const auto& [name, value] : figures) {
    const int line = ChildLine(source.tree, field, -1, Field(message, name));
    if (absl::Status s = NonNegative(source, line, absl::StrCat(parent, ".", name), value);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status Check(const Source& source, const pp::v1::SchedulingPolicy& policy) {
  for (int i = 0; i < policy.priority_class_size(); ++i) {
    if (absl::Status s = CheckClass(source, policy, i); !s.ok()) return s;
  }
  if (absl::Status s = CheckDefaultClass(source, policy); !s.ok()) return s;
  for (int i = 0; i < policy.quota_size(); ++i) {
    if (absl::Status s = CheckQuota(source, policy, i); !s.ok()) return s;
  }
  const pp::v1::Aging& a = policy.aging();
  if (absl::Status s = CheckFigures(source, policy, "aging",
                                    {{"every_seconds", a.every_seconds()},
                                     {"step", a.step()},
                                     {"max_boost", a.max_boost()},
                                     {"reserve_after_seconds", a.reserve_after_seconds()}});
      !s.ok()) {
    return s;
  }
  const pp::v1::Preemption& p = policy.preemption();
  if (absl::Status s =
          CheckFigures(source, policy, "preemption",
                       {{"max_per_hour", p.max_per_hour()}, {"grace_seconds", p.grace_seconds()}});
      !s.ok()) {
    return s;
  }
  if (p.max_per_hour() <= kMaxPreemptionsPerHour) return absl::OkStatus();
  const FieldDescriptor* field = Field(policy, "preemption");
  const int line = ChildLine(source.tree, field, -1, Field(p, "max_per_hour"));
  return source.Refuse(line, absl::StrCat("preemption.max_per_hour is ", p.max_per_hour(),
                                          "; it must be at most ", kMaxPreemptionsPerHour));
}

pp::v1::Preemption WithDefaults(pp::v1::Preemption preemption) {
  if (preemption.max_per_hour() == 0) preemption.set_max_per_hour(kDefaultMaxPerHour);
  if (preemption.grace_seconds() == 0) preemption.set_grace_seconds(kDefaultGraceSeconds);
  return preemption;
}

}  // namespace

Policy Policy::Default() {
  // Parsed once: every reload of a policy without classes asks for its classes again.
  static const Policy* const policy =
      new Policy(Parse(kDefaultPolicy, "ppcoord's built-in policy").value());
  return *policy;
}

absl::StatusOr<Policy> Policy::Parse(absl::string_view text, absl::string_view source) {
  Policy policy;
  ParseInfoTree tree;
  const Source where{source, &tree};
  if (absl::Status s = ParseText(text, where, &policy.policy_, &tree); !s.ok()) return s;
  pp::v1::SchedulingPolicy& proto = policy.policy_;
  if (proto.priority_class().empty()) {
    *proto.mutable_priority_class() = Default().proto().priority_class();
  }
  if (absl::Status s = Check(where, proto); !s.ok()) return s;
  // What proto() shows is the policy in force: its classes and its default class spelled out.
  if (proto.default_class().empty()) proto.set_default_class(std::string(kDefaultClassName));
  policy.preemption_ = WithDefaults(proto.preemption());
  for (const pp::v1::PriorityClass& c : proto.priority_class()) policy.classes_[c.name()] = c;
  for (const pp::v1::Quota& q : proto.quota()) policy.quotas_[q.owner()] = q;
  return policy;
}

absl::StatusOr<Policy> Policy::Load(const std::string& path) {
  const std::string source = absl::StrCat("--policy=", path);
  absl::StatusOr<std::string> text = common::ReadFile(path, kMaxPolicyFileBytes);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": cannot read: ", text.status().message()));
  }
  return Parse(*text, source);
}

absl::StatusOr<int> Policy::PriorityOf(const std::string& name, const Caller& caller) const {
  const std::string class_name = ClassName(name);
  auto it = classes_.find(class_name);
  if (it == classes_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("priority ", Quoted(class_name),
                     " is not a class of ppcoord's policy: ", ClassList(policy_)));
  }
  const pp::v1::PriorityClass& c = it->second;
  if (caller.role == Role::kAdmin || c.allowed().empty()) return c.value();
  for (const std::string& allowed : c.allowed()) {
    if (allowed == RoleName(caller.role) || allowed == caller.name) return c.value();
  }
  return absl::PermissionDeniedError(
      absl::StrCat("priority ", Quoted(class_name), " is for ",
                   absl::CHexEscape(absl::StrJoin(c.allowed(), ", ")), " (and admins); caller ",
                   Quoted(caller.name), " (role ", RoleName(caller.role), ") may not use it"));
}

std::string Policy::ClassName(const std::string& name) const {
  return name.empty() ? policy_.default_class() : name;
}

const pp::v1::Quota* Policy::QuotaOf(const std::string& owner) const {
  auto it = quotas_.find(owner);
  if (it == quotas_.end()) it = quotas_.find("*");
  return it == quotas_.end() ? nullptr : &it->second;
}

}  // namespace pp::coordinator
