// The packed-bf16 operand ops of the Backend interface (backend.hpp; docs/PRECISION.md,
// "Where bf16 time goes: operands kept packed") on the host backend, each against the
// unpacked op it replaces, bit for bit, and against the Backend's default compositions where
// one remains (called qualified on the host object). The CUDA backend's own versions are
// checked against these in tests/unit/test_cuda.cpp (CudaOps.PackedOperandOps):
//  - pack_bf16 rounds to nearest even (the scalar bf16_bits), in place or not, odd counts,
//    NaN; unpack_bf16 restores the values, in place too;
//  - gemm_packed with A, B or both packed (and transposed) = gemm in bf16 on the fp32 values;
//  - linear_forward with a packed input and/or a packed output = the unpacked one, rounded;
//  - bias_grad_rows_packed = bias_grad_rows of the rounded values;
//  - gelu_forward_deriv (+ mul) = gelu_forward and gelu_backward; the packed variants = their
//    results packed; add = copy then axpy;
//  - round_pack_bf16 = round_bf16 and pack_bf16 (host and default), odd counts, NaN, infinities;
//  - packed twins (set_packed_twin): a bf16 GEMM operand inside a registered region is read
//    from its twin (a twin of other values shows in the result), one reaching outside it, a
//    strided one, an fp32 product or a forgotten twin is not;
//  - all_finite finds a NaN or an infinity at any position, and passes the largest float.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "../../src/kernels/host/host_backend.hpp"
#include "pipetrain/backend.hpp"
#include "test_support.hpp"

namespace {

using pt::bf16_round;
using pt::Precision;

std::vector<float> values(size_t n, uint32_t seed, float scale) { return pt::test::lcg_uniform(n, seed, scale); }

std::vector<float> packed(pt::Backend& be, const std::vector<float>& x) {
  std::vector<float> p((x.size() + 1) / 2);
  be.pack_bf16(x.size(), x.data(), p.data());
  return p;
}
std::vector<float> unpacked(pt::Backend& be, const std::vector<float>& p, size_t n) {
  std::vector<float> x(n);
  be.unpack_bf16(n, p.data(), x.data());
  return x;
}
std::vector<float> rounded(std::vector<float> x) {
  for (auto& v : x) v = bf16_round(v);
  return x;
}
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(PackedOps, PackRoundsToNearestEvenInPlaceOrNot) {
  pt::host::HostBackend be;
  for (size_t n : {1u, 15u, 16u, 33u, 1000u}) {
    auto x = values(n, 3 + n, 8.0f);
    x[0] = std::numeric_limits<float>::quiet_NaN();
    if (n > 2) x[1] = 1.0f + 1.0f / 256;  // a tie: rounds to the even 1.0
    const auto p = packed(be, x);
    EXPECT_TRUE(same_bits(p, [&] {  // the words, from the scalar bf16_bits: element i is half i
      std::vector<float> d((n + 1) / 2);
      for (size_t k = 0; k < d.size(); ++k) {
        const uint32_t lo = pt::bf16_bits(x[2 * k]), hi = 2 * k + 1 < n ? pt::bf16_bits(x[2 * k + 1]) : 0u;
        const uint32_t w = lo | (hi << 16);
        std::memcpy(&d[k], &w, 4);
      }
      return d;
    }()));
    const auto back = unpacked(be, p, n);
    EXPECT_TRUE(std::isnan(back[0]));
    for (size_t i = 1; i < n; ++i) ASSERT_EQ(back[i], bf16_round(x[i])) << i;
    if (n > 2) EXPECT_EQ(back[1], 1.0f);
    std::vector<float> inplace = x;
    be.pack_bf16(n, inplace.data(), inplace.data());
    std::vector<float> words(inplace.begin(), inplace.begin() + (n + 1) / 2);
    EXPECT_TRUE(same_bits(words, p)) << n;
    be.unpack_bf16(n, inplace.data(), inplace.data());  // and back, in place
    EXPECT_TRUE(same_bits(inplace, back)) << n;  // the NaN included: both are 0x7FC00000
  }
}

TEST(PackedOps, GemmReadsPackedOperandsAsItRoundsThem) {
  pt::host::HostBackend be;
  be.set_precision(Precision::bf16);
  const int64_t M = 37, N = 24, K = 53;
  for (int ta = 0; ta < 2; ++ta) {
    const auto A = values(M * K, 11 + ta, 2.0f), B = values(K * N, 13, 2.0f);
    std::vector<float> want(M * N, 0.5f);
    be.gemm(ta, false, M, N, K, 0.75f, A.data(), ta ? M : K, B.data(), N, 1.0f, want.data(), N);
    const auto Ap = packed(be, A), Bp = packed(be, B);
    for (int which = 1; which < 4; ++which) {
      const bool pa = which & 1, pb = which & 2;
      std::vector<float> got(M * N, 0.5f);
      be.gemm_packed(ta, false, M, N, K, 0.75f, pa ? Ap.data() : A.data(), pa, pb ? Bp.data() : B.data(), pb, 1.0f,
                     got.data());
      EXPECT_TRUE(same_bits(got, want)) << "ta " << ta << " packed " << which;
    }
  }
}

TEST(PackedOps, LinearForwardWithPackedInputAndOutput) {
  pt::host::HostBackend be;
  be.set_precision(Precision::bf16);
  const int64_t rows = 40, in = 48, out = 32;
  const auto x = values(rows * in, 21, 2.0f), w = values(out * in, 22, 0.5f), b = values(out, 23, 1.0f);
  std::vector<float> want(rows * out);
  be.linear_forward(rows, in, out, x.data(), w.data(), b.data(), want.data());
  const auto xp = packed(be, x);
  std::vector<float> y1(rows * out), y2(rows * out), y3(rows * out);
  be.linear_forward(rows, in, out, xp.data(), w.data(), b.data(), y1.data(), true);
  EXPECT_TRUE(same_bits(y1, want));
  be.linear_forward(rows, in, out, xp.data(), w.data(), b.data(), y2.data(), true, true);
  EXPECT_TRUE(same_bits(unpacked(be, y2, rows * out), rounded(want)));
  be.pt::Backend::linear_forward(rows, in, out, xp.data(), w.data(), b.data(), y3.data(), true, true);
  EXPECT_TRUE(same_bits(unpacked(be, y3, rows * out), rounded(want)));
}

TEST(PackedOps, BiasGradientOfThePackedGradient) {
  pt::host::HostBackend be;
  be.set_precision(Precision::bf16);
  const int64_t rows = 50, cols = 37;
  const auto dy = values(rows * cols, 31, 4.0f);
  std::vector<float> want(cols, 0.25f), got(cols, 0.25f);
  const auto r = rounded(dy);
  be.bias_grad_rows(r.data(), want.data(), rows, cols);
  const auto p = packed(be, dy);
  be.bias_grad_rows_packed(p.data(), got.data(), rows, cols);
  EXPECT_TRUE(same_bits(got, want));
}

TEST(PackedOps, AddIsCopyThenAxpy) {
  pt::host::HostBackend be;
  const size_t n = 333;
  const auto a = values(n, 51, 3.0f), b = values(n, 52, 3.0f);
  std::vector<float> want = a, got(n), dflt(n), alias = b;
  be.axpy(n, 1.0f, b.data(), want.data());
  be.add(n, a.data(), b.data(), got.data());
  be.pt::Backend::add(n, a.data(), b.data(), dflt.data());
  be.add(n, a.data(), alias.data(), alias.data());
  EXPECT_TRUE(same_bits(got, want));
  EXPECT_TRUE(same_bits(dflt, want));
  EXPECT_TRUE(same_bits(alias, want));
}

TEST(PackedOps, GeluDerivativeKeptForBackwardIsBitwiseGeluBackward) {
  pt::host::HostBackend be;
  const size_t n = 1000;
  const auto x = values(n, 41, 12.0f), dy = values(n, 42, 2.0f);
  std::vector<float> y_want(n), dx_want(n);
  be.gelu_forward(n, x.data(), y_want.data());
  be.gelu_backward(n, x.data(), dy.data(), dx_want.data());
  {
    std::vector<float> d = x, y(n), dx(n);
    be.gelu_forward_deriv(n, d.data(), y.data());
    be.mul(n, dy.data(), d.data(), dx.data());
    EXPECT_TRUE(same_bits(y, y_want));
    EXPECT_TRUE(same_bits(dx, dx_want));
  }
  std::vector<float> d = x, yp(n), dxp(n);
  be.gelu_forward_deriv_packed(n, d.data(), yp.data());
  be.mul_packed(n, dy.data(), d.data(), dxp.data());
  EXPECT_TRUE(same_bits(unpacked(be, yp, n), rounded(y_want)));
  EXPECT_TRUE(same_bits(unpacked(be, dxp, n), rounded(dx_want)));
}

TEST(PackedOps, RoundPackIsRoundThenPack) {
  pt::host::HostBackend be;
  for (size_t n : {1u, 7u, 16u, 35u, 1001u}) {
    auto x = values(n, 61 + n, 100.0f);
    x[0] = std::numeric_limits<float>::quiet_NaN();
    if (n > 3) x[1] = std::numeric_limits<float>::infinity(), x[2] = -1e-40f, x[3] = 1.0f + 1.0f / 256;
    const std::vector<float> want_y = [&] {
      std::vector<float> y(n);
      be.round_bf16(n, x.data(), y.data());
      return y;
    }();
    const auto want_p = packed(be, want_y);
    for (int dflt = 0; dflt < 2; ++dflt) {
      std::vector<float> y(n), p((n + 1) / 2, 1.0f);
      if (dflt) be.pt::Backend::round_pack_bf16(n, x.data(), y.data(), p.data());
      else be.round_pack_bf16(n, x.data(), y.data(), p.data());
      EXPECT_TRUE(same_bits(y, want_y)) << n << " default " << dflt;
      EXPECT_TRUE(same_bits(p, want_p)) << n << " default " << dflt;
    }
    for (size_t i = 1; i < n; ++i) ASSERT_EQ(want_y[i], bf16_round(x[i])) << i;  // the vector rounding
    std::vector<float> inplace = x;
    be.round_bf16(n, inplace.data(), inplace.data());
    EXPECT_TRUE(same_bits(inplace, want_y));
  }
}

// x [M x K] times w [K x 1] in bf16, reading w at `at` (inside or beside a twin's region)
std::vector<float> product(pt::Backend& be, const std::vector<float>& x, const float* w, int64_t K, int64_t ldb = 1) {
  const int64_t M = static_cast<int64_t>(x.size()) / K;
  std::vector<float> y(M);
  be.gemm(false, false, M, 1, K, 1.0f, x.data(), K, w, ldb, 0.0f, y.data(), 1);
  return y;
}

TEST(PackedOps, GemmReadsRegisteredTwins) {
  pt::host::HostBackend be;
  be.set_precision(Precision::bf16);
  const int64_t K = 64;
  const auto x = values(5 * K, 71, 1.0f);
  const size_t n = 3 * K;  // the registered region: the first 3K of w's 4K values
  const auto w = values(4 * K, 72, 1.0f), other = values(n, 73, 1.0f);
  const auto other_p = packed(be, other);  // a twin that lies: other values, so its use shows
  const auto want = product(be, x, w.data() + K, K), lie = product(be, x, other.data() + K, K);
  ASSERT_FALSE(same_bits(want, lie));
  be.set_packed_twin(w.data(), n, other_p.data());
  EXPECT_TRUE(same_bits(product(be, x, w.data() + K, K), lie)) << "an operand inside the region reads the twin";
  EXPECT_TRUE(same_bits(product(be, x, w.data() + 2 * K, K), product(be, x, other.data() + 2 * K, K)));
  const std::vector<float> tail(w.begin() + 2 * K, w.end());
  const auto x2 = values(5 * 2 * K, 74, 1.0f);
  EXPECT_TRUE(same_bits(product(be, x2, w.data() + 2 * K, 2 * K), product(be, x2, tail.data(), 2 * K)))
      << "an operand reaching past the region is converted where it is";
  const auto xs = values(5 * (K / 2), 75, 1.0f);
  std::vector<float> every_other(K / 2);
  for (int64_t k = 0; k < K / 2; ++k) every_other[k] = w[2 * k];
  EXPECT_TRUE(same_bits(product(be, xs, w.data(), K / 2, 2), product(be, xs, every_other.data(), K / 2)))
      << "a strided operand is converted";
  be.set_precision(Precision::fp32);
  const auto f32 = product(be, x, w.data() + K, K);
  std::vector<float> copy(w.begin() + K, w.begin() + 2 * K);
  EXPECT_TRUE(same_bits(f32, product(be, x, copy.data(), K))) << "fp32 reads the values";
  be.set_precision(Precision::bf16);
  be.set_packed_twin(w.data(), n, nullptr);
  EXPECT_TRUE(same_bits(product(be, x, w.data() + K, K), want)) << "a forgotten twin is not read";
  const auto w_p = packed(be, w);  // an honest twin changes nothing
  be.set_packed_twin(w.data(), n, w_p.data());
  EXPECT_TRUE(same_bits(product(be, x, w.data() + K, K), want));
  std::vector<float> y(5 * 3), y_twin(5 * 3);
  be.set_packed_twin(w.data(), n, nullptr);
  be.linear_forward(5, K, 3, x.data(), w.data(), nullptr, y.data());
  be.set_packed_twin(w.data(), n, other_p.data());
  be.linear_forward(5, K, 3, x.data(), w.data(), nullptr, y_twin.data());
  std::vector<float> y_other(5 * 3);
  be.set_packed_twin(w.data(), n, nullptr);
  be.linear_forward(5, K, 3, x.data(), other.data(), nullptr, y_other.data());
  EXPECT_TRUE(same_bits(y_twin, y_other)) << "linear_forward reads the twin too";
  EXPECT_FALSE(same_bits(y, y_other));
}

TEST(PackedOps, AllFiniteFindsEveryNonFinite) {
  pt::host::HostBackend be;
  const size_t n = 531;
  auto x = values(n, 81, 1e30f);
  x[7] = std::numeric_limits<float>::max(), x[8] = -std::numeric_limits<float>::max(), x[9] = -0.0f;
  x[10] = std::numeric_limits<float>::denorm_min();
  EXPECT_TRUE(be.all_finite(n, x.data()));
  EXPECT_TRUE(be.all_finite(0, x.data()));
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()})
    for (size_t at : {size_t{0}, size_t{15}, size_t{16}, n - 1}) {
      auto y = x;
      y[at] = bad;
      EXPECT_FALSE(be.all_finite(n, y.data())) << bad << " at " << at;
      EXPECT_TRUE(be.all_finite(at, y.data())) << "the prefix before " << at;
    }
}

}  // namespace
