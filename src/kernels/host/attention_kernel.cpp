// The host's fused causal attention core (Backend::attention_forward / attention_backward,
// backend.hpp), per (sample, head), one at a time (the host backend runs one thread per rank).
// fp32: q, k, v (and the output gradient) are gathered from the token-major projection
// buffers into zero-padded tiles of T x dh (rows and features padded to 16 floats), and the
// products run on the tiles in 16-float vector registers over the causal triangle only (keys j <= query i): about half the multiply-adds of the
// full [T, T] products that the composed path (heads_split, batched GEMMs, softmax,
// heads_merge) spends, and none of its permutation passes. The softmax rows are
// vec_math.hpp's, the ones causal_softmax_forward/backward use.
// Numerics: every product element is an fp32 sum of exact products in a fixed order
// (ascending key or query index, one fused multiply-add each), so a run is bitwise
// reproducible; against the composed path only the summation order differs (fp32 rounding,
// tested in tests/unit/test_attention_kernel.cpp against a double reference).
// bf16: the products on bf16 operands straight from the token-major buffers (below); the
// probabilities are kept as a bf16 view (rounded once, as autocast's softmax of bf16 scores
// returns them), which the dv product and the softmax backward both read, as autocast's do.
// Selective recomputation passes no P: the forward then keeps no probabilities, and the
// backward recomputes each head's from its q and k tiles with the forward's own scores and
// softmax rows before using them, so they are bitwise what the forward would have stored.
#include <algorithm>
#include <cstring>
#include <vector>

#include <immintrin.h>

#include "bf16_tile_gemm.hpp"
#include "host_backend.hpp"
#include "onednn.hpp"
#include "pipetrain/error.hpp"
#include "vec_math.hpp"

namespace pt::host {
namespace {

// For the copy loops below: GCC would turn each into a libc memcpy call per row of 32-128
// floats, which measured slower than the copies themselves (20% of the kernel's time).
#define PT_NO_MEMCPY_CALLS __attribute__((optimize("no-tree-loop-distribute-patterns")))

// Zero-padded tiles of one (sample, head): rows [Tp, dp] (a row per position) and [Tp, Tp]
// triangles; padding is zeroed once per call and never written.
struct Tiles {
  int64_t T, Tp, dh, dp;
  std::vector<float> mem;
  float *a, *b, *c, *d;  // [Tp, dp] row tiles
  float *kt;             // [dp, Tp]: a row tile transposed (keys along the vector)
  float *s, *p;          // [Tp, Tp]: scores / dP / dS, and probabilities as products read them
  float* pf = nullptr;   // [Tp, Tp]: recomputed fp32 probabilities (a backward without P)
  Tiles(int64_t T_, int64_t dh_, bool recompute = false) : T(T_), Tp(pad16(T_)), dh(dh_), dp(pad16(dh_)) {
    const int64_t row = Tp * dp, tri = Tp * Tp;
    mem.assign(static_cast<size_t>(5 * row + (recompute ? 3 : 2) * tri), 0.0f);
    a = mem.data(), b = a + row, c = b + row, d = c + row, kt = d + row, s = kt + row, p = s + tri;
    if (recompute) pf = p + tri;
  }
  // rows t < T of the [T, dh] slice at element `off` of src (row stride ld) -> tile [Tp, dp]
  PT_NO_MEMCPY_CALLS void gather(const float* src, int64_t off, int64_t ld, float* tile) const {
    for (int64_t t = 0; t < T; ++t) {
      const float* x = src + off + t * ld;
      float* y = tile + t * dp;
      int64_t e = 0;
      for (; e + kW <= dh; e += kW) store(y + e, load(x + e));
      for (; e < dh; ++e) y[e] = x[e];
    }
  }
  // start loading the rows gather(src, off, ld) will read (the next head's, while this one
  // computes: each row is a separate cache line of a large token-major buffer)
  void prefetch(const float* src, int64_t off, int64_t ld) const {
    for (int64_t t = 0; t < T; ++t)
      for (int64_t e = 0; e < dh; e += 16) __builtin_prefetch(src + off + t * ld + e);
  }
  // the same, transposed into kt [dp, Tp], through the row tile `rows` (contiguous reads)
  void gather_transposed(const float* src, int64_t off, int64_t ld, float* rows, float* tile) const {
    gather(src, off, ld, rows);
    for (int64_t e = 0; e < dh; ++e)  // contiguous writes; the strided reads hit L1
      for (int64_t t = 0; t < T; ++t) tile[e * Tp + t] = rows[t * dp + e];
  }
};

constexpr int kRows = 8;  // rows per block of the products below (Tp is a multiple of 16)

// The element offset of (sample s, head h)'s first value in a token-major buffer with rows of
// `width` floats; head_offset(g, s, h + 1, width) is the next head's, -1 after the last.
int64_t head_offset(const AttentionGeom& g, int64_t s, int64_t h, int64_t width) {
  if (h == g.H) ++s, h = 0;
  return s < g.n ? s * g.T * width + h * g.dh : -1;
}

// s[i, 16 jb ..] = scale * a[i, :] . kt[:, 16 jb ..] for the 8 query rows i from i0 and NV
// key vectors from jb (8 NV accumulators in flight)
template <int NV>
void scores_block(const Tiles& t, const float* a, float scale, int64_t i0, int64_t jb, float* s) {
  constexpr int R = kRows;
  const int64_t Tp = t.Tp, dp = t.dp;
  const float* q = a + i0 * dp;
  vec16 acc[R][NV] = {};
  const float* kv = t.kt + jb * kW;
  for (int64_t e = 0; e < t.dh; ++e) {
    vec16 k[NV];
    for (int v = 0; v < NV; ++v) k[v] = load(kv + e * Tp + v * kW);
    for (int r = 0; r < R; ++r) {
      const float qr = q[r * dp + e];
      for (int v = 0; v < NV; ++v) acc[r][v] += qr * k[v];
    }
  }
  for (int r = 0; r < R && i0 + r < t.T; ++r)
    for (int v = 0; v < NV; ++v) store(s + (i0 + r) * Tp + (jb + v) * kW, acc[r][v] * scale);
}

// s = scale * a kt over every key vector that holds a key j <= i for some row i of a group of
// 8 query rows (the group's rows share their 16-key blocks), two key vectors at a time
void scores(const Tiles& t, const float* a, float scale, float* s) {
  for (int64_t i0 = 0; i0 < t.T; i0 += kRows) {
    const int64_t nvec = i0 / kW + 1;
    int64_t jb = 0;
    for (; jb + 2 <= nvec; jb += 2) scores_block<2>(t, a, scale, i0, jb, s);
    if (jb < nvec) scores_block<1>(t, a, scale, i0, jb, s);
  }
}

// row i of a product, NV vectors from column c0, into out (its first dh - c0 columns only)
template <int NV>
PT_NO_MEMCPY_CALLS inline void store_row(const Tiles& t, const vec16 (&acc)[NV], float scale, int64_t c0, float* out) {
  const int64_t m = std::min<int64_t>(NV * kW, t.dh - c0);
  if (m == NV * kW) {
    for (int v = 0; v < NV; ++v) store(out + c0 + v * kW, acc[v] * scale);
    return;
  }
  float row[NV * kW];
  for (int v = 0; v < NV; ++v) store(row + v * kW, acc[v] * scale);
  for (int64_t e = 0; e < m; ++e) out[c0 + e] = row[e];
}

// out[i, :dh] = scale * sum_{j <= i} w[i, j] x[j, :], for rows i < T, out row stride ld.
// w is a [Tp, Tp] triangle (zeros above the diagonal), x a [Tp, dp] row tile. R rows at a
// time (R x NV accumulators in flight; the zeros above the diagonal inside a block add +0).
template <int NV>
void rows_block(const Tiles& t, const float* w, const float* x, int64_t c0, float scale, float* out, int64_t ld) {
  constexpr int R = kRows;
  const int64_t Tp = t.Tp, dp = t.dp;
  for (int64_t i0 = 0; i0 < t.T; i0 += R) {
    vec16 acc[R][NV] = {};
    const int64_t jend = std::min(i0 + R, t.T);
    for (int64_t j = 0; j < jend; ++j) {
      vec16 xv[NV];
      for (int v = 0; v < NV; ++v) xv[v] = load(x + j * dp + c0 + v * kW);
      for (int r = 0; r < R; ++r) {
        const float wr = w[(i0 + r) * Tp + j];
        for (int v = 0; v < NV; ++v) acc[r][v] += wr * xv[v];
      }
    }
    for (int r = 0; r < R && i0 + r < t.T; ++r) store_row<NV>(t, acc[r], scale, c0, out + (i0 + r) * ld);
  }
}

// out[j, :dh] = scale * sum_{i >= j} w[i, j] x[i, :] (the transposed triangle times x).
template <int NV>
void cols_block(const Tiles& t, const float* w, const float* x, int64_t c0, float scale, float* out, int64_t ld) {
  constexpr int R = kRows;
  const int64_t Tp = t.Tp, dp = t.dp;
  for (int64_t j0 = 0; j0 < t.T; j0 += R) {
    vec16 acc[R][NV] = {};
    for (int64_t i = j0; i < t.T; ++i) {
      vec16 xv[NV];
      for (int v = 0; v < NV; ++v) xv[v] = load(x + i * dp + c0 + v * kW);
      for (int r = 0; r < R; ++r) {
        const float wr = w[i * Tp + j0 + r];
        for (int v = 0; v < NV; ++v) acc[r][v] += wr * xv[v];
      }
    }
    for (int r = 0; r < R && j0 + r < t.T; ++r) store_row<NV>(t, acc[r], scale, c0, out + (j0 + r) * ld);
  }
}

// The feature columns in chunks of two vectors (8 accumulators), then one.
template <bool Transposed>
void product(const Tiles& t, const float* w, const float* x, float scale, float* out, int64_t ld) {
  int64_t c0 = 0;
  for (; c0 + 2 * kW <= t.dp; c0 += 2 * kW)
    Transposed ? cols_block<2>(t, w, x, c0, scale, out, ld) : rows_block<2>(t, w, x, c0, scale, out, ld);
  if (c0 < t.dp) Transposed ? cols_block<1>(t, w, x, c0, scale, out, ld) : rows_block<1>(t, w, x, c0, scale, out, ld);
}

// the [T, T] matrix m into the triangle tile (zeros past the diagonal come along)
PT_NO_MEMCPY_CALLS void load_triangle(const Tiles& t, const float* m, float* tile) {
  for (int64_t i = 0; i < t.T; ++i) {
    const float* x = m + i * t.T;
    float* y = tile + i * t.Tp;
    int64_t j = 0;
    for (; j + kW <= t.T; j += kW) store(y + j, load(x + j));
    for (; j < t.T; ++j) y[j] = x[j];
  }
}

// a probability row of T floats out to Pr (null: nothing kept, selective recomputation), and
// into the triangle tile
PT_NO_MEMCPY_CALLS void copy_row(const Tiles& t, const float* r, float* Pr, float* tile) {
  int64_t j = 0;
  if (!Pr) {
    for (; j + kW <= t.T; j += kW) store(tile + j, load(r + j));
    for (; j < t.T; ++j) tile[j] = r[j];
    return;
  }
  [[maybe_unused]] const bool stream = (reinterpret_cast<uintptr_t>(Pr) & 63) == 0;  // AVX512 only
  for (; j + kW <= t.T; j += kW) {
    const vec16 v = load(r + j);
#ifdef __AVX512F__
    if (stream) _mm512_stream_ps(Pr + j, reinterpret_cast<__m512>(v));
    else store(Pr + j, v);
#else
    store(Pr + j, v);
#endif
    store(tile + j, v);
  }
  for (; j < t.T; ++j) Pr[j] = r[j], tile[j] = r[j];
}

// One head's probabilities again from its q (tile a) and k (transposed in kt), as the forward
// computes them: scores, then each softmax row into pf (fp32) and the tile p (rounded).
void recompute_probabilities(Tiles& t, float scale) {
  scores(t, t.a, scale, t.pf);
  for (int64_t i = 0; i < t.T; ++i) {
    float* r = t.pf + i * t.Tp;
    causal_softmax_row(r, r, i + 1, t.T);
    copy_row(t, r, nullptr, t.p + i * t.Tp);
  }
}

}  // namespace

void HostFused::attention_forward(const AttentionGeom& g, CView qkv, View P, View o_view) {
  const int64_t T = g.T, D = g.H * g.dh, TT = T * T;
  if (g.precision == Precision::bf16) return attention_forward_bf16(g, qkv, P, o_view);
  PT_CHECK(!qkv.bf16() && !o_view.bf16() && !P.bf16(), "attention_forward: bf16 views in fp32");
  Tiles t(T, g.dh);
  float* o = o_view.data;
  for (int64_t s = 0; s < g.n; ++s)
    for (int64_t h = 0; h < g.H; ++h) {
      const float* x = qkv.data;
      const int64_t q = head_offset(g, s, h, 3 * D), next = head_offset(g, s, h + 1, 3 * D);  // k at +D, v at +2D
      const int64_t ph = (s * g.H + h) * TT;  // the head's probabilities in P
      t.gather(x, q, 3 * D, t.a);
      t.gather_transposed(x, q + D, 3 * D, t.b, t.kt);
      t.gather(x, q + 2 * D, 3 * D, t.c);
      if (next >= 0)  // the next head's q, k, v rows
        for (int part = 0; part < 3; ++part) t.prefetch(x, next + part * D, 3 * D);
      scores(t, t.a, g.scale, t.s);
      for (int64_t i = 0; i < T; ++i) {  // softmax in the tile (cache), then out to P
        float* r = t.s + i * t.Tp;
        causal_softmax_row(r, r, i + 1, T);
        copy_row(t, r, P.data ? P.data + ph + i * T : nullptr, t.p + i * t.Tp);
      }
      product<false>(t, t.p, t.c, 1.0f, o + head_offset(g, s, h, D), D);
    }
}

void HostFused::attention_backward(const AttentionGeom& g, CView qkv, CView P, const float* dout,
                                     View dqkv_view) {
  const int64_t T = g.T, D = g.H * g.dh, TT = T * T;
  if (g.precision == Precision::bf16) return attention_backward_bf16(g, qkv, P, dout, dqkv_view);
  PT_CHECK(!qkv.bf16() && !dqkv_view.bf16() && !P.bf16(), "attention_backward: bf16 views in fp32");
  const bool kept = P.data != nullptr;
  Tiles t(T, g.dh, !kept);
  float* dqkv = dqkv_view.data;
  for (int64_t s = 0; s < g.n; ++s)
    for (int64_t h = 0; h < g.H; ++h) {
      const float *x = qkv.data, *dy = dout;
      const int64_t q = head_offset(g, s, h, 3 * D), next = head_offset(g, s, h + 1, 3 * D);
      float* dx = dqkv + q;
      t.gather(x, q, 3 * D, t.a);  // q
      if (kept) {
        t.gather(x, q + D, 3 * D, t.b);  // k
      } else {
        t.gather_transposed(x, q + D, 3 * D, t.b, t.kt);  // k, and k^T for the scores
        recompute_probabilities(t, g.scale);
      }
      t.gather_transposed(x, q + 2 * D, 3 * D, t.c, t.kt);  // v^T
      t.gather(dy, head_offset(g, s, h, D), D, t.d);        // do
      if (next >= 0) {  // the next head's rows
        for (int part = 0; part < 3; ++part) t.prefetch(x, next + part * D, 3 * D);
        t.prefetch(dy, head_offset(g, s, h + 1, D), D);
      }
      scores(t, t.d, 1.0f, t.s);                     // dP = do v^T (the triangle)
      if (kept) load_triangle(t, P.data + (s * g.H + h) * TT, t.p);
      product<true>(t, t.p, t.d, 1.0f, dx + 2 * D, 3 * D);  // dv = P^T do
      for (int64_t i = 0; i < T; ++i) {
        float* r = t.s + i * t.Tp;
        causal_softmax_grad_row(t.p + i * t.Tp, r, r, i + 1, T);  // dS, zeros after the diagonal
      }
      product<false>(t, t.s, t.b, g.scale, dx, 3 * D);     // dq = scale dS k
      product<true>(t, t.s, t.a, g.scale, dx + D, 3 * D);  // dk = scale dS^T q
    }
}

// ---- bf16: the products on the tile kernel or oneDNN's matmul -----------------------------
// In bf16 every product reads bf16 operands, so they run straight from the token-major
// buffers, on bf16_tile_gemm.cpp's AVX512-BF16 kernel over the causal half (no AMX) or on
// oneDNN's matmul over the whole square (AMX tiles; or no AVX512-BF16): q, k, v
// of a head are [T, dh] slices with row stride 3D, o and do slices with row stride D (no
// gathers, no permutations). Per (sample, head): S = scale q k^T, the causal softmax rows
// here (fp32, the rows of vec_math.hpp), P rounded once to bf16 (kept in P, or a scratch
// under selective recomputation, recomputed in the backward by the same two steps), o = P v;
// backward dP = do v^T, dv = P^T do, dS = P (dP - rowsum(P dP)) from the bf16 P, rounded,
// dq = scale dS k, dk = scale dS^T q. On oneDNN the products cover the whole [T, T] square
// (the zeros above the diagonal of P and dS add nothing): twice the multiply-adds of the
// triangle, at the matrix units' rate; the tile kernel skips them (tinygpt bf16 +2.5%,
// 2026-12-05, a Zen 5 EPYC where oneDNN ran these shapes on gemm:jit at about a third of the
// bf16 rate). The scale is applied to the fp32 results here, not as
// oneDNN's output scale (which made its matmul 4-7x slower on these shapes): the same fp32
// product scale * acc either way. An f32 qkv view (tests) is rounded into a bf16 copy first,
// so it takes the same products; outputs are written as their views say.
namespace {

const float* elem(const float* bf16_base, int64_t e) {  // element e of a bf16 array, as GemmArgs takes it
  return reinterpret_cast<const float*>(reinterpret_cast<const uint16_t*>(bf16_base) + e);
}
float* elem(float* bf16_base, int64_t e) { return reinterpret_cast<float*>(reinterpret_cast<uint16_t*>(bf16_base) + e); }

// C = op(A) op(B), A and B bf16 with their row strides, C an f32 or bf16 view (ldc), on the
// causal tile kernel where the CPU has AVX512-BF16 and no AMX (bf16_tile_gemm.hpp: `causal`
// says which zeros of op(A) or which part of C it may skip), else on oneDNN's matmul (the
// whole square)
using Causal = TileGemm::Causal;
// The tile kernel where it is built and oneDNN has no AMX: with AMX tiles oneDNN's matmul is
// the faster one (the kernel's dot products are AVX512-BF16's).
bool use_tile_kernel() { return tile_gemm_available() && onednn_isa_name().find("amx") == std::string::npos; }
void product(OneDnn& d, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
             int64_t ldb, View C, int64_t c_off, int64_t ldc, Causal causal) {
  static const bool tiles = use_tile_kernel();
  if (tiles) {
    static thread_local std::vector<uint32_t> scratch;
    TileGemm t;
    t.M = M, t.N = N, t.K = K, t.causal = causal;
    t.A = reinterpret_cast<const uint16_t*>(A), t.lda = lda, t.a_trans = ta;
    t.B = reinterpret_cast<const uint16_t*>(B), t.ldb = ldb, t.b_trans = tb;
    t.C = C.bf16() ? elem(C.data, c_off) : C.data + c_off, t.ldc = ldc, t.c_bf16 = C.bf16();
    return tile_gemm_bf16(t, scratch);
  }
  GemmArgs a;
  a.ta = ta, a.tb = tb, a.M = M, a.N = N, a.K = K;
  a.A = A, a.lda = lda, a.B = B, a.ldb = ldb, a.a_bf16 = a.b_bf16 = true;
  a.C = C.bf16() ? elem(C.data, c_off) : C.data + c_off, a.ldc = ldc, a.c_bf16 = C.bf16();
  d.gemm(Precision::bf16, a);
}

// x as a bf16 array: itself, or its n values rounded into `copy`
const float* as_bf16_array(CView x, size_t n, std::vector<uint16_t>& copy) {
  if (x.bf16()) return x.data;
  copy.resize(n);
  to_bf16(n, x.data, copy.data());
  return reinterpret_cast<const float*>(copy.data());
}

// P of one head (bf16, [T, T]) from q and k at element q0 of the bf16 qkv x: S = scale q k^T
// into s (rows of pad16(T) floats: s holds T pad16(T)), then each causal softmax row, rounded
// into pb (and, for an f32 P view, its fp32 values into pf). A row runs over whole 16-float
// vectors, the lanes past its diagonal masked (-inf scores, so 0 after the exponential): no
// scalar tails on these short rows, and the same bits as causal_softmax_row (the max is
// exact; the masked lanes add +0 to the same lane sums in the same order).
void probabilities(OneDnn& d, const AttentionGeom& g, const float* x, int64_t q0, float* s, uint16_t* pb,
                   float* pf) {
  const int64_t T = g.T, Tp = pad16(T), D3 = 3 * g.H * g.dh;
  product(d, false, true, T, T, g.dh, elem(x, q0), D3, elem(x, q0 + D3 / 3), D3, View{s}, 0, Tp, Causal::cols);
  const float minus_inf = -__builtin_inff();
  for (int64_t i = 0; i < T; ++i) {
    float* r = s + i * Tp;
    const int64_t len = i + 1, L = pad16(len), kept = std::min(L, T);
    float mx[kLanes], acc[kLanes] = {};
    for (int l = 0; l < kLanes; ++l) mx[l] = minus_inf;
    for (int64_t k = 0; k < L; k += kLanes)
      for (int l = 0; l < kLanes; ++l) {
        const float v = k + l < len ? r[k + l] * g.scale : minus_inf;
        r[k + l] = v;
        mx[l] = v > mx[l] ? v : mx[l];
      }
    float m = mx[0];
    for (int l = 1; l < kLanes; ++l) m = mx[l] > m ? mx[l] : m;
    for (int64_t k = 0; k < L; k += kLanes)
      for (int l = 0; l < kLanes; ++l) {
        const float e = exp_approx(r[k + l] - m);
        r[k + l] = e;
        acc[l] += e;
      }
    float sum = 0;
    for (int l = 0; l < kLanes; ++l) sum += acc[l];
    const float inv = 1.0f / sum;
    for (int64_t k = 0; k < L; ++k) r[k] *= inv;
    pack_bf16_span(static_cast<size_t>(kept), r, pb + i * T);
    std::fill(pb + i * T + kept, pb + (i + 1) * T, uint16_t{0});
    if (!pf) continue;
    std::copy(r, r + kept, pf + i * T);
    std::fill(pf + i * T + kept, pf + (i + 1) * T, 0.0f);
  }
}

// rows [T, dh] of the fp32 product c times scale into the view at c_off (row stride ldc)
void scaled_rows(const float* c, int64_t T, int64_t dh, float scale, View out, int64_t c_off, int64_t ldc, float* row) {
  for (int64_t i = 0; i < T; ++i) {
    for (int64_t e = 0; e < dh; ++e) row[e] = c[i * dh + e] * scale;
    if (out.bf16()) pack_bf16_span(static_cast<size_t>(dh), row, reinterpret_cast<uint16_t*>(out.data) + c_off + i * ldc);
    else std::copy(row, row + dh, out.data + c_off + i * ldc);
  }
}

}  // namespace

void HostFused::attention_forward_bf16(const AttentionGeom& g, CView qkv, View P, View o) {
  const int64_t T = g.T, D = g.H * g.dh, TT = T * T;
  const bool keep_bf16 = P.data && P.bf16();  // P kept as a bf16 view: the products read it there
  std::vector<uint16_t> xcopy, pscratch(keep_bf16 ? 0 : static_cast<size_t>(TT));
  const float* x = as_bf16_array(qkv, static_cast<size_t>(g.n * T * 3 * D), xcopy);
  std::vector<float> s(static_cast<size_t>(T * pad16(T)));
  OneDnn& d = hb_.onednn();
  for (int64_t sm = 0; sm < g.n; ++sm)
    for (int64_t h = 0; h < g.H; ++h) {
      const int64_t q = head_offset(g, sm, h, 3 * D), ph = (sm * g.H + h) * TT;
      uint16_t* pb = keep_bf16 ? reinterpret_cast<uint16_t*>(P.data) + ph : pscratch.data();
      probabilities(d, g, x, q, s.data(), pb, P.data && !P.bf16() ? P.data + ph : nullptr);
      product(d, false, false, T, g.dh, T, reinterpret_cast<const float*>(pb), T, elem(x, q + 2 * D), 3 * D, o,
              head_offset(g, sm, h, D), D, Causal::k_lower);
    }
}

void HostFused::attention_backward_bf16(const AttentionGeom& g, CView qkv, CView P, const float* dout, View dqkv) {
  const int64_t T = g.T, D = g.H * g.dh, TT = T * T;
  std::vector<uint16_t> xcopy, docopy, pscratch(static_cast<size_t>(TT)), ds(static_cast<size_t>(TT));
  const float* x = as_bf16_array(qkv, static_cast<size_t>(g.n * T * 3 * D), xcopy);
  const float* dob = as_bf16_array(dout, static_cast<size_t>(g.n * T * D), docopy);
  std::vector<float> s(static_cast<size_t>(T * pad16(T))), prow(static_cast<size_t>(std::max(T, g.dh))), c(static_cast<size_t>(T * g.dh));
  OneDnn& d = hb_.onednn();
  for (int64_t sm = 0; sm < g.n; ++sm)
    for (int64_t h = 0; h < g.H; ++h) {
      const int64_t q = head_offset(g, sm, h, 3 * D), ph = (sm * g.H + h) * TT, od = head_offset(g, sm, h, D);
      const uint16_t* pb = pscratch.data();
      if (!P.data) probabilities(d, g, x, q, s.data(), pscratch.data(), nullptr);  // selective: as the forward
      else if (P.bf16()) pb = reinterpret_cast<const uint16_t*>(P.data) + ph;
      else to_bf16(static_cast<size_t>(TT), P.data + ph, pscratch.data());
      const auto* pbf = reinterpret_cast<const float*>(pb);
      product(d, false, true, T, T, g.dh, elem(dob, od), D, elem(x, q + 2 * D), 3 * D, View{s.data()}, 0, T, Causal::cols);  // dP
      product(d, true, false, T, g.dh, T, pbf, T, elem(dob, od), D, dqkv, q + 2 * D, 3 * D, Causal::k_upper);  // dv
      for (int64_t i = 0; i < T; ++i) {  // dS from the bf16 P, rounded for the products
        const int64_t kept = std::min(pad16(i + 1), T);  // whole vectors up to the diagonal; zeros after it
        for (int64_t j = 0; j < kept; ++j) prow[static_cast<size_t>(j)] = bf16_to_float(pb[i * T + j]);
        float* r = s.data() + i * T;
        causal_softmax_grad_row(prow.data(), r, r, i + 1, T);
        pack_bf16_span(static_cast<size_t>(kept), r, ds.data() + i * T);
        std::fill(ds.data() + i * T + kept, ds.data() + (i + 1) * T, uint16_t{0});
      }
      const auto* dsb = reinterpret_cast<const float*>(ds.data());
      product(d, false, false, T, g.dh, T, dsb, T, elem(x, q + D), 3 * D, View{c.data()}, 0, g.dh, Causal::k_lower);  // dq / scale
      scaled_rows(c.data(), T, g.dh, g.scale, dqkv, q, 3 * D, prow.data());
      product(d, true, false, T, g.dh, T, dsb, T, elem(x, q), 3 * D, View{c.data()}, 0, g.dh, Causal::k_upper);  // dk / scale
      scaled_rows(c.data(), T, g.dh, g.scale, dqkv, q + D, 3 * D, prow.data());
    }
}

}  // namespace pt::host
