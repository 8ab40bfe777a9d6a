// The vectorisable float math of the host kernels (src/kernels/host/vec_math.hpp) against libm
// in double: exp_approx within 4e-7 relative on [-87.3, 88], 0 below; erfc_approx within 1e-6
// relative where erfc >= 1e-30 and within 3e-7 absolute everywhere; the GELU gate Phi(x)
// likewise; and the lane sums are exact on integers and independent of nothing but the input.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
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
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(erfc_approx(inf), 0.0f);
  EXPECT_EQ(erfc_approx(-inf), 2.0f);
  EXPECT_EQ(erfc_approx(3e19f), 0.0f);  // z^2 would overflow without the clamp
  EXPECT_TRUE(std::isnan(erfc_approx(nan)));
  EXPECT_TRUE(std::isnan(exp_approx(nan)));
  EXPECT_EQ(exp_approx(-inf), 0.0f);
  // GELU's values at the ends, as x Phi(x) with libm: inf at +inf, the identity far right
  EXPECT_EQ(inf * gelu_cdf(inf), inf);
  EXPECT_EQ(3e19f * gelu_cdf(3e19f), 3e19f);
  EXPECT_EQ(gelu_cdf(-3e19f), 0.0f);
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
  // non-integer data, so the order of the additions shows in the result: element k on lane
  // k % 16, lanes added 0..15 at the end, against an explicit reference
  std::vector<float> v(1003);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37f * static_cast<float>(i)) * 1e3f + 1e-3f * static_cast<float>(i);
  for (int64_t n : {1, 15, 16, 17, 100, 1003}) {
    double lanes[16] = {};
    float flanes[16] = {};
    float m = v[0];
    for (int64_t k = 0; k < n; ++k) {
      lanes[k % 16] += v[static_cast<size_t>(k)];
      flanes[k % 16] += v[static_cast<size_t>(k)];
      m = std::max(m, v[static_cast<size_t>(k)]);
    }
    double want = 0;
    float fwant = 0;
    for (int l = 0; l < 16; ++l) want += lanes[l], fwant += flanes[l];
    EXPECT_EQ(pt::host::lane_sum(n, [&](int64_t k) { return v[static_cast<size_t>(k)]; }), want) << n;
    EXPECT_EQ(pt::host::lane_sum_f(n, [&](int64_t k) { return v[static_cast<size_t>(k)]; }), fwant) << n;
    EXPECT_EQ(pt::host::row_max(v.data(), n), m) << n;
    double a[16] = {}, b[16] = {};
    pt::host::lane_add2(a, b, n, [&](int64_t k) { return v[static_cast<size_t>(k)]; },
                        [&](int64_t k) { return 2.0f * v[static_cast<size_t>(k)]; });
    EXPECT_EQ(pt::host::lane_total(a), want) << n;
    EXPECT_EQ(pt::host::lane_total(b), 2.0 * want) << n;
  }
  // a plain sequential float sum differs from the lane order on this data (the test can fail)
  float seq = 0;
  for (float f : v) seq += f;
  EXPECT_NE(seq, pt::host::lane_sum_f(static_cast<int64_t>(v.size()), [&](int64_t k) { return v[static_cast<size_t>(k)]; }));
}

}  // namespace
