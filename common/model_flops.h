// The arithmetic of one trained token of our GPT (worker/model): the floating-point operations of
// its forward and backward passes, counted the way MFU figures are usually counted (the PaLM
// paper, Chowdhery et al. 2022, appendix B: 6N + 12LHQT per token), so a FLOP rate printed here
// compares with published ones.
//
// Contract: pure, thread-safe, no allocation. Every count is a double: products of the spec's
// fields (vocab x C, L x C^2 x 12 x 6) can pass int64 for specs ValidateJobSpec would refuse, and
// a rate needs no exact integer.
#ifndef PP_COMMON_MODEL_FLOPS_H_
#define PP_COMMON_MODEL_FLOPS_H_

#include "pp/v1/job.pb.h"

namespace pp::common {

// N of "6N": the weights that take part in a matrix product for every token, i.e. the weight
// matrices of the Matmul ops (kernels/ops.h). Per block qkv (3C x C), attention proj (C x C), fc
// (4C x C) and mlp proj (C x 4C): 12 C^2; plus the lm_head (vocab_size x C, the padded
// vocab_size, as the product runs over every column), counted whether or not it is tied to wte.
// Not counted: the embedding tables (wte's lookup and wpe are gathers, no product), biases and
// LayerNorm weights (elementwise, O(C) per token).
double MatmulParameters(const pp::v1::ModelSpec& model);

// Forward + backward FLOPs of one token: 6 x MatmulParameters (2 per multiply-add forward, 4 in
// backward: the input and the weight gradients) + 12 x n_layers x seq_len x d_model for the
// attention products QK^T and AV (PaLM's 12LHQT with H x Q = d_model and T = seq_len). PaLM's
// convention counts the full T x T score matrix although the causal mask leaves half of it
// unused, and counts no recomputation (parallel.recompute redoes work that is not counted).
double TrainFlopsPerToken(const pp::v1::ModelSpec& model);

}  // namespace pp::common

#endif  // PP_COMMON_MODEL_FLOPS_H_
