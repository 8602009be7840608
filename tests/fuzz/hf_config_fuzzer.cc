// libFuzzer harness: common/hf_gpt2.h ParseHfGpt2Config (a Hugging Face config.json) on arbitrary
// bytes. A config that parses describes a model we can write: HfGpt2ConfigJson of it must parse
// back to the same ModelSpec.
#include <cstdint>
#include <cstdlib>

#include "common/hf_gpt2.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pp::common;
  absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<pp::v1::ModelSpec> parsed = ParseHfGpt2Config(bytes);
  if (!parsed.ok()) return 0;
  if (parsed->vocab_size() < 1 || parsed->seq_len() < 1 || parsed->d_model() < 1 ||
      parsed->n_heads() < 1 || parsed->n_layers() < 1 ||
      parsed->d_model() % parsed->n_heads() != 0) {
    std::abort();
  }
  absl::StatusOr<pp::v1::ModelSpec> back = ParseHfGpt2Config(HfGpt2ConfigJson(*parsed));
  if (!back.ok() || back->SerializeAsString() != parsed->SerializeAsString()) std::abort();
  return 0;
}
