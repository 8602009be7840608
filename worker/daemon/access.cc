#include "worker/daemon/access.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/path_roots.h"
#include "common/tls.h"
#include "worker/daemon/task.h"

namespace pp::daemon {

absl::Status CheckCallerIs(const grpc::ServerContext& context, const std::string& coordinator,
                           absl::string_view method, const common::CertDenyList* deny) {
  const std::string where = absl::StrCat("pp.v1.Worker/", method);
  const std::optional<common::PeerCert> peer = common::VerifiedPeer(context);
  if (peer.has_value() && deny != nullptr) {
    if (absl::Status denied = deny->Check(*peer, where); !denied.ok()) return denied;
  }
  if (coordinator.empty()) {
    return absl::PermissionDeniedError(
        absl::StrCat(where, ": this worker has not learnt the coordinator's identity yet"));
  }
  if (peer.has_value() && peer->name == coordinator) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat(where, ": only the coordinator (", coordinator,
                   ") may call this; the caller is ", peer.has_value() ? peer->name : "anonymous"));
}

absl::Status CheckSpecPaths(const pp::v1::JobSpec& spec,
                            const std::vector<std::string>& data_roots, absl::string_view what) {
  for (const auto& [field, path] : common::SpecInputPaths(spec)) {
    absl::Status s =
        common::CheckUnderRoots(absl::StrCat(what, " ", field), path, data_roots, "data_root");
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status CheckPlanPaths(const pp::v1::TaskPlan& plan,
                            const std::vector<std::string>& data_roots,
                            const std::vector<std::string>& checkpoint_roots) {
  if (absl::Status s = CheckJobId(plan.job_id()); !s.ok()) return s;
  if (absl::Status s = CheckSpecPaths(plan.spec(), data_roots, "task plan"); !s.ok()) return s;
  if (absl::Status s = common::CheckUnderRoots("task plan checkpoint_dir", plan.checkpoint_dir(),
                                               checkpoint_roots, "checkpoint_root");
      !s.ok()) {
    return s;
  }
  if (plan.resume_from().empty()) return absl::OkStatus();
  return common::CheckUnderRoots("task plan resume_from", plan.resume_from(), checkpoint_roots,
                                 "checkpoint_root");
}

}  // namespace pp::daemon
