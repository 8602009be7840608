// The bf16 weights' converted copies (kernels/cpu/weight_copies.h): the bookkeeping (a copy per
// weight and shape, stale after any write that overlaps it), and the CPU backend on every bf16
// path this CPU has giving, after each op that may write a weight, the bits of a backend that
// never saw the old values.
#include "kernels/cpu/weight_copies.h"

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/ops.h"
#include "tests/kernels/kernel_test_util.h"

namespace pp::kernels {
namespace {

TEST(WeightCopiesTest, ACopyStaysFreshUntilAWriteOverlapsIt) {
  std::vector<float> memory(100);
  const float* a = memory.data();       // (2,10): floats 0..19
  const float* b = memory.data() + 20;  // (3,10): floats 20..49
  WeightCopies copies;
  copies.Find(a, 2, 10).fresh[0] = true;
  copies.Find(b, 3, 10).fresh[1] = true;
  EXPECT_TRUE(copies.Find(a, 2, 10).fresh[0]);
  EXPECT_TRUE(copies.Find(b, 3, 10).fresh[1]);
  copies.Invalidate(memory.data() + 50, 50 * sizeof(float));  // after both
  EXPECT_TRUE(copies.Find(a, 2, 10).fresh[0]);
  EXPECT_TRUE(copies.Find(b, 3, 10).fresh[1]);
  copies.Invalidate(memory.data() + 19, sizeof(float));  // a's last float only
  EXPECT_FALSE(copies.Find(a, 2, 10).fresh[0]);
  EXPECT_TRUE(copies.Find(b, 3, 10).fresh[1]);
  copies.Find(a, 2, 10).fresh[0] = true;
  copies.Invalidate(memory.data() + 10, 15 * sizeof(float));  // the end of a, the start of b
  EXPECT_FALSE(copies.Find(a, 2, 10).fresh[0]);
  EXPECT_FALSE(copies.Find(b, 3, 10).fresh[1]);
}

TEST(WeightCopiesTest, AnotherShapeOrAnOverlappingWeightStartsStale) {
  std::vector<float> memory(100);
  WeightCopies copies;
  WeightCopies::Copy& first = copies.Find(memory.data(), 4, 10);
  first.fresh[0] = first.fresh[1] = true;
  EXPECT_FALSE(copies.Find(memory.data(), 10, 4).fresh[0]);  // the same address, reshaped
  copies.Find(memory.data(), 10, 4).fresh[0] = true;
  // A weight starting inside the old one: memory that held it holds this one now.
  WeightCopies::Copy& inside = copies.Find(memory.data() + 8, 2, 4);
  EXPECT_FALSE(inside.fresh[0]);
  inside.fresh[0] = true;
  EXPECT_FALSE(copies.Find(memory.data(), 10, 4).fresh[0]);  // dropped for it
  copies.Find(memory.data() + 60, 2, 4).fresh[0] = true;
  copies.Forget(memory.data() + 60, 8 * sizeof(float));
  EXPECT_FALSE(copies.Find(memory.data() + 60, 2, 4).fresh[0]);
}

TEST(WeightCopiesTest, ExactlyFindsOnlyTheCopyOfThatWholeWeight) {
  std::vector<float> memory(100);
  WeightCopies copies;
  WeightCopies::Copy& w = copies.Find(memory.data() + 10, 3, 4);
  EXPECT_EQ(copies.Exactly(memory.data() + 10, 12), &w);
  EXPECT_EQ(copies.Exactly(memory.data() + 10, 6), nullptr);   // a part of it
  EXPECT_EQ(copies.Exactly(memory.data() + 10, 13), nullptr);  // more than it
  EXPECT_EQ(copies.Exactly(memory.data() + 11, 11), nullptr);  // inside it
  EXPECT_EQ(copies.Exactly(memory.data(), 22), nullptr);       // around it
}

// The products that read a weight, before and after `write` changes it, against a backend that
// only ever saw the new weight: bitwise equal, and different from before (the write took effect).
struct Products {
  std::vector<float> out, dinp;
};
Products RunProducts(Ops& ops, const float* inp, const float* w, const float* dout, int N, int IC,
                     int OC) {
  Products p{std::vector<float>(size_t(N) * OC), std::vector<float>(size_t(N) * IC)};
  float* out = ops.Alloc(p.out.size());
  float* dinp = ops.Alloc(p.dinp.size());
  ops.MatmulForward(out, inp, w, nullptr, N, IC, OC);
  ops.MatmulBackwardInput(dinp, dout, w, N, IC, OC);
  ops.CopyToHost(p.out.data(), out, p.out.size());
  ops.CopyToHost(p.dinp.data(), dinp, p.dinp.size());
  ops.Free(out), ops.Free(dinp);
  return p;
}

// The products on a new backend of `path` that only ever saw these values.
Products OnAFreshBackend(CpuMatmul path, const std::vector<float>& inp, const std::vector<float>& w,
                         const std::vector<float>& dout, int N, int IC, int OC) {
  std::unique_ptr<Ops> fresh = *MakeCpuOpsWith(1, path);
  std::vector<float*> dev;
  for (const std::vector<float>* host : {&inp, &w, &dout}) {
    dev.push_back(fresh->Alloc(host->size()));
    fresh->CopyToDevice(dev.back(), host->data(), host->size());
  }
  const Products p = RunProducts(*fresh, dev[0], dev[1], dev[2], N, IC, OC);
  for (float* d : dev) fresh->Free(d);
  return p;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// IC = 1024: the input gradient's weight rows are padded on oneDNN's f32 fallback, so both
// layouts of a copy are exercised. IC = 96, OC = 64: both products' B fit the AMX tiles
// (kernels/cpu/amx_gemm.h), where the bf16 fast path packs a layout for each.
class WeightCopiesWriteTest : public testing::TestWithParam<std::pair<int, int>> {};

TEST_P(WeightCopiesWriteTest, EveryOpThatMayWriteAWeightRefreshesItsBf16Copy) {
  const int N = 24, IC = GetParam().first, OC = GetParam().second;
  const size_t n = size_t(OC) * IC;
  const std::vector<float> inp = Random(size_t(N) * IC, 1), dout = Random(size_t(N) * OC, 2);
  const std::vector<float> w0 = Random(n, 3, 0.5f), other = Random(n, 4, 0.5f);
  struct Write {
    std::string name;
    void (*apply)(Ops& ops, float* w, const float* other, size_t n);
  };
  const std::vector<Write> writes = {
      {"CopyToDevice", [](Ops& o, float* w, const float* x, size_t n) { o.CopyToDevice(w, x, n); }},
      {"Copy", [](Ops& o, float* w, const float* x, size_t n) { o.Copy(w, x, n); }},
      {"Zero", [](Ops& o, float* w, const float*, size_t n) { o.Zero(w + n / 2, n / 2); }},
      {"Add", [](Ops& o, float* w, const float* x, size_t n) { o.Add(w, x, n); }},
      {"Scale", [](Ops& o, float* w, const float*, size_t n) { o.Scale(w, 3.0f, n); }},
      {"AdamW",
       [](Ops& o, float* w, const float* x, size_t n) {
         float *m = o.Alloc(n), *v = o.Alloc(n);
         o.AdamW(w, x, m, v, n, AdamWParams{.lr = 0.1f});  // refills the copy in its pass
         o.Free(m), o.Free(v);
       }},
      {"AdamW on half the weight",
       [](Ops& o, float* w, const float* x, size_t n) {
         float *m = o.Alloc(n), *v = o.Alloc(n);
         o.AdamW(w + n / 2, x, m, v, n / 2, AdamWParams{.lr = 0.1f});  // only makes it stale
         o.Free(m), o.Free(v);
       }},
  };
  int paths = 0;
  for (CpuMatmul path : {CpuMatmul::kSgemmBf16, CpuMatmul::kDnnlF32Bf16, CpuMatmul::kDnnlBf16}) {
    absl::StatusOr<std::unique_ptr<Ops>> made = MakeCpuOpsWith(1, path);
    if (!made.ok()) continue;  // this CPU has no such path
    ++paths;
    Ops& ops = **made;
    SCOPED_TRACE(ops.MatmulPath());
    float *x = ops.Alloc(inp.size()), *d = ops.Alloc(dout.size()), *o = ops.Alloc(n);
    ops.CopyToDevice(x, inp.data(), inp.size());
    ops.CopyToDevice(d, dout.data(), dout.size());
    ops.CopyToDevice(o, other.data(), n);
    for (const Write& write : writes) {
      SCOPED_TRACE(write.name);
      float* w = ops.Alloc(n);
      ops.CopyToDevice(w, w0.data(), n);
      const Products before = RunProducts(ops, x, w, d, N, IC, OC);
      write.apply(ops, w, o, n);
      const Products after = RunProducts(ops, x, w, d, N, IC, OC);
      std::vector<float> now(n);
      ops.CopyToHost(now.data(), w, n);
      const Products want = OnAFreshBackend(path, inp, now, dout, N, IC, OC);
      EXPECT_TRUE(SameBits(after.out, want.out)) << "MatmulForward read a stale copy";
      EXPECT_TRUE(SameBits(after.dinp, want.dinp)) << "MatmulBackwardInput read a stale copy";
      EXPECT_FALSE(SameBits(after.out, before.out)) << "the write changed nothing";
      ops.Free(w);
    }
    ops.Free(x), ops.Free(d), ops.Free(o);
  }
  EXPECT_GE(paths, 1);  // the OpenBLAS fallback exists everywhere
}

INSTANTIATE_TEST_SUITE_P(Shapes, WeightCopiesWriteTest,
                         testing::Values(std::pair{1024, 40}, std::pair{96, 64}));

}  // namespace
}  // namespace pp::kernels
