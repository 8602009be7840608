// The embedding with per-token positions (kernels/ops.h EncoderForward / EncoderBackward,
// issue 33 model.positions "document"): against a double reference, with positions that restart
// at packed documents and leave some wpe rows unused; positions == t give exactly the bits of
// null positions, forward and backward; a position outside [0, T) aborts naming the entry.
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "tests/kernels/kernel_test_util.h"

namespace pp::kernels {
namespace {

class EncoderPositionsTest : public CpuOpsFixture {
 protected:
  struct Result {
    std::vector<float> out, dwte, dwpe;  // (B,T,C), (V,C), (T,C)
  };
  // Forward, then backward of dout = r onto the gradients pre_e and pre_p.
  Result Run(const std::vector<int32_t>& tokens, const std::vector<int32_t>& positions,
             const std::vector<float>& wte, const std::vector<float>& wpe,
             const std::vector<float>& r, const std::vector<float>& pre_e,
             const std::vector<float>& pre_p, int B, int T, int C) {
    const int32_t* tok = DevInt(tokens);
    const int32_t* pos = DevInt(positions);
    float* out = Dev(std::vector<float>(size_t(B) * T * C, 0.0f));
    ops_->EncoderForward(out, tok, Dev(wte), Dev(wpe), pos, B, T, C);
    float* dwte = Dev(pre_e);
    float* dwpe = Dev(pre_p);
    ops_->EncoderBackward(dwte, dwpe, Dev(r), tok, pos, B, T, C);
    return {Host(out, r.size()), Host(dwte, pre_e.size()), Host(dwpe, pre_p.size())};
  }
};

// positions (B,T) = t - doc_start for documents starting at `starts` in every row (0 included).
std::vector<int32_t> DocumentPositions(int B, int T, const std::vector<std::vector<int>>& starts) {
  std::vector<int32_t> pos;
  for (int b = 0; b < B; ++b) {
    int begin = 0;
    for (int t = 0; t < T; ++t) {
      for (int s : starts[b]) {
        if (s == t) begin = t;
      }
      pos.push_back(t - begin);
    }
  }
  return pos;
}

std::vector<int32_t> Tokens(int n, int V) {
  std::vector<int32_t> tokens(n);
  for (int i = 0; i < n; ++i) tokens[i] = (i * 7 + i / 3) % V;  // repeats: rows add up
  return tokens;
}

TEST_F(EncoderPositionsTest, MatchesADoubleReference) {
  // C = 20: not a multiple of a vector. Row 0: documents of 3, 1 and 7 tokens; row 1: 5 and 6.
  // No position reaches 7, so wpe rows 7..10 get nothing.
  const int B = 2, T = 11, C = 20, V = 5;
  const std::vector<int32_t> tokens = Tokens(B * T, V);
  const std::vector<int32_t> pos = DocumentPositions(B, T, {{0, 3, 4}, {0, 5}});
  const auto wte = Random(V * C, 1), wpe = Random(T * C, 2), r = Random(B * T * C, 3);
  const auto pre_e = Random(V * C, 4), pre_p = Random(T * C, 5);
  const Result got = Run(tokens, pos, wte, wpe, r, pre_e, pre_p, B, T, C);

  std::vector<double> dwte(pre_e.begin(), pre_e.end()), dwpe(pre_p.begin(), pre_p.end());
  for (int bt = 0; bt < B * T; ++bt) {
    for (int c = 0; c < C; ++c) {
      const double want = double(wte[tokens[bt] * C + c]) + wpe[pos[bt] * C + c];
      ASSERT_NEAR(got.out[bt * C + c], want, 1e-6) << "out[" << bt << "," << c << "]";
      dwte[tokens[bt] * C + c] += r[bt * C + c];
      dwpe[pos[bt] * C + c] += r[bt * C + c];
    }
  }
  for (size_t i = 0; i < dwte.size(); ++i) ASSERT_NEAR(got.dwte[i], dwte[i], 1e-5) << "dwte " << i;
  for (size_t i = 0; i < dwpe.size(); ++i) ASSERT_NEAR(got.dwpe[i], dwpe[i], 1e-5) << "dwpe " << i;
  for (int i = 7 * C; i < T * C; ++i) {
    ASSERT_EQ(got.dwpe[i], pre_p[i]) << "unused wpe row " << i / C << " got a gradient";
  }
}

TEST_F(EncoderPositionsTest, IdentityPositionsGiveTheBitsOfNull) {
  const int B = 3, T = 33, C = 40, V = 7;
  const std::vector<int32_t> tokens = Tokens(B * T, V);
  const std::vector<int32_t> identity = DocumentPositions(B, T, {{0}, {0}, {0}});
  const auto wte = Random(V * C, 11), wpe = Random(T * C, 12), r = Random(B * T * C, 13);
  const auto pre_e = Random(V * C, 14), pre_p = Random(T * C, 15);
  const Result null = Run(tokens, {}, wte, wpe, r, pre_e, pre_p, B, T, C);
  const Result same = Run(tokens, identity, wte, wpe, r, pre_e, pre_p, B, T, C);
  auto bitwise = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
  };
  EXPECT_TRUE(bitwise(null.out, same.out));
  EXPECT_TRUE(bitwise(null.dwte, same.dwte));
  EXPECT_TRUE(bitwise(null.dwpe, same.dwpe));
}

using EncoderPositionsDeathTest = EncoderPositionsTest;

TEST_F(EncoderPositionsDeathTest, PositionsOutsideTheWindowAbortNamingTheEntry) {
  const int B = 2, T = 4, C = 3, V = 3;
  std::vector<int32_t> pos = DocumentPositions(B, T, {{0}, {0}});
  pos[1 * T + 2] = T;  // one past the last wpe row
  const auto wte = Random(V * C, 1), wpe = Random(T * C, 2), r = Random(B * T * C, 3);
  EXPECT_DEATH(Run(Tokens(B * T, V), pos, wte, wpe, r, wte, wpe, B, T, C),
               "EncoderForward: positions\\[1,2\\] = 4 is outside \\[0, 4\\)");
  pos[1 * T + 2] = -1;
  float* dwte = Dev(wte);
  float* dwpe = Dev(wpe);
  EXPECT_DEATH(
      ops_->EncoderBackward(dwte, dwpe, Dev(r), DevInt(Tokens(B * T, V)), DevInt(pos), B, T, C),
      "EncoderBackward: positions\\[1,2\\] = -1");
}

}  // namespace
}  // namespace pp::kernels
