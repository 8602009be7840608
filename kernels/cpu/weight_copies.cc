#include "kernels/cpu/weight_copies.h"

#include <utility>

namespace pp::kernels {
namespace {

size_t WeightBytes(const WeightCopies::Copy& c) {
  return static_cast<size_t>(c.rows) * static_cast<size_t>(c.cols) * sizeof(float);
}

}  // namespace

std::pair<WeightCopies::Map::iterator, WeightCopies::Map::iterator> WeightCopies::Overlapping(
    const char* p, size_t bytes) {
  auto first = copies_.upper_bound(p);  // the first weight starting after p
  if (first != copies_.begin()) {
    auto before = std::prev(first);  // starts at or before p: overlaps when it reaches past p
    if (before->first + WeightBytes(before->second) > p) first = before;
  }
  auto last = first;
  while (last != copies_.end() && last->first < p + bytes) ++last;
  return {first, last};
}

WeightCopies::Copy& WeightCopies::Find(const float* w, int rows, int cols) {
  const char* key = reinterpret_cast<const char*>(w);
  auto it = copies_.find(key);
  if (it != copies_.end() && it->second.rows == rows && it->second.cols == cols) return it->second;
  const size_t bytes = static_cast<size_t>(rows) * static_cast<size_t>(cols) * sizeof(float);
  auto [first, last] = Overlapping(key, bytes);
  copies_.erase(first, last);
  Copy& c = copies_[key];
  c.rows = rows, c.cols = cols;
  return c;
}

WeightCopies::Copy* WeightCopies::Exactly(const float* w, size_t n) {
  auto it = copies_.find(reinterpret_cast<const char*>(w));
  if (it == copies_.end() || WeightBytes(it->second) != n * sizeof(float)) return nullptr;
  return &it->second;
}

void WeightCopies::Invalidate(const void* p, size_t bytes) {
  auto [first, last] = Overlapping(static_cast<const char*>(p), bytes);
  for (auto it = first; it != last; ++it) it->second.fresh[0] = it->second.fresh[1] = false;
}

void WeightCopies::Forget(const void* p, size_t bytes) {
  auto [first, last] = Overlapping(static_cast<const char*>(p), bytes);
  copies_.erase(first, last);
}

}  // namespace pp::kernels
