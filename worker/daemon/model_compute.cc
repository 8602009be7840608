#include "worker/daemon/model_compute.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/checkpoint.h"

namespace pp::daemon {

absl::StatusOr<std::unique_ptr<ModelCompute>> ModelCompute::Create(const pp::v1::TaskPlan& plan,
                                                                   const std::string& device) {
  const pp::v1::JobSpec& spec = plan.spec();
  absl::StatusOr<model::ModelConfig> config = model::ModelConfigFromSpec(spec.model());
  if (!config.ok()) return config.status();
  if (plan.stages_size() == 0) return absl::InvalidArgumentError("task plan holds no stages");
  std::unique_ptr<ModelCompute> compute(new ModelCompute());
  compute->microbatches_ = spec.train().microbatches();
  compute->batch_ = spec.train().microbatch_size();
  compute->seq_len_ = config->seq_len;
  compute->adamw_ = optim::AdamWConfigFromSpec(spec.train());
  absl::StatusOr<std::unique_ptr<kernels::Ops>> ops =
      kernels::MakeOps(device, std::max(1, spec.train().threads()));
  if (!ops.ok()) return ops.status();
  compute->ops_ = std::move(*ops);
  for (const pp::v1::StageLayers& layers : plan.stages()) {
    if (compute->stages_.count(layers.stage()) > 0) {
      return absl::InvalidArgumentError(absl::StrCat("stage ", layers.stage(), " listed twice"));
    }
    model::StageOptions options;
    options.first_unit = layers.first_unit();
    options.last_unit = layers.last_unit();
    options.microbatch_size = compute->batch_;
    options.microbatches = compute->microbatches_;
    options.seed = spec.train().seed();
    absl::StatusOr<std::unique_ptr<model::StageModel>> stage =
        model::StageModel::Create(compute->ops_.get(), *config, options);
    if (!stage.ok()) {
      return absl::Status(stage.status().code(), absl::StrCat("stage ", layers.stage(), ": ",
                                                              stage.status().message()));
    }
    compute->stages_[layers.stage()] = std::move(*stage);
  }
  absl::StatusOr<data::TokenSource> source = data::TokenSource::Open(spec.data());
  if (!source.ok()) return source.status();
  compute->source_.emplace(std::move(*source));
  return compute;
}

ModelCompute::~ModelCompute() {
  stages_.clear();  // before the ops they allocated from
}

absl::StatusOr<model::StageModel*> ModelCompute::Stage(int stage) const {
  auto it = stages_.find(stage);
  if (it == stages_.end()) {
    return absl::InvalidArgumentError(absl::StrCat("stage ", stage, " is not held here"));
  }
  return it->second.get();
}

size_t ModelCompute::InputSize(int stage) const {
  auto it = stages_.find(stage);
  return it == stages_.end() ? 0 : it->second->activation_size();
}

size_t ModelCompute::OutputSize(int stage) const { return InputSize(stage); }

float* ModelCompute::AllocBuffer(size_t n) { return ops_->Alloc(n); }

void ModelCompute::FreeBuffer(float* buffer) { ops_->Free(buffer); }

absl::Status ModelCompute::BeginStep(int step) {
  for (auto& [s, stage] : stages_) stage->ZeroGrads();
  position_ = data::DataPositionAtStep(step, microbatches_, batch_);
  return absl::OkStatus();
}

absl::StatusOr<double> ModelCompute::Forward(int stage, int mb, const float* in, float* out) {
  absl::StatusOr<model::StageModel*> model = Stage(stage);
  if (!model.ok()) return model.status();
  model::StageInput input;
  absl::StatusOr<data::Microbatch> batch;
  if ((*model)->has_embedding() || (*model)->has_head()) {
    batch = data::ReadMicrobatch(*source_, position_, mb, batch_, seq_len_);
    if (!batch.ok()) return batch.status();
    if ((*model)->has_embedding()) input.tokens = batch->inputs.data();
    if ((*model)->has_head()) input.targets = batch->targets.data();
  }
  if (!(*model)->has_embedding()) input.activations = in;
  return (*model)->Forward(mb, input, out);
}

absl::Status ModelCompute::Backward(int stage, int mb, const float* grad_out, float* grad_in) {
  absl::StatusOr<model::StageModel*> model = Stage(stage);
  if (!model.ok()) return model.status();
  return (*model)->Backward(mb, grad_out, grad_in);
}

absl::Status ModelCompute::BackwardInput(int stage, int mb, const float* grad_out,
                                         float* grad_in) {
  absl::StatusOr<model::StageModel*> model = Stage(stage);
  if (!model.ok()) return model.status();
  return (*model)->BackwardInput(mb, grad_out, grad_in);
}

absl::Status ModelCompute::BackwardWeight(int stage, int mb) {
  absl::StatusOr<model::StageModel*> model = Stage(stage);
  if (!model.ok()) return model.status();
  return (*model)->BackwardWeight(mb);
}

std::vector<executor::TensorSumSq> ModelCompute::GradSumSquares() {
  std::vector<executor::TensorSumSq> sums;
  for (auto& [s, stage] : stages_) {
    for (const auto& [name, sum] : optim::GradSumSquares(*ops_, stage->tensors())) {
      sums.push_back({name, sum});
    }
  }
  return sums;
}

absl::StatusOr<float> ModelCompute::ClipScale(const std::vector<executor::TensorSumSq>& all) {
  optim::SumSquares merged;
  for (const executor::TensorSumSq& t : all) {
    if (absl::Status s = optim::MergeSumSquares({{t.name, t.sum_sq}}, merged); !s.ok()) return s;
  }
  return optim::ClipScale(optim::GlobalNorm(merged), adamw_.grad_clip);
}

absl::Status ModelCompute::OptimizerStep(int step, float clip_scale) {
  // AdamW steps are 1-based, as in the reference trainer.
  for (auto& [s, stage] : stages_) {
    optim::ApplyAdamW(*ops_, stage->tensors(), adamw_, step + 1, clip_scale);
  }
  return absl::OkStatus();
}

int64_t ModelCompute::LiveActivationBytes() const {
  int64_t bytes = 0;
  for (auto& [s, stage] : stages_) bytes += stage->live_activation_bytes();
  return bytes;
}

std::vector<common::Tensor> ModelCompute::CheckpointTensors() {
  std::vector<common::Tensor> tensors;
  auto add = [&](const std::string& name, const model::ModelTensor& t, const float* src) {
    common::Tensor out;
    out.name = name;
    out.shape.assign(t.shape.begin(), t.shape.end());
    out.data.resize(t.size);
    ops_->CopyToHost(out.data.data(), src, t.size);
    tensors.push_back(std::move(out));
  };
  for (auto& [s, stage] : stages_) {
    for (const model::ModelTensor& t : stage->tensors()) {
      add(t.name, t, t.value);
      add(common::ExpAvgName(t.name), t, t.exp_avg);
      add(common::ExpAvgSqName(t.name), t, t.exp_avg_sq);
    }
  }
  return tensors;
}

absl::Status ModelCompute::LoadCheckpointTensors(
    const std::map<std::string, common::Tensor>& tensors) {
  auto load = [&](const std::string& name, const model::ModelTensor& t, float* dst) {
    auto it = tensors.find(name);
    if (it == tensors.end()) {
      return absl::NotFoundError(absl::StrCat("checkpoint has no tensor ", name));
    }
    if (it->second.data.size() != t.size) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint tensor ", name, " has ",
                                                     it->second.data.size(), " values, want ",
                                                     t.size));
    }
    ops_->CopyToDevice(dst, it->second.data.data(), t.size);
    return absl::OkStatus();
  };
  for (auto& [s, stage] : stages_) {
    for (const model::ModelTensor& t : stage->tensors()) {
      if (absl::Status st = load(t.name, t, t.value); !st.ok()) return st;
      if (absl::Status st = load(common::ExpAvgName(t.name), t, t.exp_avg); !st.ok()) return st;
      if (absl::Status st = load(common::ExpAvgSqName(t.name), t, t.exp_avg_sq); !st.ok()) {
        return st;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace pp::daemon
