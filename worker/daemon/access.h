// What pp.v1.Worker lets through (ppworker's side of docs/security.md): tasks only from the
// coordinator, and only naming files under the allowed folders.
// Contract:
// - CheckCallerIs: OK when the common name of the call's verified client certificate (its one
//   identity, common/tls.h) is `coordinator`; PERMISSION_DENIED naming the method, the expected
//   name and the caller's otherwise, also while `coordinator` is still unknown (empty). A
//   certificate `deny` lists (null: none) is UNAUTHENTICATED first.
// - CheckPlanPaths: the plan's job_id (CheckJobId, task.h), its data.path under one of `data_roots`, its
//   checkpoint_dir and resume_from under one of `checkpoint_roots` (common/path_roots.h);
//   INVALID_ARGUMENT naming the field, the path and the roots otherwise. Empty roots allow
//   anything.
// - CheckSpecPaths: the spec's input files (data.path, eval.data.path, model.init_from) under one
//   of `data_roots`, as CheckPlanPaths checks a plan's; `what` starts the error ("calibrate
//   request").
// Thread-safe: pure functions of their inputs (the deny-list locks itself).
#ifndef PP_WORKER_DAEMON_ACCESS_H_
#define PP_WORKER_DAEMON_ACCESS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/cert_deny_list.h"
#include "grpcpp/server_context.h"
#include "pp/v1/worker.pb.h"

namespace pp::daemon {

absl::Status CheckCallerIs(const grpc::ServerContext& context, const std::string& coordinator,
                           absl::string_view method, const common::CertDenyList* deny);

absl::Status CheckSpecPaths(const pp::v1::JobSpec& spec,
                            const std::vector<std::string>& data_roots, absl::string_view what);

absl::Status CheckPlanPaths(const pp::v1::TaskPlan& plan,
                            const std::vector<std::string>& data_roots,
                            const std::vector<std::string>& checkpoint_roots);

}  // namespace pp::daemon

#endif  // PP_WORKER_DAEMON_ACCESS_H_
