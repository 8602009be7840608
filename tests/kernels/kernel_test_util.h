// Inputs and a fixture the kernel tests share.
#ifndef PP_TESTS_KERNELS_KERNEL_TEST_UTIL_H_
#define PP_TESTS_KERNELS_KERNEL_TEST_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/ops.h"

namespace pp::kernels {

// Uniform in [-scale, scale), from a fixed LCG so values do not depend on the standard library.
inline std::vector<float> Random(size_t n, uint64_t seed, float scale = 1.0f) {
  std::vector<float> v(n);
  uint64_t s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (auto& x : v) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    x = scale * (static_cast<float>((s >> 40) & 0xffffff) / 8388608.0f - 1.0f);
  }
  return v;
}

// The CPU Ops at one thread, and backend copies of host vectors freed with the fixture.
class CpuOpsFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ops = MakeOps("cpu", 1);
    ASSERT_TRUE(ops.ok()) << ops.status();
    ops_ = std::move(*ops);
  }
  void TearDown() override {
    for (void* p : owned_) ops_->Free(p);
  }
  float* Dev(const std::vector<float>& host) {
    float* p = ops_->Alloc(host.size());
    ops_->CopyToDevice(p, host.data(), host.size());
    owned_.push_back(p);
    return p;
  }
  // Null for an empty vector (an optional int argument left out).
  int32_t* DevInt(const std::vector<int32_t>& host) {
    if (host.empty()) return nullptr;
    int32_t* p = ops_->AllocInt(host.size());
    ops_->CopyIntToDevice(p, host.data(), host.size());
    owned_.push_back(p);
    return p;
  }
  std::vector<float> Host(const float* p, size_t n) {
    std::vector<float> v(n);
    ops_->CopyToHost(v.data(), p, n);
    return v;
  }
  std::unique_ptr<Ops> ops_;
  std::vector<void*> owned_;
};

}  // namespace pp::kernels

#endif  // PP_TESTS_KERNELS_KERNEL_TEST_UTIL_H_
