// ppcoord's scheduling policy (internal): priority classes and who may use them, per-owner
// quotas, aging and preemption settings, read from a pp.v1.SchedulingPolicy in proto text format
// (ppcoord --policy=FILE, reloaded on SIGHUP; docs/jobs.md "Priorities, quotas and preemption").
//
// Contract:
// - Parse/Load refuse a bad file with one line naming the source and the line: a syntax error
//   ("--policy=/etc/pp/policy.txt:7:3: Expected identifier, got: 9") or a bad value ("...:12:
//   priority_class \"high\" is listed twice"): duplicate class names or quota owners, a class
//   name outside [a-z0-9-]{1,40}, a value outside 0..1000000, a default_class not listed, an
//   allowed entry that is empty, a negative quota, aging or preemption figure, a
//   preemption.max_per_hour above kMaxPreemptionsPerHour.
// - Without a file ppcoord uses Default(): classes low 0, normal 100, high 200, default normal,
//   everyone may use each; no quotas; aging +5 per 60 s up to +100, reserve after 900 s;
//   preemption on, 4 per hour per job, grace 120 s.
// - A policy without priority_class entries gets Default()'s classes; its other parts are its own
//   (no aging when it sets none, and so on), but zero preemption figures mean their defaults.
//
// Threading: immutable after construction; share it as std::shared_ptr<const Policy>.
#ifndef PP_COORDINATOR_POLICY_H_
#define PP_COORDINATOR_POLICY_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "coordinator/auth.h"
#include "pp/v1/policy.pb.h"

namespace pp::coordinator {

// The most preemptions per hour a policy may allow one job: a job keeps the times of its newest
// this many preemptions (Job.preempted_unix), which is what the bound counts.
inline constexpr int kMaxPreemptionsPerHour = 16;

class Policy {
 public:
  static Policy Default();
  // `source` names the text in errors ("--policy=/etc/pp/policy.txt").
  static absl::StatusOr<Policy> Parse(absl::string_view text, absl::string_view source);
  static absl::StatusOr<Policy> Load(const std::string& path);

  // The value of the class `name` (empty: the default class) for `caller`. InvalidArgument naming
  // the classes when there is no such class ("priority \"urgent\" is not a class of ppcoord's
  // policy: low, normal, high"); PermissionDenied naming the caller when the class's `allowed`
  // lists neither the caller's role nor its name (admins may use every class).
  absl::StatusOr<int> PriorityOf(const std::string& name, const Caller& caller) const;
  // The class name a spec's priority stands for: `name`, or the default class when empty. For
  // labels and messages.
  std::string ClassName(const std::string& name) const;

  // The quota of `owner`: its own entry, else the "*" entry, else nullptr (no limit). Valid as
  // long as this Policy.
  const pp::v1::Quota* QuotaOf(const std::string& owner) const;

  const pp::v1::Aging& aging() const { return policy_.aging(); }
  // With the defaults filled in for zero figures (max_per_hour 4, grace_seconds 120).
  const pp::v1::Preemption& preemption() const { return preemption_; }
  const pp::v1::SchedulingPolicy& proto() const { return policy_; }

 private:
  pp::v1::SchedulingPolicy policy_;
  pp::v1::Preemption preemption_;
  std::map<std::string, pp::v1::PriorityClass> classes_;  // by name
  std::map<std::string, pp::v1::Quota> quotas_;           // by owner
};

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_POLICY_H_
