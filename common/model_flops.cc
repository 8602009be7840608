#include "common/model_flops.h"

namespace pp::common {

double MatmulParameters(const pp::v1::ModelSpec& model) {
  const double C = model.d_model();
  const double per_block = 3 * C * C + C * C + 4 * C * C + 4 * C * C;  // qkv, proj, fc, mlp proj
  const double lm_head = static_cast<double>(model.vocab_size()) * C;
  return model.n_layers() * per_block + lm_head;
}

double TrainFlopsPerToken(const pp::v1::ModelSpec& model) {
  const double attention =
      12.0 * model.n_layers() * static_cast<double>(model.seq_len()) * model.d_model();
  return 6 * MatmulParameters(model) + attention;
}

}  // namespace pp::common
