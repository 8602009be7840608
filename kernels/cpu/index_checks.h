// The index inputs of the CPU backend's ops (kernels/cpu/cpu_ops.cc), checked before the
// kernels index with them unchecked: an entry that breaks ops.h's rule aborts, naming the op and
// the entry, instead of reading out of bounds (the backend's ops have no error path).
//
// Contract: pure functions; O(B T), beside the ops' O(B T C) or more. Thread-safe.
#ifndef PP_KERNELS_CPU_INDEX_CHECKS_H_
#define PP_KERNELS_CPU_INDEX_CHECKS_H_

#include <cstdint>

namespace pp::kernels {

// Batch row b of doc_start (B,T), or null without documents.
inline const int32_t* RowStarts(const int32_t* doc_start, int64_t b, int T) {
  return doc_start == nullptr ? nullptr : doc_start + b * T;
}

// The position of token bt = b*T + t: positions[bt], or t without positions.
inline int32_t Position(const int32_t* positions, int64_t bt, int T) {
  return positions == nullptr ? static_cast<int32_t>(bt % T) : positions[bt];
}

// Aborts unless every doc_start (B,T) row starts its documents as ops.h says (each entry its own
// index or its left neighbour's). Null: no documents, nothing to check.
void CheckDocStarts(const int32_t* doc_start, int B, int T, const char* op);

// Aborts unless every position (B,T) is in [0, T). Null: positions 0..T-1, nothing to check.
void CheckPositions(const int32_t* positions, int B, int T, const char* op);

}  // namespace pp::kernels

#endif  // PP_KERNELS_CPU_INDEX_CHECKS_H_
