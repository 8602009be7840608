// sample_logits STEP_DIR TEXT OUT: the logits (T, V) of the byte sequence TEXT under the checkpoint
// in STEP_DIR (any layout; V: the real vocabulary, without a padded model's padding columns), by
// the inference path of worker/trainer/sample.h, written to OUT as raw little-endian float32.
// tests/client/hf_transformers_test.py compares them with transformers' logits of the export.
#include <fstream>
#include <iostream>

#include "worker/trainer/sample.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: sample_logits STEP_DIR TEXT OUT\n";
    return 2;
  }
  auto decoder = pp::trainer::LoadDecoder(argv[1]);
  if (!decoder.ok()) {
    std::cerr << decoder.status() << "\n";
    return 1;
  }
  const std::string text = argv[2];
  auto logits = (*decoder)->Logits(std::vector<int32_t>(text.begin(), text.end()));
  if (!logits.ok()) {
    std::cerr << logits.status() << "\n";
    return 1;
  }
  std::ofstream out(argv[3], std::ios::binary);
  out.write(reinterpret_cast<const char*>(logits->data()),
            static_cast<std::streamsize>(logits->size() * sizeof(float)));
  return out.good() ? 0 : 1;
}
