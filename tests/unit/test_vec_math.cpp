// The vectorisable float math of the host kernels (src/kernels/host/vec_math.hpp) against libm
// in double: exp_approx within 4e-7 relative on [-87.3, 88], 0 below; erfc_approx within 1e-6
// relative where erfc >= 1e-30 and within 3e-7 absolute everywhere; the GELU gate Phi(x)
// likewise; and the lane sums are exact on integers and independent of nothing but the input.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "../../src/kernels/host/vec_math.hpp"

namespace {

using pt::host::erfc_approx;
using pt::host::exp_approx;
using pt::host::gelu_cdf;

double rel(double got, double want) { return std::fabs(got - want) / std::fabs(want); }

TEST(VecMath, ExpMatchesLibmInRange) {
  double worst = 0, at = 0;
  for (int i = 0; i <= 400000; ++i) {
    const float x = -87.3f + (88.0f + 87.3f) * static_cast<float>(i) / 400000.0f;
    const double e = rel(exp_approx(x), std::exp(static_cast<double>(x)));
    if (e > worst) worst = e, at = x;
  }
  EXPECT_LT(worst, 4e-7) << "worst relative error at x = " << at;
  EXPECT_EQ(exp_approx(0.0f), 1.0f);
  EXPECT_EQ(exp_approx(-100.0f), 0.0f);
  EXPECT_EQ(exp_approx(-1e30f), 0.0f);
}

TEST(VecMath, ErfcMatchesLibm) {
  double worst = 0, worst_abs = 0, at = 0;
  for (int i = 0; i <= 200000; ++i) {
    const float x = -9.0f + 18.0f * static_cast<float>(i) / 200000.0f;
    const double want = std::erfc(static_cast<double>(x)), got = erfc_approx(x);
    worst_abs = std::max(worst_abs, std::fabs(got - want));
    if (want < 1e-30) continue;
    const double e = rel(got, want);
    if (e > worst) worst = e, at = x;
  }
  EXPECT_LT(worst, 1e-6) << "worst relative error at x = " << at;
  EXPECT_LT(worst_abs, 3e-7);  // 2 - erfc(|x|) for x < 0 rounds to a float ulp of 2: 2.4e-7
  EXPECT_EQ(erfc_approx(30.0f), 0.0f);
  EXPECT_EQ(erfc_approx(-30.0f), 2.0f);
}

TEST(VecMath, GeluGateIsTheNormalCdf) {
  double worst = 0;
  for (int i = 0; i <= 100000; ++i) {
    const float x = -12.0f + 24.0f * static_cast<float>(i) / 100000.0f;
    // the gate's argument is rounded to float first, as in PyTorch: x / sqrt(2) itself carries
    // a relative error of 6e-8, which erfc amplifies by 2 z^2 (1e-5 at x = -12)
    const float z = -0.70710678118654752f * x;
    const double want = 0.5 * std::erfc(static_cast<double>(z));
    if (want < 1e-30) continue;
    worst = std::max(worst, rel(gelu_cdf(x), want));
  }
  EXPECT_LT(worst, 1e-6);
}

TEST(VecMath, LaneSumsAndMax) {
  std::vector<float> v(1003);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 37) % 101) - 50.0f;
  double want = 0;
  float mx = v[0];
  for (float f : v) want += f, mx = std::max(mx, f);
  for (int64_t n : {1, 15, 16, 17, 1003}) {
    double w = 0;
    float m = v[0];
    for (int64_t k = 0; k < n; ++k) w += v[k], m = std::max(m, v[k]);
    EXPECT_EQ(pt::host::lane_sum(n, [&](int64_t k) { return v[k]; }), w) << n;
    EXPECT_EQ(pt::host::lane_sum_f(n, [&](int64_t k) { return v[k]; }), static_cast<float>(w)) << n;
    EXPECT_EQ(pt::host::row_max(v.data(), n), m) << n;
  }
  EXPECT_EQ(pt::host::row_max(v.data(), static_cast<int64_t>(v.size())), mx);
  EXPECT_EQ(pt::host::lane_sum(static_cast<int64_t>(v.size()), [&](int64_t k) { return v[k]; }), want);
}

}  // namespace
