// The host's fused causal attention core (Backend::attention_forward / attention_backward,
// backend.hpp). Per (sample, head), one at a time (the host backend runs one thread per
// rank): q, k, v (and the output gradient) are gathered from the token-major projection
// buffers into zero-padded tiles of T x dh (rows and features padded to 16 floats), rounded
// to bf16 in bf16 precision, and the products run on the tiles in 16-float vector registers
// over the causal triangle only (keys j <= query i): about half the multiply-adds of the
// full [T, T] products that the composed path (heads_split, batched GEMMs, softmax,
// heads_merge) spends, and none of its permutation passes. The softmax rows are
// vec_math.hpp's, the ones causal_softmax_forward/backward use.
// Numerics: every product element is an fp32 sum of exact products in a fixed order
// (ascending key or query index, one fused multiply-add each), so a run is bitwise
// reproducible; against the composed path only the summation order differs (fp32 rounding,
// tested in tests/unit/test_attention_kernel.cpp against a double reference).
// The probabilities P are kept as the products read them: fp32 in fp32, and in bf16 a bf16
// view (rounded once, as autocast's softmax of bf16 scores returns them), which the dv
// product and the softmax backward both read, as autocast's do.
// Selective recomputation passes no P: the forward then keeps no probabilities, and the
// backward recomputes each head's from its q and k tiles with the forward's own scores and
// softmax rows before using them, so they are bitwise what the forward would have stored.
#include <algorithm>
#include <cstring>
#include <vector>

#include <immintrin.h>

#include "host_backend.hpp"
#include "pipetrain/error.hpp"
#include "vec_math.hpp"

namespace pt::host {
namespace {

// For the copy loops below: GCC would turn each into a libc memcpy call per row of 32-128
// floats, which measured slower than the copies themselves (20% of the kernel's time).
#define PT_NO_MEMCPY_CALLS __attribute__((optimize("no-tree-loop-distribute-patterns")))

// A token-major input: an f32 view, or a bf16 one (pack_bf16's layout; the qkv view's dtype)
struct Src {
  const float* base;
  bool packed;
};

// Zero-padded tiles of one (sample, head): rows [Tp, dp] (a row per position) and [Tp, Tp]
// triangles; padding is zeroed once per call and never written.
struct Tiles {
  int64_t T, Tp, dh, dp;
  bool bf16;
  bool out_packed = false;    // products write pack_bf16 of their values (a bf16 output view)
  float* out_base = nullptr;  // the packed output's first element
  std::vector<float> mem;
  float *a, *b, *c, *d;  // [Tp, dp] row tiles
  float *kt;             // [dp, Tp]: a row tile transposed (keys along the vector)
  float *s, *p;          // [Tp, Tp]: scores / dP / dS, and probabilities as products read them
  float* pf = nullptr;   // [Tp, Tp]: recomputed fp32 probabilities (a backward without P)
  Tiles(int64_t T_, int64_t dh_, bool bf16_, bool recompute = false)
      : T(T_), Tp(pad16(T_)), dh(dh_), dp(pad16(dh_)), bf16(bf16_) {
    const int64_t row = Tp * dp, tri = Tp * Tp;
    mem.assign(static_cast<size_t>(5 * row + (recompute ? 3 : 2) * tri), 0.0f);
    a = mem.data(), b = a + row, c = b + row, d = c + row, kt = d + row, s = kt + row, p = s + tri;
    if (recompute) pf = p + tri;
  }
  float rd(float x) const { return bf16 ? bf16_round(x) : x; }
  vec16 rd(vec16 x) const { return bf16 ? round_bf16(x) : x; }
  // rows t < T of the [T, dh] slice at element `off` of src (row stride ld) -> tile [Tp, dp]
  PT_NO_MEMCPY_CALLS void gather(Src src, int64_t off, int64_t ld, float* tile) const {
    if (src.packed) return gather_packed(reinterpret_cast<const unsigned char*>(src.base) + 2 * off, ld, tile);
    for (int64_t t = 0; t < T; ++t) {
      const float* x = src.base + off + t * ld;
      float* y = tile + t * dp;
      int64_t e = 0;
      for (; e + kW <= dh; e += kW) store(y + e, rd(load(x + e)));
      for (; e < dh; ++e) y[e] = rd(x[e]);
    }
  }
  // the same from bf16 values (exact: nothing to round)
  PT_NO_MEMCPY_CALLS void gather_packed(const unsigned char* src, int64_t ld, float* tile) const {
    for (int64_t t = 0; t < T; ++t) {
      const unsigned char* x = src + 2 * t * ld;
      float* y = tile + t * dp;
      int64_t e = 0;
      for (; e + kW <= dh; e += kW) store(y + e, load_bf16(x + 2 * e));
      for (; e < dh; ++e) y[e] = load_bf16_one(x + 2 * e);
    }
  }
  // start loading the rows gather(src, off, ld) will read (the next head's, while this one
  // computes: each row is a separate cache line of a large token-major buffer)
  void prefetch(Src src, int64_t off, int64_t ld) const {
    const int64_t bytes = src.packed ? 2 : 4;
    const auto* base = reinterpret_cast<const char*>(src.base) + bytes * off;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t e = 0; e < dh * bytes; e += 64) __builtin_prefetch(base + bytes * t * ld + e);
  }
  // the same, transposed into kt [dp, Tp], through the row tile `rows` (contiguous reads)
  void gather_transposed(Src src, int64_t off, int64_t ld, float* rows, float* tile) const {
    gather(src, off, ld, rows);
    for (int64_t e = 0; e < dh; ++e)  // contiguous writes; the strided reads hit L1
      for (int64_t t = 0; t < T; ++t) tile[e * Tp + t] = rows[t * dp + e];
  }
};

constexpr int kRows = 8;  // rows per block of the products below (Tp is a multiple of 16)

// The element offset of (sample s, head h)'s first value in a token-major buffer with rows of
// `width` floats; head_offset(g, s, h + 1, width) is the next head's, -1 after the last.
int64_t head_offset(const Backend::AttentionGeom& g, int64_t s, int64_t h, int64_t width) {
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
  if (t.out_packed) {  // the element at out is number out - out_base of the packed array
    float row[NV * kW];
    for (int v = 0; v < NV; ++v) store(row + v * kW, acc[v] * scale);
    pack_bf16_span(static_cast<size_t>(m), row, reinterpret_cast<unsigned char*>(t.out_base) + 2 * (out + c0 - t.out_base));
    return;
  }
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

// the [T, T] matrix at element `off` of m (an f32 view, or a bf16 one: exact) into the
// triangle tile (rounded in bf16)
PT_NO_MEMCPY_CALLS void load_triangle(const Tiles& t, CView m, int64_t off, float* tile) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(m.data) + 2 * off;
  for (int64_t i = 0; i < t.T; ++i) {
    float* y = tile + i * t.Tp;
    int64_t j = 0;  // zeros past the diagonal come along (rounding keeps them)
    if (m.bf16()) {
      const unsigned char* x = bytes + 2 * i * t.T;
      for (; j + kW <= t.T; j += kW) store(y + j, load_bf16(x + 2 * j));
      for (; j < t.T; ++j) y[j] = load_bf16_one(x + 2 * j);
      continue;
    }
    const float* x = m.data + off + i * t.T;
    for (; j + kW <= t.T; j += kW) store(y + j, t.rd(load(x + j)));
    for (; j < t.T; ++j) y[j] = t.rd(x[j]);
  }
}

// a row of the triangle tile rounded to bf16 in place, whole vectors up to the diagonal
void round_row(float* r, int64_t len) {
  for (int64_t j = 0; j < len; j += kW) store(r + j, round_bf16(load(r + j)));
}

// a probability row of T floats out to element `off` of P (none: nothing kept, selective
// recomputation; a bf16 view: packed), and into the triangle tile as products read it
PT_NO_MEMCPY_CALLS void copy_row(const Tiles& t, const float* r, View P, int64_t off, float* tile) {
  int64_t j = 0;
  if (!P.data || P.bf16()) {
    for (; j + kW <= t.T; j += kW) store(tile + j, t.rd(load(r + j)));
    for (; j < t.T; ++j) tile[j] = t.rd(r[j]);
    if (P.data) pack_bf16_span(static_cast<size_t>(t.T), r, reinterpret_cast<unsigned char*>(P.data) + 2 * off);
    return;
  }
  float* Pr = P.data + off;
  const bool stream = (reinterpret_cast<uintptr_t>(P.data + off) & 63) == 0;
  for (; j + kW <= t.T; j += kW) {
    const vec16 v = load(r + j);
#ifdef __AVX512F__
    if (stream) _mm512_stream_ps(Pr + j, reinterpret_cast<__m512>(v));
    else store(Pr + j, v);
#else
    store(Pr + j, v);
#endif
    store(tile + j, t.rd(v));
  }
  for (; j < t.T; ++j) Pr[j] = r[j], tile[j] = t.rd(r[j]);
}

// One head's probabilities again from its q (tile a) and k (transposed in kt), as the forward
// computes them: scores, then each softmax row into pf (fp32) and the tile p (rounded).
void recompute_probabilities(Tiles& t, float scale) {
  scores(t, t.a, scale, t.pf);
  for (int64_t i = 0; i < t.T; ++i) {
    float* r = t.pf + i * t.Tp;
    causal_softmax_row(r, r, i + 1, t.T);
    copy_row(t, r, View{nullptr}, 0, t.p + i * t.Tp);
  }
}

}  // namespace

void HostBackend::attention_forward(const AttentionGeom& g, CView qkv, View P, View o_view) {
  const int64_t T = g.T, D = g.H * g.dh, TT = T * T;
  PT_CHECK(g.precision == Precision::bf16 || (!qkv.bf16() && !o_view.bf16() && !P.bf16()),
           "attention_forward: bf16 views in fp32");
  Tiles t(T, g.dh, g.precision == Precision::bf16);
  float* o = o_view.data;
  t.out_packed = o_view.bf16(), t.out_base = o;
  for (int64_t s = 0; s < g.n; ++s)
    for (int64_t h = 0; h < g.H; ++h) {
      const Src x{qkv.data, qkv.bf16()};
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
        copy_row(t, r, P, ph + i * T, t.p + i * t.Tp);
      }
      product<false>(t, t.p, t.c, 1.0f, o + head_offset(g, s, h, D), D);
    }
}

void HostBackend::attention_backward(const AttentionGeom& g, CView qkv, CView P, const float* dout,
                                     View dqkv_view) {
  const int64_t T = g.T, D = g.H * g.dh, TT = T * T;
  PT_CHECK(g.precision == Precision::bf16 || (!qkv.bf16() && !dqkv_view.bf16() && !P.bf16()),
           "attention_backward: bf16 views in fp32");
  const bool kept = P.data != nullptr;
  Tiles t(T, g.dh, g.precision == Precision::bf16, !kept);
  float* dqkv = dqkv_view.data;
  t.out_packed = dqkv_view.bf16(), t.out_base = dqkv;
  for (int64_t s = 0; s < g.n; ++s)
    for (int64_t h = 0; h < g.H; ++h) {
      const Src x{qkv.data, qkv.bf16()}, dy{dout, false};
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
      if (kept) load_triangle(t, P, (s * g.H + h) * TT, t.p);
      product<true>(t, t.p, t.d, 1.0f, dx + 2 * D, 3 * D);  // dv = P^T do
      for (int64_t i = 0; i < T; ++i) {
        float* r = t.s + i * t.Tp;
        // dS from P as the products read it (its fp32 values in fp32, its bf16 ones in bf16),
        // zeros after the diagonal
        causal_softmax_grad_row(t.p + i * t.Tp, r, r, i + 1, T);
        if (t.bf16) round_row(r, i + 1);  // reads up to pad16(i + 1) <= Tp: zeros past T
      }
      product<false>(t, t.s, t.b, g.scale, dx, 3 * D);     // dq = scale dS k
      product<true>(t, t.s, t.a, g.scale, dx + D, 3 * D);  // dk = scale dS^T q
    }
}

}  // namespace pt::host
