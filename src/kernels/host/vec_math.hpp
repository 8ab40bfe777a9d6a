// Internal to the host kernels: branch-free float math that the compiler vectorises
// (libm's expf/erff are scalar calls: 13% of a tinygpt step's profile before), and
// reductions over fixed lanes. Every function is deterministic: the same inputs give the same
// bits on every call, whatever the caller's loop bounds, because the lane of an element is
// its index modulo kLanes and the lanes are added in a fixed order at the end.
// Accuracy (tests/unit/test_vec_math.cpp checks it against libm in double):
//  - exp_approx: relative error <= 4e-7 on [-87.3, 88]; 0 below -87.3 (no subnormals),
//    e^88 above 88 (callers pass arguments <= 0: softmax, GELU).
//  - erfc_approx: relative error <= 1e-6 where erfc(x) >= 1e-30, 0 and 2 at +-inf, from the
//    rational-Chebyshev fit of Numerical Recipes' erfcc (fractional error 1.2e-7) and
//    exp_approx; gelu_cdf(x) = 0.5 erfc(-x/sqrt 2) is the exact GELU's Phi(x).
#pragma once
#include <cstdint>
#include <cstring>

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

// erfc(x) for any x: t = 1/(1 + |x|/2), erfc(|x|) = t exp(-x^2 + P(t)), and 2 - that for x < 0;
// the rounding errors of x^2 and of the exponent (up to 4e-6 of the result at |x| = 8) are
// put back by the factor e^err = 1 + err.
inline float erfc_approx(float x) {
  float z = x < 0.0f ? -x : x;
  z = z > 10.0f ? 10.0f : z;  // erfc(10) = 2e-45 is 0 in float; keeps z^2 finite for |x| up to inf (NaN stays NaN)
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  const float z2 = z * z, z2_err = __builtin_fmaf(z, z, -z2);  // z^2 = z2 + z2_err exactly
  const float a = p - z2, bv = a - p, a_err = (p - (a - bv)) + (-z2 - bv);  // p - z2 = a + a_err (two-sum)
  const float e = t * exp_approx(a) * (1.0f + (a_err - z2_err));
  return x < 0.0f ? 2.0f - e : e;
}

// The standard normal CDF Phi(x), the exact GELU's gate: gelu(x) = x Phi(x).
inline float gelu_cdf(float x) { return 0.5f * erfc_approx(-0.70710678118654752f * x); }

constexpr int kLanes = 16;

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

}  // namespace pt::host
