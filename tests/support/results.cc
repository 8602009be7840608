#include "tests/support/results.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/checkpoint.h"
#include "common/job_spec.h"
#include "coordinator/store.h"

namespace pp::testing_support {

pp::v1::JobSpec SingleProcessSpec(const pp::v1::JobSpec& spec) {
  pp::v1::JobSpec single = spec;
  single.mutable_train()->set_microbatches(spec.train().microbatches() *
                                           std::max(1, spec.parallel().data()));
  single.mutable_parallel()->set_data(1);
  single.mutable_parallel()->set_tensor(1);
  single.mutable_parallel()->set_pipeline(1);
  common::ApplyDefaults(&single);
  return single;
}

absl::StatusOr<std::map<std::string, std::vector<float>>> CheckpointValues(const std::string& root,
                                                                           const std::string& job,
                                                                           int step) {
  absl::StatusOr<common::Checkpoint> checkpoint =
      common::LoadCheckpoint(common::StepDir(root, job, step));
  if (!checkpoint.ok()) return checkpoint.status();
  std::map<std::string, std::vector<float>> values;
  for (auto& [name, tensor] : checkpoint->tensors) values[name] = std::move(tensor.data);
  return values;
}

absl::StatusOr<std::vector<double>> StoredLosses(const std::string& data_dir,
                                                 const std::string& job) {
  absl::StatusOr<std::unique_ptr<coordinator::JobStore>> store =
      coordinator::JobStore::Open(data_dir + "/ppcoord.db");
  if (!store.ok()) return store.status();
  absl::StatusOr<std::vector<pp::v1::JobStepRecord>> steps = (*store)->Steps(job);
  if (!steps.ok()) return steps.status();
  std::vector<double> losses;
  for (const pp::v1::JobStepRecord& s : *steps) {
    if (s.step() != static_cast<int>(losses.size()) + 1) {
      return absl::DataLossError(absl::StrCat("job ", job, ": step ", s.step(), " stored after ",
                                              losses.size(), " steps"));
    }
    losses.push_back(s.loss());
  }
  return losses;
}

absl::Status SameBits(const std::string& data_dir, const std::string& root, const std::string& a,
                      const std::string& b, int step) {
  absl::StatusOr<std::vector<double>> losses[2] = {StoredLosses(data_dir, a),
                                                   StoredLosses(data_dir, b)};
  absl::StatusOr<std::map<std::string, std::vector<float>>> values[2] = {
      CheckpointValues(root, a, step), CheckpointValues(root, b, step)};
  for (int i = 0; i < 2; ++i) {
    if (!losses[i].ok()) return losses[i].status();
    if (!values[i].ok()) return values[i].status();
  }
  if (*losses[0] != *losses[1]) {
    return absl::InternalError(absl::StrCat(a, " and ", b, " stored different losses"));
  }
  if (values[0]->size() != values[1]->size()) {
    return absl::InternalError(absl::StrCat(a, " and ", b, " hold different tensor counts"));
  }
  for (const auto& [name, tensor] : *values[0]) {
    auto other = values[1]->find(name);
    if (other == values[1]->end() || other->second.size() != tensor.size() ||
        std::memcmp(tensor.data(), other->second.data(), tensor.size() * sizeof(float)) != 0) {
      return absl::InternalError(absl::StrCat(name, " differs between ", a, " and ", b));
    }
  }
  return absl::OkStatus();
}

}  // namespace pp::testing_support
