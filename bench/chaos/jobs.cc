#include "bench/chaos/jobs.h"

#include <cstring>
#include <fstream>
#include <map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "google/protobuf/text_format.h"
#include "tests/support/results.h"
#include "worker/data/data.h"
#include "worker/trainer/trainer.h"

namespace pp::chaos {
namespace {

constexpr char kSpec[] = R"pb(
  name: "chaos"
  model { vocab_size: 256 seq_len: 32 d_model: 64 n_heads: 4 n_layers: 4 }
  parallel { pipeline: 2 chunks: 1 schedule: "1f1b" }
  train { microbatches: 4 microbatch_size: 4 lr: 1e-3 weight_decay: 0.1 grad_clip: 0.5 }
  checkpoint { keep: 3 }
  max_restarts: 100
)pb";

// The reference trainer's weights for `spec` on one process, fed the same microbatches.
const std::map<std::string, std::vector<float>>* Reference(const pp::v1::JobSpec& spec,
                                                           std::string* error) {
  static auto* cache = new std::map<std::string, trainer::TrainResult>();
  const pp::v1::JobSpec single = testing_support::SingleProcessSpec(spec);
  const std::string key = single.SerializeAsString();
  auto it = cache->find(key);
  if (it == cache->end()) {
    absl::StatusOr<trainer::TrainResult> result = trainer::Train(single, {});
    if (!result.ok()) {
      *error = absl::StrCat("reference run: ", result.status().ToString());
      return nullptr;
    }
    it = cache->emplace(key, *std::move(result)).first;
  }
  return &it->second.weights;
}

}  // namespace

pp::v1::JobSpec TrainSpec(const std::string& corpus, uint64_t seed, int steps,
                          int checkpoint_every) {
  pp::v1::JobSpec spec;
  google::protobuf::TextFormat::ParseFromString(kSpec, &spec);
  spec.mutable_data()->set_path(corpus);
  spec.mutable_train()->set_seed(seed);
  spec.mutable_train()->set_steps(steps);
  spec.mutable_checkpoint()->set_every_steps(checkpoint_every);
  return spec;
}

void WriteCorpus(const std::string& path, int64_t bytes) {
  std::ofstream(path) << data::GenerateCorpus(/*seed=*/11, bytes);
}

bool FinalWeightsBitwise(const std::string& checkpoint_root, const std::string& job_id,
                         const pp::v1::JobSpec& spec, std::string* detail) {
  const std::map<std::string, std::vector<float>>* want = Reference(spec, detail);
  if (want == nullptr) return false;
  absl::StatusOr<std::map<std::string, std::vector<float>>> got =
      testing_support::CheckpointValues(checkpoint_root, job_id, spec.train().steps());
  if (!got.ok()) {
    *detail = got.status().ToString();
    return false;
  }
  for (const auto& [name, values] : *want) {
    auto it = got->find(name);
    if (it == got->end() || it->second.size() != values.size()) {
      *detail = absl::StrCat(name, " missing or of another size");
      return false;
    }
    if (std::memcmp(it->second.data(), values.data(), values.size() * sizeof(float)) != 0) {
      *detail = absl::StrCat(name, " differs");
      return false;
    }
  }
  return true;
}

}  // namespace pp::chaos
