// amx_gemm.h on AMX tiles; compiled with AMX and AVX-512 flags where the target is x86-64
// (kernels/CMakeLists.txt), empty elsewhere (then nothing calls it: AmxAttentionKernels is null).
#include "kernels/cpu/amx_gemm.h"

#if defined(__AMX_BF16__) && defined(__AVX512BW__)
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

// GCC 12's unmasked AVX-512 integer intrinsics pass _mm512_undefined_epi32() to their masked
// builtins as the pass-through, which -Wmaybe-uninitialized reports at every use.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace pp::kernels::amx {
namespace {

// A B tile is 16 rows (pairs along the sum) of 16 words (columns); a panel is one column tile's
// k/2 rows, contiguous: rows 64 bytes apart, as TILELOADD reads them.
constexpr int kTile = 16;
// Columns of B per pass over A's rows: 256 columns of k = 3072 (1.5 MiB of bf16) stay in L2
// while A's rows stream by (128 and 256 ran fastest at a step's shapes; blocking the sum too was
// slower: bench/NOTES.md).
constexpr int kBlockCols = 256;

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tiles 0-3 the sums of a (32, 32) block of C, 4-5 two A tiles, 6-7 two B tiles; all 16 x 64 bytes.
class TileScope {
 public:
  TileScope() {
    TileConfig c;
    for (int t = 0; t < 8; ++t) c.colsb[t] = 64, c.rows[t] = kTile;
    _tile_loadconfig(&c);
  }
  ~TileScope() { _tile_release(); }
  TileScope(const TileScope&) = delete;
  TileScope& operator=(const TileScope&) = delete;
};

// vec_kernels.inc's Bf16Bits on 16 lanes: round to nearest even, a NaN only gets its quiet bit;
// the bf16 in each lane's high half, the low half zero.
inline __m512i Bf16High(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), odd);
  const __m512i quiet = _mm512_or_si512(u, _mm512_set1_epi32(0x00400000));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  return _mm512_and_si512(_mm512_mask_blend_epi32(nan, rounded, quiet),
                          _mm512_set1_epi32(static_cast<int>(0xffff0000u)));
}

// 16 words from 32 consecutive elements: word q holds elements 2q (low half) and 2q + 1 (high).
inline __m512i Words(const uint16_t* x) { return _mm512_loadu_si512(x); }
inline __m512i Words(const float* x) {
  const __m256i lo = _mm512_cvtepi32_epi16(_mm512_srli_epi32(Bf16High(_mm512_loadu_ps(x)), 16));
  const __m256i hi =
      _mm512_cvtepi32_epi16(_mm512_srli_epi32(Bf16High(_mm512_loadu_ps(x + 16)), 16));
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}
// 16 consecutive elements' bf16 bits, one in the low half of each word.
inline __m512i Halves(const uint16_t* x) {
  return _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
}
inline __m512i Halves(const float* x) {
  return _mm512_srli_epi32(Bf16High(_mm512_loadu_ps(x)), 16);
}

// r[i][j] <- r[j][i] for 16 rows of 16 words: pairs of rows, of pairs, of 128-bit lanes, of
// 256-bit halves interleaved in turn.
inline void Transpose16(__m512i r[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 16; i += 8) {
    for (int j = 0; j < 4; ++j) {
      t[i + j] = _mm512_shuffle_i32x4(u[i + j], u[i + j + 4], 0x88);
      t[i + j + 4] = _mm512_shuffle_i32x4(u[i + j], u[i + j + 4], 0xdd);
    }
  }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0x88);
    r[j + 8] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0xdd);
  }
}

// The sums of rows [0, 16 R) and columns [0, 16 N) of C from A's rows at a and B's panels from b
// (`panel` words apart), over the whole k: R, N in {1, 2} tiles.
template <int R, int N>
void Block(float* c, int ldc, const uint16_t* a, int lda, const uint32_t* b, size_t panel, int k,
           bool accumulate) {
  const size_t crow = size_t(kTile) * ldc;
  if (accumulate) {
    _tile_loadd(0, c, ldc * 4);
    if constexpr (N == 2) _tile_loadd(1, c + kTile, ldc * 4);
    if constexpr (R == 2) _tile_loadd(2, c + crow, ldc * 4);
    if constexpr (R == 2 && N == 2) _tile_loadd(3, c + crow + kTile, ldc * 4);
  } else {
    _tile_zero(0);
    if constexpr (N == 2) _tile_zero(1);
    if constexpr (R == 2) _tile_zero(2);
    if constexpr (R == 2 && N == 2) _tile_zero(3);
  }
  const uint16_t* a1 = a + size_t(kTile) * lda;
  const uint32_t* b1 = b + panel;
  for (int i = 0; i < k; i += 2 * kTile) {
    const size_t brow = size_t(i) / 2 * kTile;
    // The next step's A lines asked for now: the 16 rows are lda apart, which the hardware's
    // prefetchers do not follow (the B panel's contiguous lines they do: asking for those too
    // was slower), and the tile loads waited on L2 (matmul_bench: 1.04-1.06x oneDNN's products
    // without, 1.09-1.33x with).
    for (int r = 0; r < kTile; ++r) {
      _mm_prefetch(reinterpret_cast<const char*>(a + size_t(r) * lda + i + 2 * kTile), _MM_HINT_T0);
      if constexpr (R == 2) {
        _mm_prefetch(reinterpret_cast<const char*>(a1 + size_t(r) * lda + i + 2 * kTile),
                     _MM_HINT_T0);
      }
    }
    _tile_loadd(4, a + i, lda * 2);
    _tile_loadd(6, b + brow, 64);
    if constexpr (R == 2) _tile_loadd(5, a1 + i, lda * 2);
    if constexpr (N == 2) _tile_loadd(7, b1 + brow, 64);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (N == 2) _tile_dpbf16ps(1, 4, 7);
    if constexpr (R == 2) _tile_dpbf16ps(2, 5, 6);
    if constexpr (R == 2 && N == 2) _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, ldc * 4);
  if constexpr (N == 2) _tile_stored(1, c + kTile, ldc * 4);
  if constexpr (R == 2) _tile_stored(2, c + crow, ldc * 4);
  if constexpr (R == 2 && N == 2) _tile_stored(3, c + crow + kTile, ldc * 4);
}

// Rows [0, 16 R) of C, columns [c0, c1), then their bias.
template <int R>
void RowBlock(float* c, int ldc, const uint16_t* a, int lda, const uint32_t* b, int k, int c0,
              int c1, bool accumulate, const float* bias) {
  const size_t panel = size_t(k) / 2 * kTile;
  int j = c0;
  for (; j + 2 * kTile <= c1; j += 2 * kTile) {
    Block<R, 2>(c + j, ldc, a, lda, b + size_t(j / kTile) * panel, panel, k, accumulate);
  }
  if (j < c1) Block<R, 1>(c + j, ldc, a, lda, b + size_t(j / kTile) * panel, panel, k, accumulate);
  if (bias == nullptr) return;
  for (int r = 0; r < R * kTile; ++r) {
    float* row = c + size_t(r) * ldc;
    for (int col = c0; col < c1; ++col) row[col] += bias[col];
  }
}

// Rows [0, m) of C for m a multiple of 16.
void WholeTiles(float* c, int ldc, const uint16_t* a, int lda, const uint32_t* b, int m, int n,
                int k, bool accumulate, const float* bias) {
  for (int c0 = 0; c0 < n; c0 += kBlockCols) {
    const int c1 = std::min(n, c0 + kBlockCols);
    int r = 0;
    for (; r + 2 * kTile <= m; r += 2 * kTile) {
      RowBlock<2>(c + size_t(r) * ldc, ldc, a + size_t(r) * lda, lda, b, k, c0, c1, accumulate,
                  bias);
    }
    if (r < m) {
      RowBlock<1>(c + size_t(r) * ldc, ldc, a + size_t(r) * lda, lda, b, k, c0, c1, accumulate,
                  bias);
    }
  }
}

// Blocks of 32 rows, each written panel by panel: a panel's 16 rows of words (1 KiB) at a time.
// Row pair by row pair across all panels, every 64-byte store went to another panel, k / 2 * 64
// bytes on (32 KiB at k = 1024): at 3,072 columns 2.2x slower than the blocked walk with the
// input in cache, 1.3-1.6x from memory (bench/NOTES.md, tenth session).
template <typename T>
void PackRowsOf(uint32_t* out, const T* x, int ld, int k, int i0, int i1, int c0, int c1) {
  const size_t panel = size_t(k) / 2 * kTile;
  for (int b = i0; b < i1; b += 2 * kTile) {
    const int e = std::min(i1, b + 2 * kTile);
    for (int j = c0; j < c1; j += kTile) {
      uint32_t* o = out + size_t(j / kTile) * panel;
      for (int i = b; i < e; i += 2) {
        const T* even = x + size_t(i - i0) * ld + (j - c0);
        const __m512i word =
            _mm512_or_si512(Halves(even), _mm512_slli_epi32(Halves(even + ld), 16));
        _mm512_storeu_si512(o + size_t(i / 2) * kTile, word);
      }
    }
  }
}

// Each (32 of the sum, 16 columns) block: the 16 columns' words, transposed into 16 rows.
template <typename T>
void PackColumnsOf(uint32_t* out, const T* x, int ld, int k, int i0, int i1, int c0, int c1) {
  const size_t panel = size_t(k) / 2 * kTile;
  for (int j = c0; j < c1; j += kTile) {
    uint32_t* o = out + size_t(j / kTile) * panel;
    for (int i = i0; i < i1; i += 2 * kTile) {
      __m512i r[kTile];
      for (int q = 0; q < kTile; ++q) r[q] = Words(x + size_t(j - c0 + q) * ld + (i - i0));
      Transpose16(r);
      for (int q = 0; q < kTile; ++q) _mm512_storeu_si512(o + size_t(i / 2 + q) * kTile, r[q]);
    }
  }
}

}  // namespace

void PackRows(uint32_t* out, const float* x, int ld, int k, int i0, int i1, int c0, int c1) {
  PackRowsOf(out, x, ld, k, i0, i1, c0, c1);
}
void PackRows(uint32_t* out, const uint16_t* x, int ld, int k, int i0, int i1, int c0, int c1) {
  PackRowsOf(out, x, ld, k, i0, i1, c0, c1);
}
void PackColumns(uint32_t* out, const float* x, int ld, int k, int i0, int i1, int c0, int c1) {
  PackColumnsOf(out, x, ld, k, i0, i1, c0, c1);
}
void PackColumns(uint32_t* out, const uint16_t* x, int ld, int k, int i0, int i1, int c0, int c1) {
  PackColumnsOf(out, x, ld, k, i0, i1, c0, c1);
}

// Each (32 rows, 16 columns) block: pairs of rows into words (16 columns each), transposed into
// 16 rows of 16 words, each 32 bf16 of a column.
void TransposeToBf16(uint16_t* out, int ldo, const float* x, int ld, int k, int c0, int c1) {
  for (int j = c0; j < c1; j += kTile) {
    for (int i = 0; i < k; i += 2 * kTile) {
      __m512i r[kTile];
      for (int q = 0; q < kTile; ++q) {
        const float* even = x + size_t(i + 2 * q) * ld + j;
        r[q] = _mm512_or_si512(Halves(even), _mm512_slli_epi32(Halves(even + ld), 16));
      }
      Transpose16(r);
      for (int q = 0; q < kTile; ++q) _mm512_storeu_si512(out + size_t(j + q) * ldo + i, r[q]);
    }
  }
}

// Whole tiles of 16 rows straight; the last m % 16 rows through 16-row scratch (zero rows below
// them), whose rows' sums are theirs alone: the same bits as in a whole tile.
void Gemm(float* c, int ldc, const uint16_t* a, int lda, const uint32_t* b, int m, int n, int k,
          bool accumulate, const float* bias) {
  TileScope scope;
  const int whole = m / kTile * kTile;
  WholeTiles(c, ldc, a, lda, b, whole, n, k, accumulate, bias);
  const int rest = m - whole;
  if (rest == 0) return;
  thread_local std::vector<uint16_t> at;
  thread_local std::vector<float> ct;
  at.assign(size_t(kTile) * k, 0);
  ct.assign(size_t(kTile) * n, 0.0f);
  for (int r = 0; r < rest; ++r) {
    std::memcpy(at.data() + size_t(r) * k, a + size_t(whole + r) * lda, size_t(k) * 2);
    if (accumulate) std::memcpy(ct.data() + size_t(r) * n, c + size_t(whole + r) * ldc, n * 4);
  }
  WholeTiles(ct.data(), n, at.data(), k, b, kTile, n, k, accumulate, bias);
  for (int r = 0; r < rest; ++r) {
    std::memcpy(c + size_t(whole + r) * ldc, ct.data() + size_t(r) * n, n * 4);
  }
}

}  // namespace pp::kernels::amx

#else  // no AMX at compile time: never called (amx_gemm.h REQUIRES)

#include <cstdlib>

namespace pp::kernels::amx {
void PackRows(uint32_t*, const float*, int, int, int, int, int, int) { std::abort(); }
void PackRows(uint32_t*, const uint16_t*, int, int, int, int, int, int) { std::abort(); }
void PackColumns(uint32_t*, const float*, int, int, int, int, int, int) { std::abort(); }
void PackColumns(uint32_t*, const uint16_t*, int, int, int, int, int, int) { std::abort(); }
void TransposeToBf16(uint16_t*, int, const float*, int, int, int, int) { std::abort(); }
void Gemm(float*, int, const uint16_t*, int, const uint32_t*, int, int, int, bool, const float*) {
  std::abort();
}
}  // namespace pp::kernels::amx

#endif
