// Safetensors files (https://github.com/huggingface/safetensors, format section): an 8-byte
// little-endian header length n, n bytes of JSON {"name": {"dtype", "shape", "data_offsets":
// [begin, end]}, ..., "__metadata__": {string: string}}, then the data buffer, tensors row-major,
// little-endian. Offsets are relative to the buffer and must tile it exactly (no gaps, overlaps,
// or bytes past the end).
// Contract: in memory every tensor is f32; on disk F32 and BF16 are supported (BF16 widens exactly
// on read and rounds to nearest-even on write). Parsing is strict: any malformed input (truncation,
// bad header length, bad JSON, bad dtype/shape/offsets, duplicate names) returns InvalidArgument
// (DataLoss for truncation) naming the file and the tensor; it never reads out of bounds.
// Writing is atomic (common/file_io.h WriteFileAtomic).
#ifndef PP_COMMON_SAFETENSORS_H_
#define PP_COMMON_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pp::common {

struct Tensor {
  std::string name;
  std::vector<int64_t> shape;  // empty = scalar
  std::vector<float> data;     // product(shape) values, row-major
};

enum class DType { kF32, kBF16 };

struct SafetensorsFile {
  std::vector<Tensor> tensors;                  // in data-offset order
  std::map<std::string, std::string> metadata;  // "__metadata__"
};

// Header length above this is refused before anything is allocated.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100 << 20;

// Number of elements of `shape`; error if a dimension is negative or the product overflows.
absl::StatusOr<int64_t> NumElements(const std::vector<int64_t>& shape);

// `origin` names the bytes in errors (a path, or "<bytes>").
absl::StatusOr<SafetensorsFile> ParseSafetensors(absl::string_view bytes,
                                                 absl::string_view origin = "<bytes>");
absl::StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path);

// Tensors are laid out in the given order. Errors: duplicate or empty names, data size not equal to
// the shape's element count, a metadata key "__metadata__"-reserved name clash.
absl::StatusOr<std::string> SerializeSafetensors(
    const std::vector<Tensor>& tensors, const std::map<std::string, std::string>& metadata = {},
    DType dtype = DType::kF32);
absl::Status WriteSafetensors(const std::string& path, const std::vector<Tensor>& tensors,
                              const std::map<std::string, std::string>& metadata = {},
                              DType dtype = DType::kF32);

}  // namespace pp::common

#endif  // PP_COMMON_SAFETENSORS_H_
