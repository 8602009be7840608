#include "client/up_spec.h"

#include <unistd.h>

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/data_spec.h"
#include "common/job_spec.h"

namespace pp::client {
namespace {

constexpr char kDefaultCorpus[] = "/usr/share/common-licenses/GPL-3";

}  // namespace

// A byte-level model learns the letters and the common words of the licence.
pp::v1::JobSpec DefaultUpSpec(int workers) {
  pp::v1::JobSpec spec;
  spec.set_name("up");
  pp::v1::ModelSpec* model = spec.mutable_model();
  model->set_vocab_size(256);
  model->set_seq_len(128);
  model->set_d_model(128);
  model->set_n_heads(4);
  model->set_n_layers(std::max(4, workers));
  pp::v1::ParallelSpec* parallel = spec.mutable_parallel();
  parallel->set_pipeline(workers);
  parallel->set_schedule("1f1b");
  pp::v1::TrainSpec* train = spec.mutable_train();
  train->set_steps(300);
  train->set_microbatches(std::max(8, 2 * workers));
  train->set_microbatch_size(4);
  train->set_lr(2e-3);
  train->set_warmup_steps(30);
  train->set_decay("cosine");
  train->set_min_lr(2e-4);
  train->set_weight_decay(0.1);
  train->set_grad_clip(1.0);
  train->set_seed(1);
  pp::v1::DataSpec* data = spec.mutable_data();
  if (access(kDefaultCorpus, R_OK) == 0) {
    data->set_path(kDefaultCorpus);
  } else {
    data->set_format("generated");  // text-like bytes, so the loss still falls
  }
  spec.mutable_checkpoint()->set_every_steps(100);
  spec.mutable_checkpoint()->set_keep(2);
  // A tenth of the text is never trained on; its loss shows whether the model generalises.
  spec.mutable_eval()->set_every_steps(100);
  spec.mutable_eval()->set_batches(2);
  spec.mutable_eval()->set_holdout_fraction(0.1);
  return spec;
}

absl::StatusOr<pp::v1::JobSpec> LoadUpSpec(const std::string& path, int workers) {
  const std::string origin = path.empty() ? "the default job" : path;
  pp::v1::JobSpec spec;
  if (path.empty()) {
    spec = DefaultUpSpec(workers);
  } else {
    absl::StatusOr<pp::v1::JobSpec> loaded = pp::common::LoadJobSpec(path);
    if (!loaded.ok()) return loaded.status();
    spec = *std::move(loaded);
  }
  pp::common::AbsoluteDataPaths(&spec);  // the daemons run elsewhere: give them absolute paths
  pp::v1::JobSpec defaulted = spec;
  pp::common::ApplyDefaults(&defaulted);
  if (absl::Status valid = pp::common::ValidateJobSpec(defaulted); !valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": ", valid.message()));
  }
  const pp::v1::ParallelSpec& p = defaulted.parallel();
  const int needed = p.pipeline() * p.tensor() * p.data();
  if (needed > workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        origin, " needs ", needed, " workers (parallel.pipeline x tensor x data = ", p.pipeline(),
        " x ", p.tensor(), " x ", p.data(), ") but --workers=", workers));
  }
  return spec;
}

}  // namespace pp::client
