// The bf16 operand contract of the Backend interface (backend.hpp, dtype.hpp;
// docs/PRECISION.md), a test every backend must pass: BackendContract runs on the host
// backend always and on the CUDA backend in a CUDA=1 build with a device (skipped otherwise,
// saying why). Operands live in the backend's memory; each op is checked against the
// backend's own fp32-view op bit for bit, and packing against the scalar bf16_bits:
//  - pack_bf16 rounds to nearest even (bf16_bits), in place or not, odd counts, NaN;
//    unpack_bf16 restores the values, in place too;
//  - gemm with A, B or both bf16 views (and transposed) = gemm in bf16 on the f32 values;
//    a bf16 view in an fp32 product is refused;
//  - linear_forward with a bf16 input and/or output = the f32 one, rounded; the Backend's
//    default composition gives the same;
//  - bias_grad_rows of a bf16 view = bias_grad_rows of the rounded f32 values;
//  - gelu_forward_deriv (+ mul) = gelu_forward and gelu_backward; into bf16 views = those
//    results rounded; gelu_forward/backward of a bf16 x = of its f32 values, into bf16 views
//    rounded, in ceil(n / 2) floats; add = copy then axpy;
//  - round_pack_bf16 = round_bf16 and pack_bf16 (the backend's and the default), odd counts,
//    NaN, infinities;
//  - all_finite finds a NaN or an infinity at any position, and passes the largest float;
//  - the vocabulary-parallel cross entropy (softmax_xent_shard_*) over 1-4 uneven shards,
//    its all-reduces done by the test, is the unsplit one within 1e-6 (loss and gradient).
// Host only (ParamViews): a bf16 product reads a ParamView's bf16 array at any offset (an
// array of other values shows in the result), its fp32 values otherwise, and refuses a bf16
// weight in an fp32 product; a versioned weight kept in oneDNN's layout (kept_weight_layouts)
// gives the plain product's bits, follows its version and goes with its buffer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "../../src/kernels/host/host_backend.hpp"
#include "pipetrain/backend.hpp"
#include "pipetrain/error.hpp"
#include "test_support.hpp"

namespace {

using pt::as_bf16;
using pt::bf16_round;
using pt::CView;
using pt::DType;
using pt::ParamView;
using pt::Buffer;
using pt::Precision;
constexpr Precision kBf16 = Precision::bf16, kFp32 = Precision::fp32;

std::vector<float> values(size_t n, uint32_t seed, float scale) { return pt::test::lcg_uniform(n, seed, scale); }
std::vector<float> rounded(std::vector<float> x) {
  for (auto& v : x) v = bf16_round(v);
  return x;
}
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
// the words pack_bf16 must write for x, from the scalar bf16_bits: element i is half i
std::vector<float> scalar_words(const std::vector<float>& x) {
  const size_t n = x.size();
  std::vector<float> d((n + 1) / 2);
  for (size_t k = 0; k < d.size(); ++k) {
    const uint32_t lo = pt::bf16_bits(x[2 * k]), hi = 2 * k + 1 < n ? pt::bf16_bits(x[2 * k + 1]) : 0u;
    const uint32_t w = lo | (hi << 16);
    std::memcpy(&d[k], &w, 4);
  }
  return d;
}

// The backend under test ("host" or "cuda") and its memory.
class BackendContract : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "host") {
      be_ = pt::make_host_backend();
      return;
    }
    if (!pt::cuda_backend_compiled()) GTEST_SKIP() << "not a CUDA=1 build: the CUDA backend's contract was not checked";
    try {
      be_ = pt::make_cuda_backend(0);
    } catch (const std::exception& e) {
      GTEST_SKIP() << "no CUDA device (" << e.what() << "): the CUDA backend's contract was not checked";
    }
  }
  pt::Backend& be() { return *be_; }
  Buffer put(const std::vector<float>& h) {
    Buffer b(be(), std::max<size_t>(h.size(), 1));
    if (!h.empty()) be().from_host(b.data(), h.data(), h.size());
    return b;
  }
  Buffer zeros(size_t n) { return Buffer(be(), std::max<size_t>(n, 1)); }
  std::vector<float> get(const float* p, size_t n) {
    std::vector<float> h(n);
    be().to_host(h.data(), p, n);
    return h;
  }
  std::vector<float> get(const Buffer& b) { return get(b.data(), b.size()); }
  Buffer packed(const Buffer& x, size_t n) {
    Buffer p = zeros((n + 1) / 2);
    be().pack_bf16(n, x.data(), p.data());
    return p;
  }
  std::vector<float> unpacked(const Buffer& p, size_t n) {
    Buffer x = zeros(n);
    be().unpack_bf16(n, p.data(), x.data());
    return get(x.data(), n);
  }

 private:
  std::unique_ptr<pt::Backend> be_;
};

TEST_P(BackendContract, PackRoundsToNearestEvenInPlaceOrNot) {
  for (size_t n : {1u, 15u, 16u, 33u, 1000u}) {
    auto xh = values(n, 3 + n, 8.0f);
    xh[0] = std::numeric_limits<float>::quiet_NaN();
    if (n > 2) xh[1] = 1.0f + 1.0f / 256;  // a tie: rounds to the even 1.0
    const Buffer x = put(xh), p = packed(x, n);
    EXPECT_TRUE(same_bits(get(p.data(), (n + 1) / 2), scalar_words(xh))) << n;
    const auto back = unpacked(p, n);
    EXPECT_TRUE(std::isnan(back[0]));
    for (size_t i = 1; i < n; ++i) ASSERT_EQ(back[i], bf16_round(xh[i])) << i;
    if (n > 2) { EXPECT_EQ(back[1], 1.0f); }
    Buffer inplace = put(xh);
    be().pack_bf16(n, inplace.data(), inplace.data());
    EXPECT_TRUE(same_bits(get(inplace.data(), (n + 1) / 2), get(p.data(), (n + 1) / 2))) << n;
    be().unpack_bf16(n, inplace.data(), inplace.data());  // and back, in place
    EXPECT_TRUE(same_bits(get(inplace.data(), n), back)) << n;  // the NaN included: both are 0x7FC00000
  }
}

TEST_P(BackendContract, GemmReadsBf16ViewsAsItRoundsThem) {
  const int64_t M = 37, N = 24, K = 53;
  for (int ta = 0; ta < 2; ++ta) {
    const Buffer A = put(values(M * K, 11 + ta, 2.0f)), B = put(values(K * N, 13, 2.0f));
    Buffer want = put(std::vector<float>(M * N, 0.5f));
    be().gemm(ta, false, M, N, K, 0.75f, A.data(), ta ? M : K, B.data(), N, 1.0f, want.data(), N, kBf16);
    const Buffer Ap = packed(A, M * K), Bp = packed(B, K * N);
    for (int which = 1; which < 4; ++which) {
      const bool pa = which & 1, pb = which & 2;
      Buffer got = put(std::vector<float>(M * N, 0.5f));
      const pt::CView a = pa ? as_bf16(Ap.data()) : pt::CView(A.data()), b = pb ? as_bf16(Bp.data()) : pt::CView(B.data());
      be().gemm(ta, false, M, N, K, 0.75f, a, ta ? M : K, b, N, 1.0f, got.data(), N, kBf16);
      EXPECT_TRUE(same_bits(get(got), get(want))) << "ta " << ta << " bf16 views " << which;
    }
    Buffer c = zeros(M * N);
    EXPECT_THROW(be().gemm(ta, false, M, N, K, 1.0f, as_bf16(Ap.data()), ta ? M : K, B.data(), N, 0.0f, c.data(), N, kFp32),
                 pt::Error)
        << "a bf16 view in an fp32 product";
  }
}

TEST_P(BackendContract, LinearForwardWithBf16InputAndOutput) {
  const int64_t rows = 40, in = 48, out = 32;
  const Buffer x = put(values(rows * in, 21, 2.0f)), w = put(values(out * in, 22, 0.5f)), b = put(values(out, 23, 1.0f));
  Buffer want = zeros(rows * out);
  be().fused().linear_forward(rows, in, out, x.data(), w.data(), b.data(), want.data(), kBf16);
  const auto want_h = get(want);
  const Buffer xp = packed(x, rows * in);
  Buffer y1 = zeros(rows * out), y2 = zeros(rows * out), y3 = zeros(rows * out);
  be().fused().linear_forward(rows, in, out, as_bf16(xp.data()), w.data(), b.data(), y1.data(), kBf16);
  EXPECT_TRUE(same_bits(get(y1), want_h));
  be().fused().linear_forward(rows, in, out, as_bf16(xp.data()), w.data(), b.data(), as_bf16(y2.data()), kBf16);
  EXPECT_TRUE(same_bits(unpacked(y2, rows * out), rounded(want_h)));
  pt::FusedKernels(be()).linear_forward(rows, in, out, as_bf16(xp.data()), w.data(), b.data(), as_bf16(y3.data()), kBf16);
  EXPECT_TRUE(same_bits(unpacked(y3, rows * out), rounded(want_h))) << "the default composition";
}

TEST_P(BackendContract, BiasGradientOfABf16Gradient) {
  const int64_t rows = 50, cols = 37;
  const auto dy = values(rows * cols, 31, 4.0f);
  Buffer want = put(std::vector<float>(cols, 0.25f)), got = put(std::vector<float>(cols, 0.25f));
  const Buffer r = put(rounded(dy)), p = packed(put(dy), rows * cols);
  be().bias_grad_rows(r.data(), want.data(), rows, cols);
  be().bias_grad_rows(as_bf16(p.data()), got.data(), rows, cols);
  EXPECT_TRUE(same_bits(get(got), get(want)));
}

TEST_P(BackendContract, AddIsCopyThenAxpy) {
  const size_t n = 333;
  const auto a = values(n, 51, 3.0f), b = values(n, 52, 3.0f);
  Buffer want = put(a), got = zeros(n), dflt = zeros(n), alias = put(b);
  const Buffer ab = put(a), bb = put(b);
  be().axpy(n, 1.0f, bb.data(), want.data());
  be().add(n, ab.data(), bb.data(), got.data());
  be().pt::Backend::add(n, ab.data(), bb.data(), dflt.data());
  be().add(n, ab.data(), alias.data(), alias.data());
  EXPECT_TRUE(same_bits(get(got), get(want)));
  EXPECT_TRUE(same_bits(get(dflt), get(want)));
  EXPECT_TRUE(same_bits(get(alias), get(want)));
}

// The batch norm forward with its epilogue, y = relu(bn(x) + add), is bitwise the default
// composition (FusedKernels' own batchnorm_forward: the backend's batch norm, then axpy and
// relu_forward), in training (statistics and running statistics too) and in evaluation, with
// and without each part, on 3 images of 5 channels of 37 positions (no 16-lane multiple);
// and relu is applied (no negative value, some exact zeros).
TEST_P(BackendContract, BatchNormEpilogueIsBatchNormThenAddThenRelu) {
  const int64_t n = 3, C = 5, HW = 37;
  const size_t count = static_cast<size_t>(n * C * HW), c = static_cast<size_t>(C);
  const Buffer x = put(values(count, 71, 4.0f)), res = put(values(count, 72, 3.0f)), gb = put(values(2 * c, 73, 1.0f));
  auto var = values(c, 74, 1.0f);
  for (float& v : var) v = std::fabs(v) + 0.5f;
  for (const bool training : {true, false})
    for (const bool add : {false, true})
      for (const bool relu : {false, true}) {
        SCOPED_TRACE(testing::Message() << "training " << training << " add " << add << " relu " << relu);
        Buffer y[2] = {zeros(count), zeros(count)}, stats[2] = {zeros(2 * c), zeros(2 * c)};
        Buffer running[2] = {put(values(c, 75, 1.0f)), put(values(c, 75, 1.0f))}, rvar[2] = {put(var), put(var)};
        for (int k = 0; k < 2; ++k) {
          const pt::FusedKernels::BnArgs a{n, C, HW, 1e-5f, 0.1f, gb.data(), gb.data() + C, stats[k].data(),
                                           stats[k].data() + C, running[k].data(), rvar[k].data()};
          const float* r = add ? res.data() : nullptr;
          if (k == 0) be().fused().batchnorm_forward(training, a, x.data(), y[k].data(), r, relu);
          else be().fused().pt::FusedKernels::batchnorm_forward(training, a, x.data(), y[k].data(), r, relu);
        }
        EXPECT_TRUE(same_bits(get(y[0]), get(y[1])));
        EXPECT_TRUE(same_bits(get(stats[0]), get(stats[1])));
        EXPECT_TRUE(same_bits(get(running[0]), get(running[1])));
        EXPECT_TRUE(same_bits(get(rvar[0]), get(rvar[1])));
        const auto out = get(y[0]);
        if (relu) {
          EXPECT_EQ(*std::min_element(out.begin(), out.end()), 0.0f);
        } else {
          EXPECT_LT(*std::min_element(out.begin(), out.end()), 0.0f);
        }
      }
}

TEST_P(BackendContract, GeluDerivativeKeptForBackwardIsBitwiseGeluBackward) {
  const size_t n = 1000;
  const Buffer x = put(values(n, 41, 12.0f)), dy = put(values(n, 42, 2.0f));
  Buffer y_want = zeros(n), dx_want = zeros(n);
  be().gelu_forward(n, x.data(), y_want.data());
  be().gelu_backward(n, x.data(), dy.data(), dx_want.data());
  for (const bool bf16 : {false, true}) {
    Buffer d = put(get(x)), y = zeros(n), dx = zeros(n);
    const pt::DType t = bf16 ? pt::DType::bf16 : pt::DType::f32;
    be().gelu_forward_deriv(n, d.data(), pt::View{y.data(), t});
    be().mul(n, dy.data(), d.data(), pt::View{dx.data(), t});
    EXPECT_TRUE(same_bits(bf16 ? unpacked(y, n) : get(y), bf16 ? rounded(get(y_want)) : get(y_want))) << "bf16 " << bf16;
    EXPECT_TRUE(same_bits(bf16 ? unpacked(dx, n) : get(dx), bf16 ? rounded(get(dx_want)) : get(dx_want))) << "bf16 " << bf16;
  }
}

// A bf16 policy keeps the GELU's input as bf16: gelu_forward and gelu_backward of a bf16 x
// view give the bits of the f32 view of its values, and into bf16 views those results rounded,
// written in ceil(n / 2) floats (the float after them untouched; odd n).
TEST_P(BackendContract, GeluOfBf16ViewsIsGeluOfTheirValues) {
  const size_t n = 1001, words = (n + 1) / 2;
  const Buffer xr = put(rounded(values(n, 43, 12.0f))), dy = put(values(n, 44, 2.0f));
  const Buffer xp = packed(xr, n);
  Buffer y_want = zeros(n), dx_want = zeros(n), y = zeros(n), dx = zeros(n);
  be().gelu_forward(n, xr.data(), y_want.data());
  be().gelu_backward(n, xr.data(), dy.data(), dx_want.data());
  be().gelu_forward(n, pt::as_bf16(xp.data()), y.data());
  be().gelu_backward(n, pt::as_bf16(xp.data()), dy.data(), dx.data());
  EXPECT_TRUE(same_bits(get(y), get(y_want)));
  EXPECT_TRUE(same_bits(get(dx), get(dx_want)));
  const float sentinel = 12345.0f;
  Buffer yp = put(std::vector<float>(words + 1, sentinel)), dxp = put(std::vector<float>(words + 1, sentinel));
  be().gelu_forward(n, pt::as_bf16(xp.data()), pt::as_bf16(yp.data()));
  be().gelu_backward(n, pt::as_bf16(xp.data()), dy.data(), pt::as_bf16(dxp.data()));
  EXPECT_TRUE(same_bits(unpacked(yp, n), rounded(get(y_want))));
  EXPECT_TRUE(same_bits(unpacked(dxp, n), rounded(get(dx_want))));
  EXPECT_EQ(get(yp.data() + words, 1)[0], sentinel);
  EXPECT_EQ(get(dxp.data() + words, 1)[0], sentinel);
}

TEST_P(BackendContract, RoundPackIsRoundThenPack) {
  for (size_t n : {1u, 7u, 16u, 35u, 1001u}) {
    auto xh = values(n, 61 + n, 100.0f);
    xh[0] = std::numeric_limits<float>::quiet_NaN();
    if (n > 3) xh[1] = std::numeric_limits<float>::infinity(), xh[2] = -1e-40f, xh[3] = 1.0f + 1.0f / 256;
    const Buffer x = put(xh);
    Buffer wy = zeros(n);
    be().round_bf16(n, x.data(), wy.data());
    const auto want_y = get(wy.data(), n), want_p = get(packed(wy, n).data(), (n + 1) / 2);
    for (int dflt = 0; dflt < 2; ++dflt) {
      Buffer y = zeros(n), p = put(std::vector<float>((n + 1) / 2, 1.0f));
      if (dflt) be().pt::Backend::round_pack_bf16(n, x.data(), y.data(), p.data());
      else be().round_pack_bf16(n, x.data(), y.data(), p.data());
      EXPECT_TRUE(same_bits(get(y.data(), n), want_y)) << n << " default " << dflt;
      EXPECT_TRUE(same_bits(get(p.data(), (n + 1) / 2), want_p)) << n << " default " << dflt;
    }
    for (size_t i = 1; i < n; ++i) ASSERT_EQ(want_y[i], bf16_round(xh[i])) << i;  // the vector rounding
    Buffer inplace = put(xh);
    be().round_bf16(n, inplace.data(), inplace.data());
    EXPECT_TRUE(same_bits(get(inplace.data(), n), want_y));
  }
}

TEST_P(BackendContract, AllFiniteFindsEveryNonFinite) {
  const size_t n = 531;
  auto x = values(n, 81, 1e30f);
  x[7] = std::numeric_limits<float>::max(), x[8] = -std::numeric_limits<float>::max(), x[9] = -0.0f;
  x[10] = std::numeric_limits<float>::denorm_min();
  const Buffer xb = put(x);
  EXPECT_TRUE(be().all_finite(n, xb.data()));
  EXPECT_TRUE(be().all_finite(0, xb.data()));
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()})
    for (size_t at : {size_t{0}, size_t{15}, size_t{16}, n - 1}) {
      auto y = x;
      y[at] = bad;
      const Buffer yb = put(y);
      EXPECT_FALSE(be().all_finite(n, yb.data())) << bad << " at " << at;
      EXPECT_TRUE(be().all_finite(at, yb.data())) << "the prefix before " << at;
    }
}

// The vocabulary-parallel cross entropy (softmax_xent_shard_*): the classes split across t
// "ranks" (shards of uneven widths, t = 1..4, the all-reduces done here: MAX of the row
// maxima, SUM of the sums in rank order) give every shard the unsplit softmax_xent_forward's
// loss within 1e-6 relative and its columns of softmax_xent_backward's gradient within 1e-6
// (absolute; the gradients are at most 1), in place and not; one shard is the unsplit loss.
TEST_P(BackendContract, VocabularyParallelCrossEntropyIsTheUnsplitOne) {
  const int64_t n = 9, V = 53;
  const float scale = 1.0f / 3;
  auto lh = values(static_cast<size_t>(n * V), 91, 6.0f);
  std::vector<int32_t> lab(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) lab[static_cast<size_t>(i)] = static_cast<int32_t>((i * 17 + 5) % V);
  lab[0] = 0, lab[1] = static_cast<int32_t>(V - 1);  // the first and the last class
  int32_t* labels = be().alloc_int(static_cast<size_t>(n));
  be().labels_from_host(labels, lab.data(), lab.size());
  const Buffer logits = put(lh);
  Buffer loss = zeros(n), probs = zeros(n * V), dl = zeros(n * V);
  be().softmax_xent_forward(n, V, logits.data(), labels, loss.data(), probs.data());
  be().softmax_xent_backward(n, V, probs.data(), labels, scale, dl.data());
  const auto want_loss = get(loss.data(), n), want_grad = get(dl.data(), n * V);
  for (int t = 1; t <= 4; ++t)
    for (const bool in_place : {false, true}) {
      std::vector<int64_t> c0(t + 1);
      for (int r = 0; r <= t; ++r) c0[r] = V * r * r / (t * t);  // uneven widths
      std::vector<Buffer> part, mx, sums;
      std::vector<float> gmx(n, -std::numeric_limits<float>::infinity()), gsum(2 * n, 0.0f);
      for (int r = 0; r < t; ++r) {
        const int64_t w = c0[r + 1] - c0[r];
        std::vector<float> cols(static_cast<size_t>(n * w));
        for (int64_t i = 0; i < n; ++i)
          for (int64_t c = 0; c < w; ++c) cols[i * w + c] = lh[i * V + c0[r] + c];
        part.push_back(put(cols)), mx.push_back(zeros(n)), sums.push_back(zeros(2 * n));
        be().softmax_xent_shard_max(n, w, part[r].data(), mx[r].data());
        const auto m = get(mx[r].data(), n);
        for (int64_t i = 0; i < n; ++i) gmx[i] = std::max(gmx[i], m[i]);
      }
      const Buffer gm = put(gmx);
      for (int r = 0; r < t; ++r) {
        be().softmax_xent_shard_sums(n, c0[r + 1] - c0[r], c0[r], part[r].data(), labels, gm.data(), sums[r].data());
        const auto s = get(sums[r].data(), 2 * n);
        for (int64_t i = 0; i < 2 * n; ++i) gsum[i] += s[i];
      }
      const Buffer gs = put(gsum);
      for (int r = 0; r < t; ++r) {
        const int64_t w = c0[r + 1] - c0[r];
        const std::string what = "t " + std::to_string(t) + ", shard " + std::to_string(r) + (in_place ? ", in place" : "");
        Buffer l = zeros(n), p = zeros(n * w), d = zeros(n * w);
        float* pr = in_place ? part[r].data() : p.data();
        be().softmax_xent_shard_finish(n, w, part[r].data(), gm.data(), gs.data(), l.data(), pr);
        be().softmax_xent_shard_backward(n, w, c0[r], pr, labels, scale, in_place ? pr : d.data());
        const auto got_loss = get(l.data(), n), got_grad = get(in_place ? pr : d.data(), n * w);
        for (int64_t i = 0; i < n; ++i) {
          EXPECT_NEAR(got_loss[i], want_loss[i], 1e-6 * std::abs(want_loss[i])) << what << ", row " << i;
          if (t == 1) { EXPECT_NEAR(got_loss[i], want_loss[i], 4e-7 * std::abs(want_loss[i])) << what; }
          for (int64_t c = 0; c < w; ++c)
            ASSERT_NEAR(got_grad[i * w + c], want_grad[i * V + c0[r] + c], 1e-6) << what << ", row " << i << ", class " << c0[r] + c;
        }
      }
    }
  be().release_int(labels);
}

INSTANTIATE_TEST_SUITE_P(Backends, BackendContract, ::testing::Values("host", "cuda"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// ---- weights as ParamViews: the bf16 array a product reads, and what the host keeps of it ----

std::vector<float> host_packed(pt::Backend& be, const std::vector<float>& x) {
  std::vector<float> p((x.size() + 1) / 2);
  be.pack_bf16(x.size(), x.data(), p.data());
  return p;
}

// x [M x K] times w [K x 1] in precision p
std::vector<float> product(pt::Backend& be, const std::vector<float>& x, CView w, int64_t K, Precision p = kBf16) {
  const int64_t M = static_cast<int64_t>(x.size()) / K;
  std::vector<float> y(M);
  be.gemm(false, false, M, 1, K, 1.0f, x.data(), K, w, 1, 0.0f, y.data(), 1, p);
  return y;
}

// A ParamView's bf16 array is what a bf16 product reads (an array of other values shows in the
// result), at any offset (a mid-word one included); its fp32 values are what the pointer and
// an f32 operand read; without an array a bf16 product converts the fp32 values; a bf16 weight
// in an fp32 product is refused.
TEST(ParamViews, ProductsReadTheArrayTheirPolicyAsks) {
  pt::host::HostBackend be;
  const int64_t K = 63;
  const auto x = values(5 * K, 71, 1.0f), w = values(4 * K, 72, 1.0f), other = values(4 * K, 73, 1.0f);
  const auto other_p = host_packed(be, other);  // an array that lies: other values, so its use shows
  const ParamView lying(w.data(), other_p.data(), 7), plain(w.data());
  for (const int64_t at : {int64_t{0}, K, K + 1, 2 * K + 1}) {
    const std::string where = "offset " + std::to_string(at);
    const auto want = product(be, x, w.data() + at, K), lie = product(be, x, other.data() + at, K);
    ASSERT_FALSE(same_bits(want, lie)) << where;
    EXPECT_TRUE(same_bits(product(be, x, (lying + at).operand(DType::bf16), K), lie)) << where;
    EXPECT_TRUE(same_bits(product(be, x, (plain + at).operand(DType::bf16), K), want)) << where;
    EXPECT_EQ(static_cast<const float*>(lying + at), w.data() + at) << where;
    EXPECT_EQ((lying + at).operand(DType::f32).data, w.data() + at) << where;
    EXPECT_EQ((lying + at).operand(DType::bf16).version, 7u) << where;
    EXPECT_EQ((plain + at).operand(DType::bf16).version, 0u) << where;
  }
  std::vector<float> y(5 * 3), y_other(5 * 3);
  be.fused().linear_forward(5, K, 3, x.data(), lying.operand(DType::bf16), nullptr, y.data(), kBf16);
  be.fused().linear_forward(5, K, 3, x.data(), other.data(), nullptr, y_other.data(), kBf16);
  EXPECT_TRUE(same_bits(y, y_other)) << "linear_forward reads the array too";
  EXPECT_THROW(be.fused().linear_forward(5, K, 3, x.data(), lying.operand(DType::bf16), nullptr, y.data(), kFp32),
               pt::Error);
  EXPECT_THROW(product(be, x, lying.operand(DType::bf16), K, kFp32), pt::Error);
}

// dx = dy W reads the weight W [out, in] as it lies, the forward y = x W^T transposed: with
// kept_weight_layouts the backend keeps a versioned bf16 W (CView::version) in oneDNN's layout
// for the input gradient only, reordered when the version changes. The results are the plain bf16
// products' bit for bit; new values under a new version are read at once (no stale copy); an
// unversioned operand is not kept; releasing the array's buffer drops the kept copies.
TEST(ParamViews, KeptLayoutsFollowTheArrayVersion) {
  pt::host::HostBackend be;
  be.onednn().set_kept_layouts(true);  // PT_KEPT_LAYOUTS=1
  const int64_t rows = 64, out = 96, in = 160;  // dy [rows, out] W [out, in]
  const auto dy = values(rows * out, 91, 1.0f), w = rounded(values(out * in, 92, 1.0f)), other = rounded(values(out * in, 93, 1.0f));
  const auto w_p = host_packed(be, w), other_p = host_packed(be, other);
  auto dx = [&](pt::Backend& b, CView weights) {
    std::vector<float> y(rows * in);
    b.gemm(false, false, rows, in, out, 1.0f, dy.data(), out, weights, in, 0.0f, y.data(), in, kBf16);
    return y;
  };
  const auto plain = dx(be, w.data()), plain_other = dx(be, other.data());  // converted where read
  ASSERT_FALSE(same_bits(plain, plain_other));
  EXPECT_TRUE(same_bits(dx(be, {w_p.data(), DType::bf16}), plain));
  EXPECT_EQ(be.onednn().kept_weight_bytes(), 0) << "an unversioned operand was kept";
  auto array = std::make_unique<pt::Buffer>(be, w_p.size());
  std::memcpy(array->data(), w_p.data(), w_p.size() * sizeof(float));
  EXPECT_TRUE(same_bits(dx(be, {array->data(), DType::bf16, 1}), plain)) << "the kept layout changes the result";
  EXPECT_TRUE(same_bits(dx(be, {array->data(), DType::bf16, 1}), plain)) << "a second read of the kept copy";
  if (be.onednn().kept_weight_bytes() == 0)
    std::printf("[   NOTE   ] oneDNN takes this product's weights in the plain layout here: nothing kept\n");
  std::memcpy(array->data(), other_p.data(), other_p.size() * sizeof(float));  // new values, a new version
  EXPECT_TRUE(same_bits(dx(be, {array->data(), DType::bf16, 2}), plain_other)) << "a stale kept copy was read";
  // the forward's y = x W^T reads the same array transposed: no copy of its own (its kept
  // layout measured 0.86-1.12x the plain read, docs/PRECISION.md), the plain product's bits
  const auto x = values(rows * in, 94, 1.0f);
  auto fwd = [&](CView weights) {
    std::vector<float> y(rows * out);
    be.fused().linear_forward(rows, in, out, x.data(), weights, nullptr, y.data(), kBf16);
    return y;
  };
  const auto fwd_plain = fwd(other.data());
  const int64_t dx_kept = be.onednn().kept_weight_bytes();
  EXPECT_TRUE(same_bits(fwd({array->data(), DType::bf16, 2}), fwd_plain)) << "the forward's kept layout changes the result";
  EXPECT_TRUE(same_bits(fwd({array->data(), DType::bf16, 2}), fwd_plain));
  EXPECT_EQ(be.onednn().kept_weight_bytes(), dx_kept) << "the forward kept a copy of its own";
  std::memcpy(array->data(), w_p.data(), w_p.size() * sizeof(float));  // back to w, a new version
  EXPECT_TRUE(same_bits(fwd({array->data(), DType::bf16, 4}), fwd(w.data()))) << "a stale forward copy was read";
  array.reset();
  EXPECT_EQ(be.onednn().kept_weight_bytes(), 0) << "a released buffer's kept copies stay";
  pt::host::HostBackend off;
  off.onednn().set_kept_layouts(false);
  EXPECT_TRUE(same_bits(dx(off, {w_p.data(), DType::bf16, 3}), plain));
  EXPECT_EQ(off.onednn().kept_weight_bytes(), 0) << "kept layouts off keep nothing";
}

}  // namespace
