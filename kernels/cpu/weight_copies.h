// The CPU backend's weights in their product's operand type (bf16 bits, or bf16-rounded floats on
// the fallback, or bf16 packed for AMX tiles), kept from one matmul to the next: in bf16 a weight
// is converted once per optimizer step, not once per microbatch and direction (the forward and
// the input gradient read it in one layout, or each its own packing on AMX tiles). Bookkeeping
// only; CpuProducts (cpu_products.cc) converts.
//
// Contract:
// - A copy belongs to a weight's address and shape. Find hands out the copy of (w, rows, cols),
//   each layout stale when the copy is new, was invalidated, or w had another shape; the caller
//   refills a stale layout and marks it fresh.
// - Invalidate(p, bytes) makes stale every copy whose weight overlaps [p, p + bytes): CpuOps calls
//   it from each op that writes memory a caller may name as a weight (CopyToDevice, Copy, Zero,
//   Add, Scale, AdamW; AdamW then refills and marks fresh the unpadded layout of the weight it
//   updated whole, or both its packings, in its own pass), and Forget from Free. A weight written any other way (a
//   kernel's output, or host code through the pointer) leaves its copy fresh: ops.h forbids that.
// - Not thread-safe: CpuOps's one calling thread only (the pool never calls it).
#ifndef PP_KERNELS_CPU_WEIGHT_COPIES_H_
#define PP_KERNELS_CPU_WEIGHT_COPIES_H_

#include <cstddef>
#include <map>
#include <utility>
#include <vector>

namespace pp::kernels {

class WeightCopies {
 public:
  // A weight's operands in up to two layouts (the caller's: CpuOps keeps rows cols apart, and
  // padded rows where those would alias in cache), each filled on first use.
  struct Copy {
    int rows = 0, cols = 0;
    bool fresh[2] = {false, false};
    std::vector<float> data[2];  // bf16 bits take half a float each
  };

  // The copy of weight w (rows, cols). A copy of another weight overlapping w's memory is dropped
  // first: weights never overlap, so memory that now holds w held that one before.
  Copy& Find(const float* w, int rows, int cols);
  // The copy of the weight that is exactly [w, w + n) floats, or null: AdamW refills its
  // unpadded layout (or its packings) while it updates w (cpu_products.cc).
  Copy* Exactly(const float* w, size_t n);
  void Invalidate(const void* p, size_t bytes);
  void Forget(const void* p, size_t bytes);  // drops the copies (their memory too)

 private:
  using Map = std::map<const char*, Copy>;
  // The copies whose weights overlap [p, p + bytes), as [first, last).
  std::pair<Map::iterator, Map::iterator> Overlapping(const char* p, size_t bytes);
  Map copies_;  // by the weight's address
};

}  // namespace pp::kernels

#endif  // PP_KERNELS_CPU_WEIGHT_COPIES_H_
