// Small bf16 products on AVX512-BF16 (bf16_tile_gemm.hpp). B is packed once per call as
// k-pairs, word (kp, n) = (B[2kp][n], B[2kp+1][n]) over [ceil(K/2), N rounded up to 16] (zero
// padded), the layout vdpbf16ps reads; A is read in place, a k-pair of row i being the 32-bit
// word at A + i lda + 2 kp, unless it is transposed or K is odd: then it is packed the same
// way as B (word (kp, i)). A tile of R rows x CV 16-column vectors keeps its sums in registers
// over the k-pairs of its range (causal limits per row tile) and is stored once.
#include "bf16_tile_gemm.hpp"

#include <algorithm>
#include <cstring>

#include <immintrin.h>

#include "pipetrain/error.hpp"
#include "vec_math.hpp"

namespace pt::host {

#if defined(__AVX512BF16__) && defined(__AVX512BW__)

bool tile_gemm_available() { return true; }

namespace {

// word (kp, n) of a [KP, width] pair array from element(k, n) of a [K, cols] operand
template <class Elem>
void pack_pairs(int64_t K, int64_t cols, int64_t width, uint32_t* out, Elem elem) {
  for (int64_t kp = 0; kp < (K + 1) / 2; ++kp) {
    uint32_t* row = out + kp * width;
    const int64_t k = 2 * kp;
    if (k + 1 < K)
      for (int64_t n = 0; n < cols; ++n) row[n] = static_cast<uint32_t>(elem(k, n)) | static_cast<uint32_t>(elem(k + 1, n)) << 16;
    else
      for (int64_t n = 0; n < cols; ++n) row[n] = elem(k, n);
    for (int64_t n = cols; n < width; ++n) row[n] = 0;
  }
}

// All-lanes forms of the shuffles below through their zero-masked intrinsics: GCC 12's plain
// ones pass an undefined vector as the unused merge source, which -Wmaybe-uninitialized flags.
inline __m512i lo32(__m512i a, __m512i b) { return _mm512_maskz_unpacklo_epi32(0xffff, a, b); }
inline __m512i hi32(__m512i a, __m512i b) { return _mm512_maskz_unpackhi_epi32(0xffff, a, b); }
inline __m512i lo64(__m512i a, __m512i b) { return _mm512_maskz_unpacklo_epi64(0xff, a, b); }
inline __m512i hi64(__m512i a, __m512i b) { return _mm512_maskz_unpackhi_epi64(0xff, a, b); }
template <int Imm>
inline __m512i lanes(__m512i a, __m512i b) { return _mm512_maskz_shuffle_i32x4(0xffff, a, b, Imm); }

// r[j] = column j of the 16 x 16 matrix of 32-bit words whose row i was r[i]: pairs of rows
// interleaved by word, then by word pair (each 128-bit lane then holds a 4 x 4 block
// transposed), then the lanes gathered across the four row groups
inline void transpose16(__m512i (&r)[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) t[i] = lo32(r[i], r[i + 1]), t[i + 1] = hi32(r[i], r[i + 1]);
  __m512i u[16];  // u[4 g + m], lane L: column 4 L + m of rows 4 g .. 4 g + 3
  for (int g = 0; g < 16; g += 4) {
    u[g] = lo64(t[g], t[g + 2]), u[g + 1] = hi64(t[g], t[g + 2]);
    u[g + 2] = lo64(t[g + 1], t[g + 3]), u[g + 3] = hi64(t[g + 1], t[g + 3]);
  }
  for (int m = 0; m < 4; ++m) {
    const __m512i v0 = lanes<0x44>(u[m], u[4 + m]), v1 = lanes<0xEE>(u[m], u[4 + m]);
    const __m512i w0 = lanes<0x44>(u[8 + m], u[12 + m]), w1 = lanes<0xEE>(u[8 + m], u[12 + m]);
    r[m] = lanes<0x88>(v0, w0), r[4 + m] = lanes<0xDD>(v0, w0);
    r[8 + m] = lanes<0x88>(v1, w1), r[12 + m] = lanes<0xDD>(v1, w1);
  }
}

// The same for a transposed operand with K even (Bt [N, K], row stride ld): word (kp, n) is the
// 32-bit word at Bt + n ld + 2 kp, so the pair array is the transpose of Bt read as [N, K/2]
// words: 16 x 16 blocks loaded a row of Bt each (zeros past N and K/2), transposed in
// registers, stored a row of the array each (a gather per 16 words was a fifth of the
// kernel's time on the q k^T and do v^T products; 16 x 16 transposes cost a quarter of that)
void pack_pairs_transposed(int64_t K, int64_t cols, int64_t width, uint32_t* out, const uint16_t* bt, int64_t ld) {
  const int64_t KP = K / 2;
  for (int64_t k0 = 0; k0 < KP; k0 += kW) {
    const int64_t kn = std::min<int64_t>(kW, KP - k0);
    const __mmask16 km = kn == kW ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << kn) - 1);
    for (int64_t n0 = 0; n0 < width; n0 += kW) {
      __m512i r[16];
      for (int i = 0; i < 16; ++i)
        r[i] = n0 + i < cols ? _mm512_maskz_loadu_epi32(km, bt + (n0 + i) * ld + 2 * k0) : _mm512_setzero_si512();
      transpose16(r);
      for (int64_t j = 0; j < kn; ++j) _mm512_storeu_si512(out + (k0 + j) * width + n0, r[j]);
    }
  }
}

struct Operands {
  const uint16_t* a;  // k-pair kp of row i: the word at a + i rs + kp ks (uint16 units)
  int64_t rs, ks;
  const uint32_t* b;  // [KP, np]
  int64_t np;
  const TileGemm* g;
};

// Row i, columns [col, col + 16) of C from the sums v (fewer past N).
inline void store(const TileGemm& g, int64_t i, int64_t col, __m512 v) {
  const int64_t n = std::min<int64_t>(kW, g.N - col);
  if (!g.c_bf16) {
    const __mmask16 m = n == kW ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1);
    return _mm512_mask_storeu_ps(g.C + i * g.ldc + col, m, v);
  }
  vec16 f;
  std::memcpy(&f, &v, sizeof f);
  const vec16h h = bf16_half16(f);
  std::memcpy(reinterpret_cast<uint16_t*>(g.C) + i * g.ldc + col, &h, static_cast<size_t>(2 * n));
}

template <int R, int CV>
void tile(const Operands& x, int64_t i0, int64_t v0, int64_t kp0, int64_t kp1) {
  __m512 acc[R][CV];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < CV; ++c) acc[r][c] = _mm512_setzero_ps();
  const uint16_t* a = x.a + i0 * x.rs;
  const uint32_t* b = x.b + v0 * kW;
  for (int64_t kp = kp0; kp < kp1; ++kp) {
    __m512bh bv[CV];
    for (int c = 0; c < CV; ++c) bv[c] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b + kp * x.np + c * kW));
    for (int r = 0; r < R; ++r) {
      uint32_t w;
      std::memcpy(&w, a + r * x.rs + kp * x.ks, sizeof w);
      const __m512bh av = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(w)));
      for (int c = 0; c < CV; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], av, bv[c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < CV; ++c) store(*x.g, i0 + r, (v0 + c) * kW, acc[r][c]);
}

template <int R>
void tile_cols(int cv, const Operands& x, int64_t i0, int64_t v0, int64_t kp0, int64_t kp1) {
  switch (cv) {
    case 1: return tile<R, 1>(x, i0, v0, kp0, kp1);
    case 2: return tile<R, 2>(x, i0, v0, kp0, kp1);
    case 3: return tile<R, 3>(x, i0, v0, kp0, kp1);
    default: return tile<R, 4>(x, i0, v0, kp0, kp1);
  }
}

template <int R>
void tile_narrow(int cv, const Operands& x, int64_t i0, int64_t v0, int64_t kp0, int64_t kp1) {
  if (cv == 1) return tile<R, 1>(x, i0, v0, kp0, kp1);
  PT_CHECK(cv == 2, "tile_gemm_bf16: " << R << " rows with " << cv << " column vectors");
  tile<R, 2>(x, i0, v0, kp0, kp1);
}

// rows in [1, 8], cv in [1, 4] (R x CV <= 16 accumulators as the driver picks them)
void run_tile(int rows, int cv, const Operands& x, int64_t i0, int64_t v0, int64_t kp0, int64_t kp1) {
  switch (rows) {
    case 1: return tile_cols<1>(cv, x, i0, v0, kp0, kp1);
    case 2: return tile_cols<2>(cv, x, i0, v0, kp0, kp1);
    case 3: return tile_cols<3>(cv, x, i0, v0, kp0, kp1);
    case 4: return tile_cols<4>(cv, x, i0, v0, kp0, kp1);
    case 5: return tile_narrow<5>(cv, x, i0, v0, kp0, kp1);  // rows > 4: the narrow case (cv <= 2)
    case 6: return tile_narrow<6>(cv, x, i0, v0, kp0, kp1);
    case 7: return tile_narrow<7>(cv, x, i0, v0, kp0, kp1);
    default: return tile_narrow<8>(cv, x, i0, v0, kp0, kp1);
  }
}

}  // namespace

void tile_gemm_bf16(const TileGemm& g, std::vector<uint32_t>& scratch) {
  PT_CHECK(g.M > 0 && g.N > 0 && g.K > 0, "tile_gemm_bf16: empty product " << g.M << "x" << g.N << "x" << g.K);
  const int64_t KP = (g.K + 1) / 2, np = pad16(g.N);
  const bool pack_a = g.a_trans || g.K % 2 != 0;
  scratch.resize(static_cast<size_t>(KP * np + (pack_a ? KP * g.M : 0)));
  uint32_t* bp = scratch.data();
  if (g.b_trans && g.K % 2 == 0) pack_pairs_transposed(g.K, g.N, np, bp, g.B, g.ldb);
  else if (g.b_trans) pack_pairs(g.K, g.N, np, bp, [&](int64_t k, int64_t n) { return g.B[n * g.ldb + k]; });
  else pack_pairs(g.K, g.N, np, bp, [&](int64_t k, int64_t n) { return g.B[k * g.ldb + n]; });
  Operands x{g.A, g.lda, 2, bp, np, &g};
  if (pack_a) {
    uint32_t* ap = bp + KP * np;
    if (g.a_trans) pack_pairs(g.K, g.M, g.M, ap, [&](int64_t k, int64_t i) { return g.A[k * g.lda + i]; });
    else pack_pairs(g.K, g.M, g.M, ap, [&](int64_t k, int64_t i) { return g.A[i * g.lda + k]; });
    x.a = reinterpret_cast<const uint16_t*>(ap), x.rs = 2, x.ks = 2 * g.M;
  }
  const bool narrow = np <= 2 * kW;
  const int R = narrow ? 8 : 4, CV = narrow ? 2 : 4;
  for (int64_t i0 = 0; i0 < g.M; i0 += R) {
    const int rows = static_cast<int>(std::min<int64_t>(R, g.M - i0));
    const int64_t last = i0 + rows - 1;
    int64_t nv = np / kW, kp0 = 0, kp1 = KP;
    if (g.causal == TileGemm::Causal::cols) nv = std::min(nv, last / kW + 1);
    if (g.causal == TileGemm::Causal::k_lower) kp1 = std::min(KP, last / 2 + 1);
    if (g.causal == TileGemm::Causal::k_upper) kp0 = std::min(KP, i0 / 2);
    for (int64_t v0 = 0; v0 < nv; v0 += CV) run_tile(rows, static_cast<int>(std::min<int64_t>(CV, nv - v0)), x, i0, v0, kp0, kp1);
  }
}

#else

bool tile_gemm_available() { return false; }
void tile_gemm_bf16(const TileGemm&, std::vector<uint32_t>&) {
  PT_CHECK(false, "tile_gemm_bf16: this build has no AVX512-BF16 (tile_gemm_available() is false)");
}

#endif

}  // namespace pt::host
