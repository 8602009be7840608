// The Hugging Face GPT-2 layout (transformers' GPT2LMHeadModel): a folder holding config.json
// and model.safetensors, and its conversion to and from this project's tensors
// (docs/model.md "Tensor names").
//
// The mapping (C = n_embd; "ours" is torch.nn.Linear [out, in], HF's Conv1D is [in, out]):
//   wte.weight [V,C]                 <-> transformer.wte.weight [V,C]
//   wpe.weight [T,C]                 <-> transformer.wpe.weight [n_positions = T, C]
//   h.i.ln_{1,2}.{weight,bias} [C]   <-> transformer.h.i.ln_{1,2}.{weight,bias}
//   h.i.attn.qkv.weight [3C,C]       <-> transformer.h.i.attn.c_attn.weight [C,3C] (transposed;
//                                        both hold q, k, v in that order, heads contiguous)
//   h.i.attn.proj.weight [C,C]       <-> transformer.h.i.attn.c_proj.weight [C,C] (transposed)
//   h.i.mlp.fc.weight [4C,C]         <-> transformer.h.i.mlp.c_fc.weight [C,4C] (transposed)
//   h.i.mlp.proj.weight [C,4C]       <-> transformer.h.i.mlp.c_proj.weight [4C,C] (transposed)
//   biases, ln_f                     <-> the same names under transformer.
//   lm_head.weight [V,C]             <-> lm_head.weight [V,C], absent when tied
// Vocabulary padding (model.real_vocab_size < vocab_size, job.proto): the HF model is the real
// vocabulary's, so its config.json vocab_size is the real one and wte / lm_head hold only the
// real rows; a folder read for a padded spec gets zero rows for the padding (PadVocabRows).
// Our numerics are GPT-2's: GELU tanh (activation_function "gelu_new"), LayerNorm eps 1e-5,
// attention scaled by 1/sqrt(head size), no biases on the head. A transposition is exact, so
// export -> import -> export gives the same bytes.
//
// Contract: pure conversions plus two folder functions. Every refusal is one InvalidArgument line
// naming the file and the field or tensor: a config that is not GPT-2 or asks for numerics we do
// not compute (another activation, eps, n_inner, attention scaling, cross-attention), sizes past
// common/spec_bounds.h, a missing, unknown, duplicate or misshapen tensor. config.json is parsed
// with protobuf's JSON parser (into google.protobuf.Struct), after a size check; it never crashes
// on hostile bytes (tests/fuzz/hf_config_fuzzer.cc), and a refusal never quotes them (the
// parser's message does: a config.json that is another file must not leak it). Thread-safe (no
// state).
#ifndef PP_COMMON_HF_GPT2_H_
#define PP_COMMON_HF_GPT2_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/safetensors.h"
#include "pp/v1/job.pb.h"

namespace pp::common {

inline constexpr char kHfConfigFile[] = "config.json";
inline constexpr char kHfWeightsFile[] = "model.safetensors";
// A GPT-2 config.json is under 2 KiB; anything over this is refused before it is read.
inline constexpr uint64_t kMaxHfConfigBytes = uint64_t{1} << 20;

// The model shape a GPT-2 config.json describes, as our ModelSpec (vocab_size, seq_len =
// n_positions, d_model = n_embd, n_heads, n_layers, tie_embeddings = tie_word_embeddings, which
// defaults to true as in transformers). `origin` names the bytes in errors.
absl::StatusOr<pp::v1::ModelSpec> ParseHfGpt2Config(absl::string_view json,
                                                    absl::string_view origin = "config.json");
// The config.json text for `model` (sizes >= 1 as ValidateJobSpec checks them; vocab_size is
// common::RealVocabSize).
std::string HfGpt2ConfigJson(const pp::v1::ModelSpec& model);

// Our named tensors (whole; optimizer moments are ignored) -> the HF tensors, in our unit order.
// Every tensor `model` has must be present with its shape; wte and lm_head lose their padding
// rows.
absl::StatusOr<std::vector<Tensor>> ToHfGpt2Tensors(const pp::v1::ModelSpec& model,
                                                    const std::map<std::string, Tensor>& ours);
// HF tensors (names with or without the "transformer." prefix; the causal-mask buffers
// "*.attn.bias" / "*.attn.masked_bias" of older transformers are skipped) -> ours, by name. A
// tied model may carry lm_head.weight only as an exact copy of wte.weight.
absl::StatusOr<std::map<std::string, Tensor>> FromHfGpt2Tensors(const pp::v1::ModelSpec& model,
                                                                std::vector<Tensor> hf,
                                                                absl::string_view origin);

// The tensors of an HF model whose vocabulary is `model`'s real one, for a padded `model`:
// wte.weight and lm_head.weight of RealVocabSize rows get zero rows up to model.vocab_size.
// Tensors of any other shape are left alone (the shape checks that follow name them).
void PadVocabRows(const pp::v1::ModelSpec& model, std::map<std::string, Tensor>* ours);

// Writes <dir>/config.json and <dir>/model.safetensors (F32, metadata format=pt), each
// atomically, creating dir.
absl::Status WriteHfGpt2(const std::string& dir, const pp::v1::ModelSpec& model,
                         const std::map<std::string, Tensor>& ours);

struct HfGpt2Model {
  pp::v1::ModelSpec model;                // from config.json
  std::map<std::string, Tensor> tensors;  // our names
};
// <dir>/config.json, opened under `data_roots` (common/path_roots.h OpenUnderRoots: a symlink
// whose target lies outside them is refused, empty roots allow any) and parsed.
absl::StatusOr<pp::v1::ModelSpec> ReadHfGpt2Config(const std::string& dir,
                                                   const std::vector<std::string>& data_roots);
// Reads and converts an HF GPT-2 folder, each file opened under `data_roots` as config.json is. A
// sharded one (model.safetensors.index.json) or one with only pytorch_model.bin is refused by name.
absl::StatusOr<HfGpt2Model> ReadHfGpt2(const std::string& dir,
                                       const std::vector<std::string>& data_roots = {});

// ReadHfGpt2 of a spec's model.init_from (REQUIRES: set), its errors prefixed "model.init_from: ":
// what a worker (under its --data_root) and the trainer start a job from. When the folder's
// vocabulary is the spec's real one and the spec pads it, the tensors are padded (PadVocabRows).
absl::StatusOr<HfGpt2Model> ReadInitFrom(const pp::v1::ModelSpec& model,
                                         const std::vector<std::string>& data_roots = {});

// OK when a job's model fields fit the HF model: every size the spec sets (non-zero) equals it,
// and tie_embeddings is not asked for an untied model. The vocabulary: config.json's vocab_size
// is the spec's real one (RealVocabSize), so a spec may pad it with model.vocab_size above it
// and model.real_vocab_size equal to it. Fills the unset sizes and the tie from
// `hf` into `spec`. The refusal names the field, e.g. "model.d_model: the spec says 64,
// DIR/config.json says n_embd 128".
absl::Status FitModelSpec(const pp::v1::ModelSpec& hf, absl::string_view origin,
                          pp::v1::ModelSpec* spec);

}  // namespace pp::common

#endif  // PP_COMMON_HF_GPT2_H_
