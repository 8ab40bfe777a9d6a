// The vectorisable float math of the host kernels (src/kernels/host/vec_math.hpp) against libm
// in double: exp_approx within 4e-7 relative on [-87.3, 88], 0 below; the normal CDF Phi
// (the GELU gate) within 3e-7 absolute and the density within 1e-6 relative, with the ends
// (+-inf, overflow of x^2, NaN); and the lane sums are exact on integers and independent of
// nothing but the input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "../../src/kernels/host/vec_math.hpp"
#include "pipetrain/backend.hpp"

namespace {

using pt::host::exp_approx;
using pt::host::normal_cdf_pdf;
using pt::host::NormalCdfPdf;

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

TEST(VecMath, NormalCdfAndPdfMatchLibm) {
  double worst_cdf = 0, worst_pdf = 0, worst_grad = 0, at_cdf = 0, at_pdf = 0;
  for (int i = 0; i <= 240000; ++i) {
    const float x = -12.0f + 24.0f * static_cast<float>(i) / 240000.0f;
    const double xd = x;
    const double cdf = 0.5 * std::erfc(-xd / std::sqrt(2.0)), pdf = std::exp(-0.5 * xd * xd) / std::sqrt(2 * M_PI);
    const NormalCdfPdf g = normal_cdf_pdf(x);
    const double ec = std::fabs(g.cdf - cdf);
    if (ec > worst_cdf) worst_cdf = ec, at_cdf = x;
    if (pdf >= 1e-30) {
      const double ep = rel(g.pdf, pdf);
      if (ep > worst_pdf) worst_pdf = ep, at_pdf = x;
    }
    // GELU's derivative Phi + x phi, relative to max(1, |value|): what gelu_backward multiplies dy by
    const double d = cdf + xd * pdf;
    worst_grad = std::max(worst_grad, std::fabs((g.cdf + x * g.pdf) - d) / std::max(1.0, std::fabs(d)));
  }
  EXPECT_LT(worst_cdf, 3e-7) << "worst absolute error of Phi at x = " << at_cdf;
  EXPECT_LT(worst_pdf, 1e-6) << "worst relative error of phi at x = " << at_pdf;
  EXPECT_LT(worst_grad, 4e-7);
  EXPECT_EQ(normal_cdf_pdf(0.0f).pdf, 0.39894228040143268f);
  EXPECT_NEAR(normal_cdf_pdf(0.0f).cdf, 0.5f, 3e-7);
}

TEST(VecMath, NormalCdfEnds) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(normal_cdf_pdf(30.0f).cdf, 1.0f);
  EXPECT_EQ(normal_cdf_pdf(-30.0f).cdf, 0.0f);
  EXPECT_EQ(normal_cdf_pdf(inf).cdf, 1.0f);
  EXPECT_EQ(normal_cdf_pdf(-inf).cdf, 0.0f);
  EXPECT_EQ(normal_cdf_pdf(inf).pdf, 0.0f);
  EXPECT_EQ(normal_cdf_pdf(-3e19f).cdf, 0.0f);  // x^2 overflows: e^{-inf} is 0
  EXPECT_EQ(normal_cdf_pdf(3e19f).pdf, 0.0f);
  EXPECT_TRUE(std::isnan(normal_cdf_pdf(nan).cdf));
  EXPECT_TRUE(std::isnan(normal_cdf_pdf(nan).pdf));
  EXPECT_TRUE(std::isnan(exp_approx(nan)));
  EXPECT_EQ(exp_approx(-inf), 0.0f);
  // GELU's values at the ends, as x Phi(x) with libm: inf at +inf, the identity far right
  EXPECT_EQ(inf * normal_cdf_pdf(inf).cdf, inf);
  EXPECT_EQ(3e19f * normal_cdf_pdf(3e19f).cdf, 3e19f);
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

// The bf16 GELU kernels look every value up in tables computed once (host_backend.cpp,
// GeluTables): for all 65536 bf16 inputs (NaN and infinities included), the forward through a
// bf16 view and the backward's dy * gelu'(x) give bit for bit what the formula path gives the
// same values through an f32 view, into f32 and bf16 outputs.
TEST(VecMath, Bf16GeluTablesGiveTheFormulasBits) {
  auto be = pt::make_host_backend();
  const size_t n = 65536;
  std::vector<uint16_t> bits(n);
  std::vector<float> x(n), dy(n);
  for (size_t b = 0; b < n; ++b) {
    bits[b] = static_cast<uint16_t>(b);
    x[b] = pt::bf16_to_float(bits[b]);
    dy[b] = 0.25f + static_cast<float>(b % 97) * 0.03125f;
  }
  const auto* xb = reinterpret_cast<const float*>(bits.data());
  auto same_bits = [](const std::vector<float>& a, const std::vector<float>& b, size_t count, const char* what) {
    EXPECT_EQ(std::memcmp(a.data(), b.data(), count * sizeof(float)), 0) << what;
  };
  for (int out16 = 0; out16 < 2; ++out16) {
    const size_t count = out16 ? n / 2 : n;  // a bf16 output fills n / 2 floats
    std::vector<float> want(n), got(n);
    pt::View w = out16 ? pt::as_bf16(want.data()) : pt::View(want.data()), g = out16 ? pt::as_bf16(got.data()) : pt::View(got.data());
    be->gelu_forward(n, x.data(), w);
    be->gelu_forward(n, pt::as_bf16(xb), g);
    same_bits(want, got, count, out16 ? "gelu forward, bf16 out" : "gelu forward, f32 out");
    be->gelu_backward(n, x.data(), dy.data(), w);
    be->gelu_backward(n, pt::as_bf16(xb), dy.data(), g);
    same_bits(want, got, count, out16 ? "gelu backward, bf16 out" : "gelu backward, f32 out");
  }
}

// The vector bf16 conversion (bf16_span: the packing and rounding of weights, activations
// and messages) gives bf16_bits for every float of both signs and nine exponents, each with
// all 2^23 significands: the subnormals (exponent 0) and NaN and infinity (255), on
// AVX512-BF16 handed from its vcvtneps2bf16 to the exact path (0x7FC0 for NaN, subnormals
// rounded, not flushed), the smallest normals, 1.0, and the largest, where rounding
// overflows to infinity. Every rounding case lives in the significand's low 17 bits. Each
// chunk mixes the special values with ordinary ones (starting mid-exponent), so vectors that
// hold both are covered too.
TEST(VecMath, Bf16ConversionGivesBf16Bits) {
  const size_t chunk = size_t{1} << 20;
  std::vector<uint32_t> in(chunk);
  std::vector<float> x(chunk), rounded(chunk);
  std::vector<uint16_t> packed(chunk);
  size_t bad = 0, seen = 0;
  uint32_t first_bad = 0;
  for (uint32_t sign : {0u, 1u})
    for (uint32_t e : {0u, 1u, 2u, 100u, 127u, 200u, 253u, 254u, 255u}) {
      const uint32_t lo = (sign << 31 | e << 23) - static_cast<uint32_t>(chunk / 2);  // wraps below +0
      for (uint32_t off = 0; off < (1u << 23); off += static_cast<uint32_t>(chunk)) {
        for (size_t i = 0; i < chunk; ++i) in[i] = lo + off + static_cast<uint32_t>(i);
        std::memcpy(x.data(), in.data(), chunk * sizeof(float));
        pt::host::bf16_span<true, true>(chunk, x.data(), rounded.data(), packed.data());
        for (size_t i = 0; i < chunk; ++i, ++seen) {
          const uint16_t want = pt::bf16_bits(x[i]);
          uint32_t r;
          std::memcpy(&r, &rounded[i], sizeof r);
          if ((packed[i] != want || r != static_cast<uint32_t>(want) << 16) && bad++ == 0) first_bad = in[i];
        }
      }
    }
  EXPECT_EQ(seen, size_t{18} << 23);
  EXPECT_EQ(bad, 0u) << "first wrong pattern 0x" << std::hex << first_bad;
}
