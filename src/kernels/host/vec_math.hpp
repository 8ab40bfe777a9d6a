// Internal to the host kernels: branch-free float math that the compiler vectorises
// (libm's expf/erff are scalar calls: 13% of a tinygpt step's profile before), and
// reductions over fixed lanes. Every function is deterministic: the same inputs give the same
// bits on every call, whatever the caller's loop bounds, because the lane of an element is
// its index modulo kLanes and the lanes are added in a fixed order at the end.
// Accuracy (tests/unit/test_vec_math.cpp checks it against libm in double):
//  - exp_approx: relative error <= 4e-7 on [-87.3, 88]; 0 below -87.3 (no subnormals),
//    e^88 above 88 (callers pass arguments <= 0: softmax, GELU).
//  - normal_cdf_pdf: Phi(x) within 3e-7 absolute, phi(x) within 1e-6 relative (the exact
//    GELU's gate and density, from one exp_approx).
#pragma once
#include <cstdint>
#include <cstring>

#include <immintrin.h>

#include "pipetrain/backend.hpp"  // bf16_bits

namespace pt::host {

inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// e^x: x = n ln2 + r with |r| <= ln2/2 (Cody-Waite, two-part ln2), e^r by a degree-7 Taylor
// polynomial (truncation 5e-9 relative), 2^n put into the exponent bits.
inline float exp_approx(float x) {
  const float lo = -87.3f, hi = 88.0f, shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const bool under = x < lo;
  x = x < lo ? lo : (x > hi ? hi : x);  // a NaN passes through both tests and stays NaN
  const float shifted = x * 1.44269504088896341f + shifter;
  const float n = shifted - shifter;
  uint32_t sb, fb;
  std::memcpy(&sb, &shifted, sizeof sb);
  std::memcpy(&fb, &shifter, sizeof fb);
  const int32_t ni = static_cast<int32_t>(sb - fb);  // n as an integer, from the bits (defined for NaN too)
  const float r = (x - n * 0.693145751953125f) - n * 1.42860682030941723e-6f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float scale = bits_to_float(static_cast<uint32_t>(ni + 127) << 23);
  return under ? 0.0f : p * scale;
}

// The standard normal's CDF Phi(x) and density phi(x), the exact GELU's gate and its
// derivative's term: gelu(x) = x Phi(x), gelu'(x) = Phi(x) + x phi(x). One exponential serves
// both: e = e^{-x^2/2}, phi = e / sqrt(2 pi), and Phi(-|x|) = erfc(z) / 2 with z = |x| / sqrt 2
// and erfc(z) = t P(t) e^{-z^2}, t = 1 / (1 + 0.3275911 z), P of degree 4 (Abramowitz and
// Stegun, Handbook of Mathematical Functions, 7.1.26: |error| <= 1.5e-7 on erf), then
// Phi(x) = 1 - Phi(-|x|) for x >= 0. Accuracy in float (tests/unit/test_vec_math.cpp, against
// libm in double): Phi within 3e-7 absolute everywhere (PyTorch's 0.5 (1 + erf(x / sqrt 2))
// is itself accurate only absolutely), phi within 1e-6 relative where phi >= 1e-30. About 35
// vector operations per 16 floats: half the cost of an erfc accurate relatively.
struct NormalCdfPdf {
  float cdf, pdf;
};
inline NormalCdfPdf normal_cdf_pdf(float x) {
  float a = x < 0.0f ? -x : x;
  a = a > 20.0f ? 20.0f : a;  // e^{-200} is 0 in float; keeps a^2 finite (NaN stays NaN)
  const float z = a * 0.70710678118654752f;
  const float t = 1.0f / (1.0f + 0.3275911f * z);
  float p = 1.061405429f;
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  const float a2 = a * a, a2_err = __builtin_fmaf(a, a, -a2);  // a^2 = a2 + a2_err exactly
  const float e = exp_approx(-0.5f * a2) * (1.0f - 0.5f * a2_err);  // e^{-x^2/2}, the rounding of x^2 put back
  const float tail = 0.5f * p * t * e;  // Phi(-|x|)
  return {x < 0.0f ? tail : 1.0f - tail, 0.39894228040143268f * e};
}

constexpr int kLanes = 16;

// 16-float vectors (GCC vector extensions: one AVX-512 register, two AVX2 ones elsewhere) for
// the kernels written with explicit vectors (attention_kernel.cpp, the bf16 packing below).
typedef float vec16 __attribute__((vector_size(64)));               // aligned to 64 bytes
typedef float vec16u __attribute__((vector_size(64), aligned(4)));  // the same at any float address
typedef uint32_t vec16i __attribute__((vector_size(64)));
typedef uint16_t vec16h __attribute__((vector_size(32)));
constexpr int64_t kW = 16;

inline vec16 load(const float* p) { return *reinterpret_cast<const vec16u*>(p); }
inline void store(float* p, vec16 v) { *reinterpret_cast<vec16u*>(p) = v; }
inline int64_t pad16(int64_t x) { return (x + kW - 1) / kW * kW; }

// bf16_bits (backend.hpp) of 16 floats, in the low halves: round to nearest even, NaN -> 0x7FC0
inline vec16i bf16_bits16(vec16 x) {
  vec16i u;
  std::memcpy(&u, &x, sizeof u);
  const vec16i r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return (u & 0x7fffffffu) > 0x7f800000u ? vec16i{} + 0x7fc0u : r;
}
// bf16_bits of 16 floats as 16 bf16 values: the same bits as bf16_bits16. With AVX512-BF16
// one vcvtneps2bf16 rounds to nearest even as bf16_bits does, except on NaN (it keeps the
// payload; bf16_bits gives 0x7FC0) and on subnormal inputs (it flushes them to zero; bf16_bits
// rounds them): a vector holding either takes the exact integer path.
inline vec16h bf16_half16(vec16 x) {
#if defined(__AVX512BF16__) && defined(__AVX512DQ__)
  __m512 v;
  std::memcpy(&v, &x, sizeof v);
  if (_mm512_fpclass_ps_mask(v, 0xA1) == 0) {  // 0x01 quiet NaN | 0x20 subnormal | 0x80 signalling NaN
    const __m256bh h = _mm512_cvtneps_pbh(v);
    vec16h r;
    std::memcpy(&r, &h, sizeof r);
    return r;
  }
#endif
  return __builtin_convertvector(bf16_bits16(x), vec16h);
}
// bf16_round on 16 floats: the same bits
inline vec16 round_bf16(vec16 x) {
  const vec16i b = __builtin_convertvector(bf16_half16(x), vec16i) << 16;
  vec16 y;
  std::memcpy(&y, &b, sizeof y);
  return y;
}
// 16 bf16 values (32 bytes at p, any alignment) as floats, exactly
inline vec16 load_bf16(const unsigned char* p) {
  vec16h h;
  std::memcpy(&h, p, sizeof h);
  const vec16i u = __builtin_convertvector(h, vec16i) << 16;
  vec16 y;
  std::memcpy(&y, &u, sizeof y);
  return y;
}
inline float load_bf16_one(const unsigned char* p) {
  uint16_t b;
  std::memcpy(&b, p, sizeof b);
  return bf16_to_float(b);
}
// 16 values at element `at` of an fp32 or bf16 operand, as floats (exact)
inline vec16 load_view(CView v, int64_t at) {
  return v.bf16() ? load_bf16(reinterpret_cast<const unsigned char*>(v.data) + 2 * at) : load(v.data + at);
}
// 16 results to element `at` of y: fp32, or each value's bf16_bits
inline void store_view(View y, int64_t at, vec16 v) {
  if (!y.bf16()) return store(y.data + at, v);
  const vec16h h = bf16_half16(v);
  std::memcpy(reinterpret_cast<unsigned char*>(y.data) + 2 * at, &h, sizeof h);
}
// A batch norm's normalisation of 16 channels c0.. at one position (a channel-minor layout):
// (x - mean) invstd gamma + beta, then + add (when given), then ReLU (relu); batchnorm.cpp's
// channel-minor pass and blocked_layout.cpp's pass with the move out both use it.
struct BnNorm {
  int64_t C;
  const float *mean, *invstd, *gamma, *beta;
};
// (add: an fp32 or bf16 operand, its 16 values at element `at`; none when add.data is null)
inline vec16 bn_normalised16(const BnNorm& bn, int64_t c0, vec16 x, CView add, int64_t at, bool relu) {
  vec16 v = (x - load(bn.mean + c0)) * load(bn.invstd + c0) * load(bn.gamma + c0) + load(bn.beta + c0);
  if (add.data) v += load_view(add, at);
  if (relu) v = v > 0.0f ? v : 0.0f;
  return v;
}
// bf16 of x[0, n), front to back: Round writes round_bf16 of it to y (fp32 slots), Pack
// writes the dense bf16 array to out (2 n bytes). y may be x, and so may out: the 16 floats
// of a step are read before their 32 bytes are written, below any unread float.
template <bool Round, bool Pack>
inline void bf16_span(size_t n, const float* x, float* y, void* out) {
  auto* o = static_cast<unsigned char*>(out);
  size_t i = 0;
  for (; i + static_cast<size_t>(kW) <= n; i += static_cast<size_t>(kW)) {
    const vec16h h = bf16_half16(load(x + i));
    if (Pack) std::memcpy(o + 2 * i, &h, sizeof h);
    if (Round) {
      const vec16i r = __builtin_convertvector(h, vec16i) << 16;
      std::memcpy(y + i, &r, sizeof r);
    }
  }
  for (; i < n; ++i) {
    const uint16_t b = bf16_bits(x[i]);
    if (Pack) std::memcpy(o + 2 * i, &b, sizeof b);
    if (Round) y[i] = bf16_to_float(b);
  }
}
// x[0, n) -> the dense bf16 array at out (out may equal x)
inline void pack_bf16_span(size_t n, const float* x, void* out) { bf16_span<false, true>(n, x, nullptr, out); }
// The dense bf16 array at in (n values) -> their fp32 values at y, exactly
inline void widen_bf16_span(size_t n, const void* in, float* y) {
  const auto* p = static_cast<const unsigned char*>(in);
  size_t i = 0;
  for (; i + static_cast<size_t>(kW) <= n; i += static_cast<size_t>(kW)) store(y + i, load_bf16(p + 2 * i));
  for (; i < n; ++i) y[i] = load_bf16_one(p + 2 * i);
}

// sum of f(k) for k in [0, n) in double, element k on lane k % kLanes (vectorises)
template <class F>
inline void lane_add(double (&acc)[kLanes], int64_t n, F f) {
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += static_cast<double>(f(k + l));
  for (int l = 0; k + l < n; ++l) acc[l] += static_cast<double>(f(k + l));
}
// two such sums in one pass: a += f(k), b += g(k)
template <class F, class G>
inline void lane_add2(double (&a)[kLanes], double (&b)[kLanes], int64_t n, F f, G g) {
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      a[l] += static_cast<double>(f(k + l));
      b[l] += static_cast<double>(g(k + l));
    }
  for (int l = 0; k + l < n; ++l) {
    a[l] += static_cast<double>(f(k + l));
    b[l] += static_cast<double>(g(k + l));
  }
}
inline double lane_total(const double (&acc)[kLanes]) {
  double s = 0;
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  return s;
}
template <class F>
inline double lane_sum(int64_t n, F f) {
  double acc[kLanes] = {};
  lane_add(acc, n, f);
  return lane_total(acc);
}

// sum of x[k]^2 in double (each square exact), element k on lane k % kLanes
inline double sum_squares(const float* x, int64_t n) {
  return lane_sum(n, [&](int64_t k) {
    const double v = x[k];
    return v * v;
  });
}

// the same in float lanes (short rows: softmax over at most a sequence length)
template <class F>
inline float lane_sum_f(int64_t n, F f) {
  float acc[kLanes] = {};
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += f(k + l);
  for (int l = 0; k + l < n; ++l) acc[l] += f(k + l);
  float s = 0;
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  return s;
}

// max of x[0..n), n >= 1 (max is exact, so any order gives the same value)
inline float row_max(const float* x, int64_t n) {
  float acc[kLanes];
  for (int l = 0; l < kLanes; ++l) acc[l] = x[0];
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] = x[k + l] > acc[l] ? x[k + l] : acc[l];
  for (int l = 0; k + l < n; ++l) acc[l] = x[k + l] > acc[l] ? x[k + l] : acc[l];
  float m = acc[0];
  for (int l = 1; l < kLanes; ++l) m = acc[l] > m ? acc[l] : m;
  return m;
}

// One row of a causal softmax over a row of T scores: p[0, len) = the softmax of s[0, len)
// (max, exponentials and sum in fp32), p[len, T) = 0. p may alias s.
inline void causal_softmax_row(const float* s, float* p, int64_t len, int64_t T) {
  const float mx = row_max(s, len);
  for (int64_t j = 0; j < len; ++j) p[j] = exp_approx(s[j] - mx);
  const float inv = 1.0f / lane_sum_f(len, [&](int64_t j) { return p[j]; });
  for (int64_t j = 0; j < len; ++j) p[j] *= inv;
  for (int64_t j = len; j < T; ++j) p[j] = 0.0f;
}

// Its backward: ds[0, len) = p (dp - sum_j p dp), ds[len, T) = 0. ds may alias dp.
inline void causal_softmax_grad_row(const float* p, const float* dp, float* ds, int64_t len, int64_t T) {
  const float dot = lane_sum_f(len, [&](int64_t j) { return p[j] * dp[j]; });
  for (int64_t j = 0; j < len; ++j) ds[j] = p[j] * (dp[j] - dot);
  for (int64_t j = len; j < T; ++j) ds[j] = 0.0f;
}

}  // namespace pt::host
