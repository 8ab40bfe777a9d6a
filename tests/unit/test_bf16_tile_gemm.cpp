// The small bf16 products of the bf16 attention kernel (src/kernels/host/bf16_tile_gemm.cpp)
// against a double reference written here from the definition C = op(A) B on the same bf16
// values: every operand layout (A plain or transposed, B plain or transposed), strided rows,
// odd and non-multiple-of-16 sizes (every tail of the row tiles and column vectors, odd K),
// fp32 and bf16 C, and the three causal limits with zeros where the limit says op(A) has them.
// Bars: fp32 C within 2^-22 * sum|a b| per element (fp32 sums of at most K exact products,
// rounded once per pair); bf16 C equal to bf16_round of a value within that bar of the
// reference, i.e. within one bf16 ulp. C entries the causal limit leaves unspecified are not
// read; everything outside C's rows and columns is checked untouched. Skipped on CPUs without
// AVX512-BF16 (the attention kernel then keeps oneDNN's matmul).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "../../src/kernels/host/bf16_tile_gemm.hpp"
#include "pipetrain/backend.hpp"

namespace {

using pt::bf16_bits;
using pt::bf16_to_float;
using pt::host::TileGemm;
using Causal = TileGemm::Causal;

struct Shape {
  int64_t M, N, K;
  bool ta, tb, c16;
  Causal causal;
};

uint16_t value(uint64_t i, uint64_t salt) {  // a bf16 in about [-2, 2], deterministic
  const uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ (salt * 0xC2B2AE3D27D4EB4Full);
  const float f = static_cast<float>((h >> 40) % 4001) / 1000.0f - 2.0f;
  return bf16_bits(f);
}

void check(const Shape& s) {
  SCOPED_TRACE(::testing::Message() << s.M << "x" << s.N << "x" << s.K << " ta " << s.ta << " tb " << s.tb << " c16 "
                                    << s.c16 << " causal " << static_cast<int>(s.causal));
  const int64_t pad = 3;  // row strides wider than the rows
  const int64_t lda = (s.ta ? s.M : s.K) + pad, ldb = (s.tb ? s.K : s.N) + pad, ldc = s.N + pad;
  std::vector<uint16_t> A(static_cast<size_t>((s.ta ? s.K : s.M) * lda)), B(static_cast<size_t>((s.tb ? s.N : s.K) * ldb));
  for (size_t i = 0; i < A.size(); ++i) A[i] = value(i, 1);
  for (size_t i = 0; i < B.size(); ++i) B[i] = value(i, 2);
  auto a = [&](int64_t i, int64_t k) {  // op(A)[i][k], with the zeros the causal limit promises
    if ((s.causal == Causal::k_lower && k > i) || (s.causal == Causal::k_upper && k < i)) return 0.0f;
    return bf16_to_float(A[static_cast<size_t>(s.ta ? k * lda + i : i * lda + k)]);
  };
  auto b = [&](int64_t k, int64_t n) { return bf16_to_float(B[static_cast<size_t>(s.tb ? n * ldb + k : k * ldb + n)]); };
  for (int64_t i = 0; i < s.M; ++i)  // write the zeros into A itself: the kernel may skip or read them
    for (int64_t k = 0; k < s.K; ++k)
      if (a(i, k) == 0.0f) A[static_cast<size_t>(s.ta ? k * lda + i : i * lda + k)] = 0;
  const float sentinel = -12345.0f;
  std::vector<float> C(static_cast<size_t>(s.M * ldc + 8), sentinel);
  TileGemm g;
  g.M = s.M, g.N = s.N, g.K = s.K, g.A = A.data(), g.lda = lda, g.a_trans = s.ta, g.B = B.data(), g.ldb = ldb;
  g.b_trans = s.tb, g.C = C.data(), g.ldc = ldc, g.c_bf16 = s.c16, g.causal = s.causal;
  std::vector<uint32_t> scratch;
  pt::host::tile_gemm_bf16(g, scratch);
  const auto* c16 = reinterpret_cast<const uint16_t*>(C.data());
  int bad = 0;
  for (int64_t i = 0; i < s.M; ++i)
    for (int64_t n = 0; n < s.N; ++n) {
      if (s.causal == Causal::cols && n > i) continue;
      double ref = 0, mag = 0;
      for (int64_t k = 0; k < s.K; ++k) ref += static_cast<double>(a(i, k)) * b(k, n), mag += std::fabs(static_cast<double>(a(i, k)) * b(k, n));
      const double bar = std::ldexp(mag, -22) + 1e-30;
      double got;
      if (s.c16) {
        got = bf16_to_float(c16[i * ldc + n]);
        const double lo = bf16_to_float(bf16_bits(static_cast<float>(ref - bar))), hi = bf16_to_float(bf16_bits(static_cast<float>(ref + bar)));
        if ((got < lo || got > hi) && bad++ < 5) ADD_FAILURE() << "C[" << i << "][" << n << "] = " << got << ", reference " << ref;
      } else {
        got = C[static_cast<size_t>(i * ldc + n)];
        if (std::fabs(got - ref) > bar && bad++ < 5)
          ADD_FAILURE() << "C[" << i << "][" << n << "] = " << got << ", reference " << ref << ", bar " << bar;
      }
    }
  // nothing written outside C: the row padding (fp32: floats; bf16: halves) and the tail
  for (int64_t i = 0; i < s.M; ++i)
    for (int64_t n = s.N; n < ldc && !s.c16; ++n) EXPECT_EQ(C[static_cast<size_t>(i * ldc + n)], sentinel) << "row " << i << " column " << n;
  if (s.c16) {  // bf16 C: the halves after each row's N values keep the sentinel's bits
    uint16_t sent[2];
    std::memcpy(sent, &sentinel, sizeof sentinel);
    for (int64_t i = 0; i < s.M; ++i)
      for (int64_t n = s.N; n < ldc; ++n) EXPECT_EQ(c16[i * ldc + n], sent[(i * ldc + n) % 2]) << "row " << i << " half " << n;
  }
  // deterministic: a second call writes the same bits
  std::vector<float> again(C.size(), sentinel);
  g.C = again.data();
  pt::host::tile_gemm_bf16(g, scratch);
  for (int64_t i = 0; i < s.M; ++i)
    for (int64_t n = 0; n < s.N; ++n) {
      if (s.causal == Causal::cols && n > i) continue;
      if (s.c16) ASSERT_EQ(reinterpret_cast<const uint16_t*>(again.data())[i * ldc + n], c16[i * ldc + n]);
      else ASSERT_EQ(again[static_cast<size_t>(i * ldc + n)], C[static_cast<size_t>(i * ldc + n)]);
    }
}

TEST(Bf16TileGemm, MatchesDoubleReferenceInEveryLayoutAndCausalLimit) {
  if (!pt::host::tile_gemm_available()) GTEST_SKIP() << "this build has no AVX512-BF16 kernel";
  // the attention shapes (T x T x dh, T x dh x T) and tails: M, N, K odd or off 16, both tile widths
  const std::vector<std::array<int64_t, 3>> sizes = {{128, 128, 32}, {128, 32, 128}, {37, 37, 24}, {37, 24, 37},
                                                     {1, 1, 1},      {9, 50, 7},      {70, 64, 70}, {21, 17, 2}, {7, 7, 5}, {7, 5, 7}};
  for (const auto& [M, N, K] : sizes)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (int c16 = 0; c16 < 2; ++c16)
          for (Causal c : {Causal::none, Causal::cols, Causal::k_lower, Causal::k_upper}) {
            if (c != Causal::none && c != Causal::cols && M != K) continue;  // the k limits are for square op(A)
            check({M, N, K, ta != 0, tb != 0, c16 != 0, c});
          }
}

// The causal limits skip work: a row tile of the cols limit writes no column block past its
// diagonal (those floats keep their old values), which a kernel ignoring the limit would not.
TEST(Bf16TileGemm, ColsLimitSkipsTheBlocksAboveTheDiagonal) {
  if (!pt::host::tile_gemm_available()) GTEST_SKIP() << "this build has no AVX512-BF16 kernel";
  const int64_t T = 64, dh = 16;
  std::vector<uint16_t> q(static_cast<size_t>(T * dh), bf16_bits(1.0f));
  std::vector<float> s(static_cast<size_t>(T * T), -1.0f);
  TileGemm g;
  g.M = T, g.N = T, g.K = dh, g.A = q.data(), g.lda = dh, g.B = q.data(), g.ldb = dh, g.b_trans = true;
  g.C = s.data(), g.ldc = T, g.causal = Causal::cols;
  std::vector<uint32_t> scratch;
  pt::host::tile_gemm_bf16(g, scratch);
  EXPECT_EQ(s[0], 16.0f);
  EXPECT_EQ(s[T - 1], -1.0f) << "row 0 computed column " << T - 1;
  EXPECT_EQ(s[(T - 1) * T + T - 1], 16.0f);
}

}  // namespace
