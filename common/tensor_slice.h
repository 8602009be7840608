// The one tensor-slice type: which part of a named tensor a tensor-parallel rank holds, used by
// the model (worker/model: ModelTensor::slice), the checkpoint writer and reader
// (common/checkpoint.h) and, converted at the edges, by the manifest (pp.v1.TensorSlice) and a
// shard's metadata (EncodeSlice).
//
// Contract: along dimension `dim`, which is `parts` equal blocks (3 for attn.qkv: q, k and v), the
// elements [offset, offset + length) of every block. The held tensor is those pieces in order:
// its dim has parts * length elements. Shapes are row-major. Pure functions, no state.
#ifndef PP_COMMON_TENSOR_SLICE_H_
#define PP_COMMON_TENSOR_SLICE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pp::common {

struct TensorSlice {
  int dim = 0;
  int parts = 1;
  int offset = 0;
  int length = 0;
};

// True when `slice` is all of a tensor of shape `full` (a replicated tensor).
bool IsWhole(const TensorSlice& slice, const std::vector<int>& full);
// The held tensor's shape. InvalidArgument when the slice does not fit `full`.
absl::StatusOr<std::vector<int>> SliceShape(const std::vector<int>& full, const TensorSlice& slice);
// Values of the whole tensor (shape `full`) -> the slice's values (SliceShape). InvalidArgument
// when the slice does not fit or `values` has not the whole tensor's size.
absl::StatusOr<std::vector<float>> CutSlice(const std::vector<int>& full, const TensorSlice& slice,
                                            const std::vector<float>& values);

struct SliceValues {
  TensorSlice slice;
  std::vector<float> values;  // SliceShape's size
};
// Where pieces may overlap: never (checkpoint shards: each element is written once), or where
// they agree bitwise (the ranks of a tensor-parallel group all hold a replicated tensor).
enum class Overlap { kRefused, kMustAgree };
// The assembler: pieces -> the whole tensor `name` of shape `full`, bitwise. Every element must be
// covered. InvalidArgument "slices of tensor \"<name>\" ..." otherwise: a piece that does not fit
// or has the wrong size, values that differ where pieces overlap (kMustAgree), and "overlap or
// leave gaps" (kRefused) / "leave gaps" (kMustAgree).
absl::StatusOr<std::vector<float>> AssembleSlices(const std::string& name,
                                                  const std::vector<int>& full,
                                                  const std::vector<SliceValues>& pieces,
                                                  Overlap overlap);

}  // namespace pp::common

#endif  // PP_COMMON_TENSOR_SLICE_H_
