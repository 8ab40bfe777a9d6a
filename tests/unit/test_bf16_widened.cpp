// bf16 on a CPU whose oneDNN has no bf16 kernels (2.6 below AVX512, e.g. a Zen 3 EPYC:
// host::onednn_bf16_native() is false): the host backend computes a bf16 product or
// convolution with the fp32 primitives on its operands' bf16 values, widened exactly, which is
// the arithmetic of a bf16 kernel (bf16 inputs, fp32 accumulation); PT_BF16_KERNELS=widened
// asks for it on any CPU, so these tests run everywhere. Asserted:
//   - a OneDnn widens exactly when oneDNN lacks bf16 kernels, or when asked;
//   - a widened bf16 GEMM (fp32 operands or bf16 views, transposes, alpha, beta, batches) is
//     bitwise the fp32 oneDNN GEMM of the bf16-rounded operands, and a bf16 output of a fused
//     linear is that result (bias included) rounded; a product too large for the widened
//     copies' bound (4 MiB per operand) runs in blocks, within the fp32 bound of the exact one;
//   - a widened bf16 convolution (forward with bias, backward data, weights and bias, and bf16
//     views as inputs) is bitwise the fp32 convolution of the rounded x, w and dy;
//   - the widened convolution's plans keep what the memory model counts, however the backward
//     is called;
//   - where oneDNN has bf16 kernels, a widened GEMM and a native one agree within the bound of
//     two fp32 sums of K products ((K + 2) u sum |a||b| each; skipped elsewhere).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "../../src/kernels/host/host_backend.hpp"
#include "../../src/kernels/host/onednn.hpp"
#include "pipetrain/backend.hpp"
#include "pipetrain/rng.hpp"

namespace pt::test {
namespace {

using host::Fp32Kernels;
using host::HostBackend;

std::vector<float> values(size_t n, uint64_t seed, float scale) {
  std::vector<float> v(n);
  const uint64_t key = rng_key(seed, Stream::synthetic, 91);
  for (size_t i = 0; i < n; ++i) v[i] = scale * (2.0f * rng_uniform(key, i) - 1.0f);
  return v;
}

std::vector<float> rounded(std::vector<float> v) {
  for (float& x : v) x = bf16_round(x);
  return v;
}

std::vector<float> packed(const std::vector<float>& v) {
  std::vector<float> p((v.size() + 1) / 2);
  host::to_bf16(v.size(), v.data(), reinterpret_cast<uint16_t*>(p.data()));
  return p;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A host backend made while PT_BF16_KERNELS is `mode` (null: unset), fp32 products on oneDNN.
std::unique_ptr<HostBackend> backend(const char* mode) {
  const char* old = std::getenv("PT_BF16_KERNELS");
  const std::string saved = old ? old : "";
  if (mode) setenv("PT_BF16_KERNELS", mode, 1);
  else unsetenv("PT_BF16_KERNELS");
  auto be = std::make_unique<HostBackend>();
  be->set_fp32_kernels(Fp32Kernels::onednn);
  be->onednn();  // made now, under this environment
  if (old) setenv("PT_BF16_KERNELS", saved.c_str(), 1);
  else unsetenv("PT_BF16_KERNELS");
  return be;
}

TEST(Bf16Widened, ChosenWhenOneDnnLacksBf16KernelsOrWhenAsked) {
  EXPECT_EQ(backend(nullptr)->onednn().widens_bf16(), !host::onednn_bf16_native());
  EXPECT_EQ(host::onednn_bf16_native(), host::onednn_isa_name().find("avx512") == 0) << host::onednn_isa_name();
  EXPECT_TRUE(backend("widened")->onednn().widens_bf16());
}

struct Case {
  bool ta, tb;
  int64_t M, N, K;
  float alpha, beta;
};

TEST(Bf16Widened, GemmIsTheFp32GemmOfTheRoundedOperands) {
  auto wide = backend("widened"), ref = backend(nullptr);
  uint64_t seed = 5;
  for (const Case c : {Case{false, false, 33, 17, 65, 1.0f, 0.0f}, Case{true, false, 64, 48, 130, -1.25f, 0.25f},
                       Case{false, true, 7, 13, 5, 0.5f, 1.0f}, Case{true, true, 128, 10, 512, 1.0f, 0.0f}}) {
    SCOPED_TRACE(testing::Message() << c.ta << c.tb << " M " << c.M << " N " << c.N << " K " << c.K);
    const auto A = values(c.M * c.K, seed++, 2.0f), B = values(c.K * c.N, seed++, 1.0f), C0 = values(c.M * c.N, seed++, 1.0f);
    const int64_t lda = c.ta ? c.M : c.K, ldb = c.tb ? c.K : c.N;
    std::vector<float> want = C0, got = C0, got_views = C0;
    ref->gemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha, rounded(A).data(), lda, rounded(B).data(), ldb, c.beta, want.data(),
              c.N, Precision::fp32);
    wide->gemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb, c.beta, got.data(), c.N, Precision::bf16);
    EXPECT_TRUE(same_bits(got, want)) << "fp32 operands";
    const auto Ap = packed(A), Bp = packed(B);
    wide->gemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha, as_bf16(Ap.data()), lda, as_bf16(Bp.data()), ldb, c.beta,
               got_views.data(), c.N, Precision::bf16);
    EXPECT_TRUE(same_bits(got_views, want)) << "bf16 views";
  }
  // batched: 3 products of 9 x 11 x 21, A and B with padded rows (the reference: dense copies
  // of the rounded operands, which is what the widened product hands oneDNN)
  const int64_t batch = 3, M = 9, N = 11, K = 21, lda = K + 3, ldb = N + 1, sa = M * lda, sb = K * ldb;
  const auto A = values(batch * sa, 41, 1.0f), B = values(batch * sb, 42, 1.0f);
  std::vector<float> want(batch * M * N), got(batch * M * N), Ad, Bd;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t r = 0; r < M; ++r) Ad.insert(Ad.end(), A.begin() + b * sa + r * lda, A.begin() + b * sa + r * lda + K);
    for (int64_t r = 0; r < K; ++r) Bd.insert(Bd.end(), B.begin() + b * sb + r * ldb, B.begin() + b * sb + r * ldb + N);
  }
  ref->gemm_strided_batched(false, false, M, N, K, 1.0f, rounded(Ad).data(), K, M * K, rounded(Bd).data(), N, K * N,
                            0.0f, want.data(), N, M * N, batch, Precision::fp32);
  wide->gemm_strided_batched(false, false, M, N, K, 1.0f, A.data(), lda, sa, B.data(), ldb, sb, 0.0f, got.data(), N,
                             M * N, batch, Precision::bf16);
  EXPECT_TRUE(same_bits(got, want)) << "strided batched";
}

// A product whose widened operands pass the 4 MiB bound runs in blocks, summed over K in
// chunks of 1024 where K is longer (the last three): against the double product of the
// rounded operands within the fp32 bound ((K + 2) u sum |a||b|, plus for a bf16 output its
// rounding, 2^-8 of the value), with the copies inside their bound.
TEST(Bf16Widened, LargeProductsRunInBlocksWithinTheFp32Bound) {
  auto wide = backend("widened");
  struct Big {
    bool ta, tb, c_bf16;
    int64_t M, N, K;
  };
  uint64_t seed = 80;
  for (const Big c : {Big{false, false, false, 600, 3000, 700}, Big{true, true, false, 1500, 900, 1200},
                      Big{false, true, true, 1500, 1500, 800}, Big{false, false, false, 300, 500, 5000},
                      Big{true, true, false, 200, 700, 3000}, Big{false, true, true, 900, 900, 2500}}) {
    SCOPED_TRACE(testing::Message() << c.ta << c.tb << " bf16 C " << c.c_bf16 << " M " << c.M << " N " << c.N << " K " << c.K);
    const auto A = values(c.M * c.K, seed++, 1.0f), B = values(c.K * c.N, seed++, 1.0f), bias = values(c.N, seed++, 1.0f);
    const int64_t lda = c.ta ? c.M : c.K, ldb = c.tb ? c.K : c.N;
    std::vector<float> got(c.M * c.N, 0.5f);
    if (c.c_bf16) {  // a fused linear: y = x W^T + b, written as bf16
      std::vector<float> y16((c.M * c.N + 1) / 2);
      const auto Ap = packed(A);
      wide->fused().linear_forward(c.M, c.K, c.N, as_bf16(Ap.data()), B.data(), bias.data(), as_bf16(y16.data()),
                                   Precision::bf16);
      wide->unpack_bf16(got.size(), y16.data(), got.data());
    } else {
      wide->gemm(c.ta, c.tb, c.M, c.N, c.K, 1.0f, A.data(), lda, B.data(), ldb, 1.0f, got.data(), c.N, Precision::bf16);
    }
    const auto Ar = rounded(A), Br = rounded(B);
    const double u = std::ldexp(1.0, -24);
    for (int64_t i = 0; i < c.M; i += 7)
      for (int64_t j = 0; j < c.N; j += 5) {
        double want = c.c_bf16 ? bias[j] : 0.5, mag = std::fabs(want);
        for (int64_t k = 0; k < c.K; ++k) {
          const double p = double(Ar[c.ta ? k * lda + i : i * lda + k]) * Br[c.tb ? j * ldb + k : k * ldb + j];
          want += p, mag += std::fabs(p);
        }
        const double tol = (c.K + 2) * u * mag + (c.c_bf16 ? std::ldexp(std::fabs(want) + (c.K + 2) * u * mag, -8) : 0.0);
        ASSERT_LE(std::fabs(got[i * c.N + j] - want), tol) << "at (" << i << ", " << j << ")";
      }
  }
  EXPECT_GT(wide->onednn().widened_bytes(), 0);
  EXPECT_LE(wide->onednn().widened_bytes(), 3 * (4 << 20)) << "the widened copies' bound";
}

TEST(Bf16Widened, Bf16OutputIsTheFp32ResultRounded) {
  auto wide = backend("widened"), ref = backend(nullptr);
  const int64_t rows = 40, in = 48, out = 32;
  const auto x = values(rows * in, 21, 2.0f), w = values(out * in, 22, 0.5f), b = values(out, 23, 1.0f);
  std::vector<float> want(rows * out, 0.0f), y(rows * out / 2, 0.0f), got(rows * out);
  ref->fused().linear_forward(rows, in, out, rounded(x).data(), rounded(w).data(), b.data(), want.data(), Precision::fp32);
  const auto xp = packed(x);
  wide->fused().linear_forward(rows, in, out, as_bf16(xp.data()), w.data(), b.data(), as_bf16(y.data()), Precision::bf16);
  wide->unpack_bf16(got.size(), y.data(), got.data());
  EXPECT_TRUE(same_bits(got, rounded(want)));
}

WindowGeom geom(int64_t c_in, int64_t hw, int64_t c_out, int64_t k, int64_t stride, int64_t pad) {
  WindowGeom g;
  g.c_in = c_in, g.h_in = g.w_in = hw, g.c_out = c_out, g.kernel = k, g.stride = stride, g.padding = pad;
  g.h_out = g.w_out = (hw + 2 * pad - k) / stride + 1;
  return g;
}

TEST(Bf16Widened, ConvolutionIsTheFp32ConvolutionOfTheRoundedInputs) {
  auto wide = backend("widened"), ref = backend(nullptr);
  uint64_t seed = 60;
  for (const WindowGeom& g : {geom(3, 9, 5, 3, 1, 1), geom(32, 14, 64, 3, 1, 1), geom(16, 8, 32, 3, 2, 1)}) {
    SCOPED_TRACE(testing::Message() << "c_in " << g.c_in << " c_out " << g.c_out << " stride " << g.stride);
    const int64_t n = 4, xs = n * g.c_in * g.h_in * g.w_in, ys = n * g.c_out * g.h_out * g.w_out,
                  ws = g.c_out * g.c_in * g.kernel * g.kernel;
    const auto x = values(xs, seed++, 1.0f), w = values(ws, seed++, 0.5f), b = values(g.c_out, seed++, 1.0f),
               dy = values(ys, seed++, 1.0f);
    struct Out {
      std::vector<float> y, dx, dw, db;
    };
    auto run = [&](HostBackend& be, CView xv, const std::vector<float>& wv, CView dyv, Precision p) {
      Out o{std::vector<float>(ys), std::vector<float>(xs), std::vector<float>(ws, 0.125f), std::vector<float>(g.c_out, 0.5f)};
      be.conv2d_forward(g, n, xv, wv.data(), b.data(), o.y.data(), p);
      be.conv2d_backward(g, n, xv, wv.data(), dyv, o.dx.data(), o.dw.data(), o.db.data(), p);
      return o;
    };
    const auto xr = rounded(x), wr = rounded(w), dyr = rounded(dy);
    const Out want = run(*ref, xr.data(), wr, dyr.data(), Precision::fp32);
    const Out got = run(*wide, x.data(), w, dy.data(), Precision::bf16);
    EXPECT_TRUE(same_bits(got.y, want.y) && same_bits(got.dx, want.dx) && same_bits(got.dw, want.dw) &&
                same_bits(got.db, want.db))
        << "fp32 inputs";
    const auto xp = packed(x), dyp = packed(dy);
    const Out views = run(*wide, as_bf16(xp.data()), w, as_bf16(dyp.data()), Precision::bf16);
    EXPECT_TRUE(same_bits(views.y, want.y) && same_bits(views.dx, want.dx) && same_bits(views.dw, want.dw) &&
                same_bits(views.db, want.db))
        << "bf16 views";
  }
}

// The widened convolution's plans keep what the memory model counts for them (each pass's
// widened inputs included), whether the backward runs as one call, split into its data and
// weights passes (the split-backward schedules), or as the weights pass alone (a first layer).
TEST(Bf16Widened, ConvolutionPlansKeepWhatTheModelCounts) {
  const WindowGeom g = geom(32, 14, 64, 3, 1, 1);
  const int64_t n = 8, xs = n * 32 * 14 * 14, ys = n * 64 * 14 * 14, ws = 64 * 32 * 9;
  std::vector<float> x(xs, 0.5f), y(ys), dy(ys, 0.25f), dx(xs), w(ws, 0.1f), b(64, 0.0f), dw(ws), db(64);
  for (int how = 0; how < 3; ++how) {
    SCOPED_TRACE(how == 0 ? "one call" : how == 1 ? "split" : "weights alone");
    auto be = backend("widened");
    const bool data = how < 2;
    const int64_t want = be->conv_kernel_bytes(g, n, true, true, data, Precision::bf16).kept;
    be->conv2d_forward(g, n, x.data(), w.data(), b.data(), y.data(), Precision::bf16);
    if (how == 0) be->conv2d_backward(g, n, x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data(), Precision::bf16);
    if (how == 1) be->conv2d_backward(g, n, x.data(), w.data(), dy.data(), dx.data(), nullptr, nullptr, Precision::bf16);
    if (how >= 1) be->conv2d_backward(g, n, x.data(), w.data(), dy.data(), nullptr, dw.data(), db.data(), Precision::bf16);
    EXPECT_EQ(be->onednn().conv_plans_bytes(), want);
  }
}

TEST(Bf16Widened, AgreesWithTheNativeBf16Kernels) {
  if (!host::onednn_bf16_native()) GTEST_SKIP() << "this CPU's oneDNN has no bf16 kernels: nothing to compare with";
  auto wide = backend("widened"), native = backend(nullptr);
  const int64_t M = 64, N = 96, K = 384;
  const auto A = values(M * K, 71, 1.0f), B = values(K * N, 72, 1.0f);
  std::vector<float> a(M * N), b(M * N);
  wide->gemm(false, false, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, a.data(), N, Precision::bf16);
  native->gemm(false, false, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, b.data(), N, Precision::bf16);
  const auto Ar = rounded(A), Br = rounded(B);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double mag = 0;
      for (int64_t k = 0; k < K; ++k) mag += std::fabs(double(Ar[i * K + k]) * Br[k * N + j]);
      ASSERT_LE(std::fabs(double(a[i * N + j]) - b[i * N + j]), 2.0 * (K + 2) * std::ldexp(1.0, -24) * mag)
          << "at (" << i << ", " << j << ")";
    }
}

}  // namespace
}  // namespace pt::test
