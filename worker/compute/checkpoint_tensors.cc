// ModelCompute's tensors in and out: loading whole named tensors into the held stages, from a
// checkpoint (values and AdamW moments) or from model.init_from's folder (values only), and the
// held tensors as a checkpoint shard or a digest. model_compute.h has the contract.
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint.h"
#include "common/sha256.h"
#include "common/tensor_slice.h"
#include "worker/compute/model_compute.h"

namespace pp::compute {

std::set<std::string> ModelCompute::CheckpointTensorNames() const {
  std::set<std::string> names;
  for (const auto& [s, stage] : stages_) {
    for (const model::ModelTensor& t : stage->tensors()) {
      names.insert({t.name, common::ExpAvgName(t.name), common::ExpAvgSqName(t.name)});
    }
  }
  return names;
}

namespace {

// The whole tensor `name` of `tensors` into `dst`, `t`'s slice of it; `what` names the source in
// errors ("checkpoint", "model.init_from").
absl::Status LoadWhole(kernels::Ops& ops, const std::map<std::string, common::Tensor>& tensors,
                       const std::string& name, const model::ModelTensor& t, float* dst,
                       absl::string_view what) {
  auto it = tensors.find(name);
  if (it == tensors.end()) return absl::NotFoundError(absl::StrCat(what, " has no tensor ", name));
  const model::TensorShape full{name, t.full_shape};
  if (it->second.data.size() != full.size()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " tensor ", name, " has ",
                                                   it->second.data.size(), " values, want ",
                                                   full.size()));
  }
  if (common::IsWhole(t.slice, t.full_shape)) {
    ops.CopyToDevice(dst, it->second.data.data(), t.size);
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<float>> slice =
      common::CutSlice(t.full_shape, t.slice, it->second.data);
  if (!slice.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", slice.status().message()));
  }
  ops.CopyToDevice(dst, slice->data(), t.size);
  return absl::OkStatus();
}

}  // namespace

// Both load whole tensors by name; a tensor-parallel rank cuts out the slice it holds.
absl::Status ModelCompute::LoadCheckpointTensors(
    const std::map<std::string, common::Tensor>& tensors) {
  return LoadHeld(tensors, /*with_moments=*/true, "checkpoint");
}

absl::Status ModelCompute::LoadInitialValues(
    const std::map<std::string, common::Tensor>& tensors) {
  return LoadHeld(tensors, /*with_moments=*/false, "model.init_from");
}

absl::Status ModelCompute::LoadHeld(const std::map<std::string, common::Tensor>& tensors,
                                    bool with_moments, absl::string_view what) {
  for (auto& [s, stage] : stages_) {
    for (const model::ModelTensor& t : stage->tensors()) {
      std::vector<std::pair<std::string, float*>> targets = {{t.name, t.value}};
      if (with_moments) {
        targets.insert(targets.end(), {{common::ExpAvgName(t.name), t.exp_avg},
                                       {common::ExpAvgSqName(t.name), t.exp_avg_sq}});
      }
      for (const auto& [name, dst] : targets) {
        if (absl::Status st = LoadWhole(*ops_, tensors, name, t, dst, what); !st.ok()) return st;
      }
    }
  }
  return absl::OkStatus();
}

std::string ModelCompute::StateDigest() {
  std::string bytes;
  for (const common::Tensor& t : HeldTensors()) {
    bytes.append(t.name);
    bytes.append(reinterpret_cast<const char*>(t.data.data()), t.data.size() * sizeof(float));
  }
  return common::Sha256Hex(bytes);
}

ModelCompute::ShardContents ModelCompute::CheckpointShard() {
  ShardContents shard;
  // Replicas hold the same tensors: replica 0 writes each once, and of a tensor-parallel group
  // every rank its slices but only TP rank 0 the replicated tensors.
  if (data_group_ != nullptr && data_group_->rank() > 0) return shard;
  const bool tp_follower = tensor_group_ != nullptr && tensor_group_->rank() > 0;
  std::map<std::string, std::string> slice_of;  // held sliced tensor -> its encoded slice
  for (auto& [s, stage] : stages_) {
    for (const model::ModelTensor& t : stage->tensors()) {
      if (common::IsWhole(t.slice, t.full_shape)) continue;
      common::ShardSlice slice{t.slice, {t.full_shape.begin(), t.full_shape.end()}};
      const std::string encoded = common::EncodeSlice(slice);
      for (const std::string& name :
           {t.name, common::ExpAvgName(t.name), common::ExpAvgSqName(t.name)}) {
        slice_of[name] = encoded;
      }
    }
  }
  for (common::Tensor& tensor : HeldTensors()) {
    auto it = slice_of.find(tensor.name);
    if (it != slice_of.end()) {
      shard.metadata[common::SliceKey(tensor.name)] = it->second;
    } else if (tp_follower) {
      continue;
    }
    shard.tensors.push_back(std::move(tensor));
  }
  return shard;
}

std::vector<common::Tensor> ModelCompute::HeldTensors() {
  std::vector<common::Tensor> tensors;
  for (auto& [s, stage] : stages_) {
    for (common::Tensor& t : model::HostTensors(*ops_, stage->tensors())) {
      tensors.push_back(std::move(t));
    }
  }
  return tensors;
}

}  // namespace pp::compute
