// The host's fused causal attention kernel (FusedKernels::attention_forward/backward,
// src/kernels/host/attention_kernel.cpp) against a reference in double written here from the
// definition, on shapes that exercise every tail (T and dh not multiples of 4 or 16, one
// head, several samples), in both precisions:
//  - fp32: P, o, dq, dk, dv within 2e-6 of the largest reference magnitude (fp32 sums of at
//    most T exact products; only the order differs);
//  - bf16: the reference rounds the same operands (q, k, v, P; do, v, P, dS, k, q) with
//    bf16_round and sums in double; its softmax backward reads the rounded P too. P, o and dv agree within 2e-6 (the operands are the
//    kernel's own rounded values, so only fp32 accumulation differs); dq and dk within 2e-3,
//    because dS is rounded from the kernel's fp32 value, which can sit on the other side of
//    a bf16 rounding boundary from the double one for a few elements (one bf16 ulp, 2^-8).
//    A kernel that skipped a rounding misses the 2e-6 bars by orders of magnitude, which the
//    test asserts too.
// Plus: both precisions are deterministic (bitwise equal on a repeat), bf16 output views
// are exactly the rounded fp32 ones, a bf16 qkv view gives the same bits as an f32 one, a bf16
// P view holds the rounded probabilities and gives the same bits as an f32 one, and
// the composed path
// (heads_split, batched oneDNN/OpenBLAS GEMMs, causal softmax, heads_merge) agrees with the
// fused one within the same bars.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <vector>

#include "pipetrain/backend.hpp"
#include "test_support.hpp"

namespace {

using pt::Backend;
using pt::bf16_round;
using pt::Precision;

struct Case {
  int64_t n, T, H, dh;
};
struct Grads {
  std::vector<float> P, o, dqkv;
};

using pt::test::lcg_uniform;

pt::AttentionGeom geom(const Case& c) {
  pt::AttentionGeom g;
  g.n = c.n, g.T = c.T, g.H = c.H, g.dh = c.dh, g.scale = 1.0f / std::sqrt(static_cast<float>(c.dh));
  return g;
}

Grads run_fused(Backend& be, const Case& c, Precision p, const std::vector<float>& qkv, const std::vector<float>& dout,
                bool packed_out = false, bool packed_in = false, bool packed_P = false) {
  pt::AttentionGeom g = geom(c);
  g.precision = p;
  const pt::DType in = packed_in ? pt::DType::bf16 : pt::DType::f32, out = packed_out ? pt::DType::bf16 : pt::DType::f32;
  const pt::DType pd = packed_P ? pt::DType::bf16 : pt::DType::f32;
  Grads r;
  r.P.assign(c.n * c.H * c.T * c.T, -1.0f);
  r.o.assign(c.n * c.T * c.H * c.dh, -1.0f);
  r.dqkv.assign(c.n * c.T * 3 * c.H * c.dh, -1.0f);
  be.fused().attention_forward(g, pt::CView{qkv.data(), in}, pt::View{r.P.data(), pd}, pt::View{r.o.data(), out});
  be.fused().attention_backward(g, pt::CView{qkv.data(), in}, pt::CView{r.P.data(), pd}, dout.data(), pt::View{r.dqkv.data(), out});
  return r;
}

// The same through the composed ops (what the layer runs on a backend without the kernel).
Grads run_composed(Backend& be, const Case& c, Precision p, const std::vector<float>& qkv, const std::vector<float>& dout) {
  const int64_t n = c.n, T = c.T, H = c.H, dh = c.dh, TD = T * H * dh, B = n * H;
  const float scale = geom(c).scale;
  std::vector<float> h(3 * n * TD), Oh(n * TD), dOh(n * TD), dP(B * T * T), dh3(3 * n * TD);
  Grads r;
  r.P.assign(B * T * T, 0.0f);
  r.o.assign(n * TD, 0.0f);
  r.dqkv.assign(qkv.size(), 0.0f);
  const float *q = h.data(), *k = q + n * TD, *v = k + n * TD;
  be.heads_split(n, T, 3, H, dh, qkv.data(), h.data());
  be.gemm_strided_batched(false, true, T, T, dh, scale, q, dh, T * dh, k, dh, T * dh, 0.0f, r.P.data(), T, T * T, B, p);
  be.causal_softmax_forward(B, T, r.P.data(), r.P.data());
  std::vector<float> Pu = r.P;  // in bf16 the layer rounds P once (what the products and the softmax backward read)
  if (p == Precision::bf16) be.round_bf16(Pu.size(), Pu.data(), Pu.data());
  be.gemm_strided_batched(false, false, T, dh, T, 1.0f, Pu.data(), T, T * T, v, dh, T * dh, 0.0f, Oh.data(), dh, T * dh, B, p);
  be.heads_merge(n, T, 1, H, dh, Oh.data(), r.o.data());
  be.heads_split(n, T, 1, H, dh, dout.data(), dOh.data());
  be.gemm_strided_batched(false, true, T, T, dh, 1.0f, dOh.data(), dh, T * dh, v, dh, T * dh, 0.0f, dP.data(), T, T * T, B, p);
  be.gemm_strided_batched(true, false, T, dh, T, 1.0f, Pu.data(), T, T * T, dOh.data(), dh, T * dh, 0.0f,
                          dh3.data() + 2 * n * TD, dh, T * dh, B, p);
  be.causal_softmax_backward(B, T, Pu.data(), dP.data(), dP.data());
  be.gemm_strided_batched(false, false, T, dh, T, scale, dP.data(), T, T * T, k, dh, T * dh, 0.0f, dh3.data(), dh, T * dh, B, p);
  be.gemm_strided_batched(true, false, T, dh, T, scale, dP.data(), T, T * T, q, dh, T * dh, 0.0f, dh3.data() + n * TD, dh,
                          T * dh, B, p);
  be.heads_merge(n, T, 3, H, dh, dh3.data(), r.dqkv.data());
  return r;
}

// The definition in double. In bf16 the products read rounded operands; P (for o and dv) is
// the kernel's own fp32 output rounded, dS is rounded from its float value.
Grads reference(const Case& c, const std::vector<float>& qkv, const std::vector<float>& dout,
                const std::vector<float>& P_kernel, bool bf16) {
  const int64_t n = c.n, T = c.T, H = c.H, dh = c.dh, D = H * dh;
  const double scale = geom(c).scale;
  auto rd = [&](float x) { return static_cast<double>(bf16 ? bf16_round(x) : x); };
  Grads r;
  r.P.assign(n * H * T * T, 0.0f);
  r.o.assign(n * T * D, 0.0f);
  r.dqkv.assign(qkv.size(), 0.0f);
  for (int64_t s = 0; s < n; ++s)
    for (int64_t h = 0; h < H; ++h) {
      auto X = [&](int part, int64_t t, int64_t e) { return rd(qkv[((s * T + t) * 3 + part) * D + h * dh + e]); };
      auto dO = [&](int64_t t, int64_t e) { return rd(dout[(s * T + t) * D + h * dh + e]); };
      const float* Pk = P_kernel.data() + (s * H + h) * T * T;
      std::vector<double> dS(T * T, 0.0);
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> row(i + 1);
        double mx = -1e300, sum = 0, dot = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double acc = 0;
          for (int64_t e = 0; e < dh; ++e) acc += X(0, i, e) * X(1, j, e);
          row[j] = scale * acc;
          mx = std::max(mx, row[j]);
        }
        for (int64_t j = 0; j <= i; ++j) sum += std::exp(row[j] - mx);
        for (int64_t j = 0; j <= i; ++j) r.P[(s * H + h) * T * T + i * T + j] = static_cast<float>(std::exp(row[j] - mx) / sum);
        for (int64_t e = 0; e < dh; ++e) {
          double acc = 0;
          for (int64_t j = 0; j <= i; ++j) acc += rd(Pk[i * T + j]) * X(2, j, e);
          r.o[(s * T + i) * D + h * dh + e] = static_cast<float>(acc);
        }
        std::vector<double> dP(i + 1);
        for (int64_t j = 0; j <= i; ++j) {
          double acc = 0;
          for (int64_t e = 0; e < dh; ++e) acc += dO(i, e) * X(2, j, e);
          dP[j] = acc;
          dot += rd(Pk[i * T + j]) * acc;  // the softmax backward reads P as the products do
        }
        for (int64_t j = 0; j <= i; ++j) dS[i * T + j] = rd(static_cast<float>(rd(Pk[i * T + j]) * (dP[j] - dot)));
      }
      for (int64_t t = 0; t < T; ++t)
        for (int64_t e = 0; e < dh; ++e) {
          double dq = 0, dk = 0, dv = 0;
          for (int64_t j = 0; j <= t; ++j) dq += dS[t * T + j] * X(1, j, e);
          for (int64_t i = t; i < T; ++i) {
            dk += dS[i * T + t] * X(0, i, e);
            dv += rd(Pk[i * T + t]) * dO(i, e);
          }
          float* out = r.dqkv.data() + (s * T + t) * 3 * D + h * dh + e;
          out[0] = static_cast<float>(scale * dq), out[D] = static_cast<float>(scale * dk), out[2 * D] = static_cast<float>(dv);
        }
    }
  return r;
}

// max |got - want| over max |want|, for one part (0 q, 1 k, 2 v) of a [n, T, 3, D] buffer,
// or the whole buffer for part < 0
double rel_err(const std::vector<float>& got, const std::vector<float>& want, int part = -1, int64_t D = 0) {
  double err = 0, mag = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (part >= 0 && static_cast<int64_t>(i / D) % 3 != part) continue;
    err = std::max(err, std::fabs(static_cast<double>(got[i]) - want[i]));
    mag = std::max(mag, std::fabs(static_cast<double>(want[i])));
  }
  return err / mag;
}

const Case kCases[] = {{2, 7, 3, 5}, {1, 37, 2, 24}, {2, 33, 2, 32}, {1, 20, 1, 40}};

void check(Precision prec) {
  auto be = pt::make_host_backend();
  if (!std::getenv("PT_FUSED_ATTENTION")) { ASSERT_TRUE(be->fused().attention()); }  // the kernel itself runs regardless
  const bool bf16 = prec == Precision::bf16;
  for (const Case& c : kCases) {
    SCOPED_TRACE("n " + std::to_string(c.n) + " T " + std::to_string(c.T) + " H " + std::to_string(c.H) + " dh " +
                 std::to_string(c.dh) + (bf16 ? " bf16" : " fp32"));
    const int64_t D = c.H * c.dh;
    const auto qkv = lcg_uniform(c.n * c.T * 3 * D, 7 + c.T, 4.0f), dout = lcg_uniform(c.n * c.T * D, 11 + c.dh, 2.0f);
    const Grads k = run_fused(*be, c, prec, qkv, dout);
    const Grads ref = reference(c, qkv, dout, k.P, bf16);
    EXPECT_LT(rel_err(k.P, ref.P), 2e-6);
    EXPECT_LT(rel_err(k.o, ref.o), 2e-6);
    EXPECT_LT(rel_err(k.dqkv, ref.dqkv, 2, D), 2e-6) << "dv";
    EXPECT_LT(rel_err(k.dqkv, ref.dqkv, 0, D), bf16 ? 2e-3 : 2e-6) << "dq";
    EXPECT_LT(rel_err(k.dqkv, ref.dqkv, 1, D), bf16 ? 2e-3 : 2e-6) << "dk";
    if (bf16) {  // the roundings matter: the unrounded reference is far outside the bar
      const Grads exact = reference(c, qkv, dout, k.P, false);
      EXPECT_GT(rel_err(k.o, exact.o), 1e-4);
    }
    for (size_t i = 0; i < k.P.size(); ++i)  // exact zeros above the diagonal
      if (static_cast<int64_t>(i % c.T) > static_cast<int64_t>((i / c.T) % c.T)) { ASSERT_EQ(k.P[i], 0.0f); }
    const Grads again = run_fused(*be, c, prec, qkv, dout);
    EXPECT_EQ(again.P, k.P);
    EXPECT_EQ(again.o, k.o);
    EXPECT_EQ(again.dqkv, k.dqkv);
    if (bf16) {  // packed outputs: exactly pack_bf16 of the fp32 ones
      const Grads packed = run_fused(*be, c, prec, qkv, dout, true);
      std::vector<float> o(k.o.size()), d(k.dqkv.size());
      be->unpack_bf16(o.size(), packed.o.data(), o.data());
      be->unpack_bf16(d.size(), packed.dqkv.data(), d.data());
      for (size_t i = 0; i < o.size(); ++i) ASSERT_EQ(o[i], bf16_round(k.o[i])) << "o " << i;
      for (size_t i = 0; i < d.size(); ++i) ASSERT_EQ(d[i], bf16_round(k.dqkv[i])) << "dqkv " << i;
      std::vector<float> qkv_packed((qkv.size() + 1) / 2);  // packed q, k, v in: the same bits out
      be->pack_bf16(qkv.size(), qkv.data(), qkv_packed.data());
      const Grads from_packed = run_fused(*be, c, prec, qkv_packed, dout, false, true);
      EXPECT_EQ(from_packed.P, k.P);
      EXPECT_EQ(from_packed.o, k.o);
      EXPECT_EQ(from_packed.dqkv, k.dqkv);
      // P kept as a bf16 view (what the layer keeps): pack_bf16 of the fp32 P, and the same
      // bits out, since the products and the softmax backward read the rounded P either way
      const Grads kept = run_fused(*be, c, prec, qkv, dout, false, false, true);
      std::vector<float> P(k.P.size());
      be->unpack_bf16(P.size(), kept.P.data(), P.data());
      for (size_t i = 0; i < P.size(); ++i) ASSERT_EQ(P[i], bf16_round(k.P[i])) << "P " << i;
      EXPECT_EQ(kept.o, k.o);
      EXPECT_EQ(kept.dqkv, k.dqkv);
    }
    const Grads comp = run_composed(*be, c, prec, qkv, dout);
    EXPECT_LT(rel_err(k.o, comp.o), bf16 ? 2e-3 : 2e-6);
    EXPECT_LT(rel_err(k.dqkv, comp.dqkv), bf16 ? 4e-3 : 4e-6);
  }
}

TEST(AttentionKernel, Fp32MatchesTheDefinitionInDouble) { check(Precision::fp32); }
TEST(AttentionKernel, Bf16RoundsTheProductOperandsAsGemmDoes) { check(Precision::bf16); }

}  // namespace
