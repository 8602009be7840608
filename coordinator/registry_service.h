// ppcoord's WorkerRegistry service (internal): the gRPC adapter of worker registration,
// heartbeats, step/task/checkpoint reports and the rendezvous store over JobManager.
// Contract: every call is checked by Authorizer::AuthorizeWorker first; under TLS a report on a
// rank of a live attempt is taken only from the worker placed on that rank, and a rendezvous key
// only from the workers of its job's live attempt (kv_access.h). Errors count per method
// (CoordinatorMetrics::RpcError).
// Thread-safe: gRPC calls it from many threads; JobManager locks itself.
#ifndef PP_COORDINATOR_REGISTRY_SERVICE_H_
#define PP_COORDINATOR_REGISTRY_SERVICE_H_

#include <memory>

#include "coordinator/auth.h"
#include "coordinator/jobs.h"
#include "coordinator/metrics.h"
#include "pp/v1/coordinator.grpc.pb.h"

namespace pp::coordinator {

// REQUIRES: jobs, metrics and auth outlive the service.
std::unique_ptr<pp::v1::WorkerRegistry::Service> NewRegistryService(JobManager* jobs,
                                                                    CoordinatorMetrics* metrics,
                                                                    const Authorizer* auth);

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_REGISTRY_SERVICE_H_
