// Helpers the model tests and the parallel tests share: small configs, deterministic tokens, the
// lookup of a held tensor by name, bitwise comparison. Header-only; test code only.
#ifndef PP_TESTS_WORKER_MODEL_MODEL_TEST_UTIL_H_
#define PP_TESTS_WORKER_MODEL_MODEL_TEST_UTIL_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "worker/model/model.h"

namespace pp::model::testing {

// A GPT small enough for exact checks.
inline ModelConfig SmallConfig(int vocab_size, int seq_len, int d_model, int n_heads,
                               int n_layers) {
  ModelConfig c;
  c.vocab_size = vocab_size;
  c.seq_len = seq_len;
  c.d_model = d_model;
  c.n_heads = n_heads;
  c.n_layers = n_layers;
  return c;
}

// `n` token ids in [0, vocab) from a 64-bit LCG (Knuth's MMIX constants) seeded with `state`,
// which it advances: the same seed gives the same tokens on every machine.
inline std::vector<int32_t> LcgTokens(uint64_t& state, int vocab, int n) {
  std::vector<int32_t> out;
  out.reserve(n);
  for (int i = 0; i < n; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    out.push_back(static_cast<int32_t>((state >> 33) % vocab));
  }
  return out;
}

// The held tensor called `name`, or null.
inline ModelTensor* FindTensor(StageModel& model, const std::string& name) {
  for (ModelTensor& t : model.tensors()) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

inline bool BitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace pp::model::testing

#endif  // PP_TESTS_WORKER_MODEL_MODEL_TEST_UTIL_H_
