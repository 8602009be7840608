// ModelCompute::Rehearse (model_compute.h): every held stage's forward and backward on zeros,
// at each shape a step may use, before the pipeline connects.
#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/packing.h"
#include "worker/compute/model_compute.h"

namespace pp::compute {

std::vector<ModelCompute::Rehearsal> ModelCompute::Rehearsals() const {
  std::vector<Rehearsal> out;
  if (!packed()) {
    Rehearsal& r = out.emplace_back();
    r.tokens.assign(static_cast<size_t>(batch_) * seq_len_, 0);
    r.doc_start = data::DocumentStarts(data::Microbatch{batch_, seq_len_, r.tokens, r.tokens, {}},
                                       end_of_text_);
    return out;
  }
  for (int64_t n = train_.tokens_per_microbatch(); n >= 1; n /= 2) {
    Rehearsal& r = out.emplace_back();
    r.tokens.assign(static_cast<size_t>(n), 0);
    // No token is the end of text 1 here: pieces of min(seq_len, n) tokens.
    r.sequences =
        common::RowSequences(r.tokens.data(), n, /*end_of_text=*/1, std::min<int64_t>(seq_len_, n));
  }
  return out;
}

absl::Status ModelCompute::RehearseStage(model::StageModel& stage, const Rehearsal& r) {
  const size_t n = stage.activation_size();
  float* in = ops_->Alloc(n);  // zero-filled
  float* out = ops_->Alloc(n);
  float* grad_out = ops_->Alloc(n);
  float* grad_in = ops_->Alloc(n);
  model::StageInput input;
  input.tokens = r.tokens.data();
  input.targets = r.tokens.data();
  input.activations = in;
  input.doc_start = r.doc_start.empty() ? nullptr : r.doc_start.data();
  if (!r.sequences.empty()) {
    input.sequences = r.sequences.data();
    input.num_sequences = static_cast<int>(r.sequences.size()) - 1;
    input.step_tokens = static_cast<int64_t>(r.tokens.size());
  }
  // The microbatch index only names the saved activations, released by the backward.
  const int mb = first_microbatch_;
  absl::Status status = absl::OkStatus();
  for (const bool split : {false, true}) {
    if (!status.ok()) break;
    status = stage.Forward(mb, input, out).status();
    if (!status.ok()) break;
    if (!split) {
      status = stage.Backward(mb, grad_out, grad_in);
    } else {
      status = stage.BackwardInput(mb, grad_out, grad_in);
      if (status.ok()) status = stage.BackwardWeight(mb);
    }
  }
  ops_->Synchronize();
  for (float* buffer : {in, out, grad_out, grad_in}) ops_->Free(buffer);
  stage.ZeroGrads();
  return status;
}

absl::Status ModelCompute::Rehearse() {
  const std::vector<Rehearsal> rehearsals = Rehearsals();
  for (auto& [s, stage] : stages_) {
    for (const Rehearsal& r : rehearsals) {
      if (absl::Status status = RehearseStage(*stage, r); !status.ok()) {
        return absl::Status(status.code(),
                            absl::StrCat("rehearsing stage ", s, ": ", status.message()));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace pp::compute
