// libFuzzer harness: common/safetensors.h ParseSafetensors on arbitrary bytes. A file that parses
// must serialize again and parse back to the same tensors and metadata (bitwise).
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "common/safetensors.h"

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pp::common;
  absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<SafetensorsFile> parsed = ParseSafetensors(bytes);
  if (!parsed.ok()) return 0;
  for (const Tensor& tensor : parsed->tensors) {
    absl::StatusOr<int64_t> n = NumElements(tensor.shape);
    Check(n.ok() && static_cast<size_t>(*n) == tensor.data.size());
  }
  absl::StatusOr<std::string> again = SerializeSafetensors(parsed->tensors, parsed->metadata);
  if (!again.ok()) return 0;  // e.g. an empty tensor name: readable, not writable
  absl::StatusOr<SafetensorsFile> back = ParseSafetensors(*again);
  Check(back.ok());
  Check(back->metadata == parsed->metadata);
  Check(back->tensors.size() == parsed->tensors.size());
  for (size_t i = 0; i < back->tensors.size(); ++i) {
    const Tensor& a = parsed->tensors[i];
    const Tensor& b = back->tensors[i];
    Check(a.name == b.name && a.shape == b.shape && a.data.size() == b.data.size());
    Check(a.data.empty() ||
          std::memcmp(a.data.data(), b.data.data(), a.data.size() * sizeof(float)) == 0);
  }
  return 0;
}
