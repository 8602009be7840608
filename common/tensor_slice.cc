#include "common/tensor_slice.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace pp::common {
namespace {

size_t NumElements(const std::vector<int>& shape) {
  size_t n = 1;
  for (int d : shape) n *= static_cast<size_t>(d);
  return n;
}

std::string ShapeString(const std::vector<int>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) absl::StrAppend(&s, i ? ", " : "", shape[i]);
  return s + "]";
}

// A tensor seen as (outer, dim, inner) around the sliced dimension.
struct Around {
  size_t outer = 1, dim = 0, inner = 1;
};
Around AroundDim(const std::vector<int>& shape, int dim) {
  Around a;
  for (int i = 0; i < static_cast<int>(shape.size()); ++i) {
    if (i < dim) a.outer *= shape[i];
    if (i > dim) a.inner *= shape[i];
  }
  a.dim = shape[dim];
  return a;
}

// Calls copy(whole_offset, slice_offset, n) for every contiguous run of the slice, in the held
// tensor's order. The slice must fit `full` (SliceShape).
template <typename F>
void ForEachRun(const std::vector<int>& full, const TensorSlice& slice, F copy) {
  const Around a = AroundDim(full, slice.dim);
  const size_t block = a.dim / slice.parts, run = slice.length * a.inner;
  size_t at = 0;
  for (size_t o = 0; o < a.outer; ++o) {
    for (int p = 0; p < slice.parts; ++p) {
      copy((o * a.dim + p * block + slice.offset) * a.inner, at, run);
      at += run;
    }
  }
}

// Copies one piece into `whole`, marking what it covers; false where it overwrote covered
// elements with other bits. `overlapped` is set when it covered any element twice.
bool Place(const std::vector<int>& full, const SliceValues& piece, std::vector<float>& whole,
           std::vector<bool>& covered, bool& overlapped) {
  bool agree = true;
  ForEachRun(full, piece.slice, [&](size_t to, size_t from, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      const float v = piece.values[from + i];
      if (covered[to + i]) {
        overlapped = true;
        agree = agree && std::memcmp(&whole[to + i], &v, sizeof(float)) == 0;
      }
      whole[to + i] = v, covered[to + i] = true;
    }
  });
  return agree;
}

}  // namespace

bool IsWhole(const TensorSlice& slice, const std::vector<int>& full) {
  // parts blocks of length extent/parts from offset 0 cover the tensor (qkv on one TP rank).
  return slice.offset == 0 && slice.dim >= 0 && slice.dim < static_cast<int>(full.size()) &&
         static_cast<int64_t>(slice.length) * slice.parts == full[slice.dim];
}

absl::StatusOr<std::vector<int>> SliceShape(const std::vector<int>& full,
                                            const TensorSlice& slice) {
  const bool fits = slice.dim >= 0 && slice.dim < static_cast<int>(full.size()) &&
                    slice.parts >= 1 && full[slice.dim] % slice.parts == 0 && slice.offset >= 0 &&
                    slice.length >= 0 &&
                    static_cast<int64_t>(slice.offset) + slice.length <=
                        full[slice.dim] / slice.parts;
  if (!fits) {
    return absl::InvalidArgumentError(
        absl::StrCat("slice (dim ", slice.dim, ", parts ", slice.parts, ", offset ", slice.offset,
                     ", length ", slice.length, ") does not fit shape ", ShapeString(full)));
  }
  std::vector<int> shape = full;
  shape[slice.dim] = slice.parts * slice.length;
  return shape;
}

absl::StatusOr<std::vector<float>> CutSlice(const std::vector<int>& full, const TensorSlice& slice,
                                            const std::vector<float>& values) {
  absl::StatusOr<std::vector<int>> shape = SliceShape(full, slice);
  if (!shape.ok()) return shape.status();
  if (values.size() != NumElements(full)) {
    return absl::InvalidArgumentError(
        absl::StrCat(values.size(), " values for shape ", ShapeString(full)));
  }
  std::vector<float> out(NumElements(*shape));
  ForEachRun(full, slice, [&](size_t from, size_t to, size_t n) {
    std::memcpy(out.data() + to, values.data() + from, n * sizeof(float));
  });
  return out;
}

absl::StatusOr<std::vector<float>> AssembleSlices(const std::string& name,
                                                  const std::vector<int>& full,
                                                  const std::vector<SliceValues>& pieces,
                                                  Overlap overlap) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("slices of tensor \"", name, "\" ", why));
  };
  std::vector<float> whole(NumElements(full));
  std::vector<bool> covered(whole.size(), false);
  bool overlapped = false;
  for (const SliceValues& piece : pieces) {
    absl::StatusOr<std::vector<int>> shape = SliceShape(full, piece.slice);
    if (!shape.ok()) return bad(std::string(shape.status().message()));
    if (piece.values.size() != NumElements(*shape)) {
      return bad(absl::StrCat("hold a slice of shape ", ShapeString(*shape), " with ",
                              piece.values.size(), " values"));
    }
    if (!Place(full, piece, whole, covered, overlapped) && overlap == Overlap::kMustAgree) {
      return bad("hold different values where they overlap");
    }
  }
  const bool gaps = std::find(covered.begin(), covered.end(), false) != covered.end();
  if (overlap == Overlap::kRefused && (gaps || overlapped)) return bad("overlap or leave gaps");
  if (gaps) return bad("leave gaps");
  return whole;
}

}  // namespace pp::common
