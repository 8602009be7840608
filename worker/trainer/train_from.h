// The reference trainer started from given weights instead of the seeded initialisation: how
// `ppctl import HF_DIR --job=SPEC` fine-tunes a Hugging Face GPT-2 (common/hf_gpt2.h).
//
// Contract: exactly Train (worker/trainer/trainer.h) except that the model's values at step 0
// are `init`'s (by tensor name, whole tensors; every tensor of the spec's model must be there
// with its size, extra ones such as optimizer moments are ignored) and the AdamW moments start at
// zero. With train.lr 0 the weights stay the same bits, so a checkpoint of such a run holds
// `init` exactly. Same threading as Train.
#ifndef PP_WORKER_TRAINER_TRAIN_FROM_H_
#define PP_WORKER_TRAINER_TRAIN_FROM_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "common/safetensors.h"
#include "pp/v1/job.pb.h"
#include "worker/trainer/trainer.h"

namespace pp::trainer {

using InitialWeights = std::map<std::string, common::Tensor>;

// `spec` must have defaults applied and be valid (common/job_spec.h).
absl::StatusOr<TrainResult> TrainFrom(const pp::v1::JobSpec& spec, const TrainOptions& options,
                                      const InitialWeights& init);

}  // namespace pp::trainer

#endif  // PP_WORKER_TRAINER_TRAIN_FROM_H_
