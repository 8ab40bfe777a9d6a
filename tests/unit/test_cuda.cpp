// The CUDA backend against the host backend (the reference semantics): every op of
// pt::Backend on the same inputs (the sequence and batch-norm ops included), with a
// tolerance per op (exact where the GPU kernel does the host's arithmetic in the host's
// order: copies, relu, dropout, max pooling, argmax counts, the embedding's scatter-add);
// a whole stage holding every layer type, forward, backward and inference;
// transformer and ResNet chains (and their split backward, bitwise on the GPU); and
// the CUDA transport (staged and direct) over a single-rank communicator. Built only with
// CUDA=1 (tests/unit/test_cuda.cpp is left out of the CPU build); every test skips with a
// message when cudaGetDeviceCount finds no device. Run: build-cuda/pt_tests --gtest_filter='Cuda*'
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>

#include "pipetrain/backend.hpp"
#include "pipetrain/deck.hpp"
#include "pipetrain/model.hpp"
#include "pipetrain/rng.hpp"
#include "pipetrain/stage.hpp"
#include "pipetrain/transport.hpp"

namespace pt {
namespace {

// Empty when a device is visible, else why not.
const std::string& no_gpu_reason() {
  static const std::string why = [] {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
    }
    return n == 0 ? std::string("cudaGetDeviceCount reports 0 devices") : std::string();
  }();
  return why;
}

#define REQUIRE_GPU()                                                                               \
  do {                                                                                              \
    if (!no_gpu_reason().empty())                                                                   \
      GTEST_SKIP() << "no CUDA device (" << no_gpu_reason() << "): GPU test skipped, nothing was checked"; \
  } while (0)

struct Tol {
  double atol, rtol;
};
constexpr Tol kExact{0, 0};

// got (GPU) against want (host): |got - want| <= atol + rtol |want| per element; kExact: bitwise.
void expect_close(const std::string& what, const std::vector<float>& got, const std::vector<float>& want, Tol t) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const bool exact = t.atol == 0 && t.rtol == 0;
  size_t bad = 0, first = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    bool ok;
    if (exact) ok = std::memcmp(&got[i], &want[i], sizeof(float)) == 0;
    else if (std::isnan(w) || std::isnan(g)) ok = std::isnan(w) && std::isnan(g);
    else ok = std::fabs(g - w) <= t.atol + t.rtol * std::fabs(w);
    if (!ok && bad++ == 0) first = i;
    if (!exact && std::isfinite(g) && std::isfinite(w)) worst = std::max(worst, std::fabs(g - w));
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements outside "
                     << (exact ? std::string("bitwise equality") : "atol " + std::to_string(t.atol) + " + rtol " + std::to_string(t.rtol))
                     << "; first at " << first << ": gpu " << (got.empty() ? 0.0f : got[first]) << " vs cpu "
                     << (want.empty() ? 0.0f : want[first]) << "; worst |diff| " << worst;
}

// max |got - want| / max |want| over a block (gradients of a whole layer)
void expect_norm_close(const std::string& what, const float* got, const float* want, size_t n, double rtol) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < n; ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
  }
  EXPECT_LE(diff, rtol * std::max(scale, 1e-30)) << what << ": max |diff| " << diff << " vs max |cpu| " << scale;
}

struct Rng {
  explicit Rng(uint32_t seed) : g(seed) {}
  std::mt19937 g;
  float uniform(float lo = -1.0f, float hi = 1.0f) { return std::uniform_real_distribution<float>(lo, hi)(g); }
  std::vector<float> vec(size_t n, float lo = -1.0f, float hi = 1.0f) {
    std::vector<float> v(n);
    for (auto& x : v) x = uniform(lo, hi);
    return v;
  }
  std::vector<int32_t> labels(size_t n, int32_t classes) {
    std::vector<int32_t> v(n);
    for (auto& x : v) x = static_cast<int32_t>(std::uniform_int_distribution<int>(0, classes - 1)(g));
    return v;
  }
};

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    REQUIRE_GPU();
    if (!gpu_) {
      host_ = make_host_backend();
      gpu_ = make_cuda_backend(0);
      std::printf("[ GPU      ] %s\n", gpu_->describe().c_str());
    }
  }
  static void TearDownTestSuite() {
    gpu_.reset();
    host_.reset();
  }
  Backend& H() { return *host_; }
  Backend& G() { return *gpu_; }

  // The same values in both backends.
  struct Pair {
    Pair(Backend& h, Backend& g, const std::vector<float>& v) : hb(h, v.size()), gb(g, v.size()), n(v.size()) {
      if (n) {
        h.from_host(hb.data(), v.data(), n);
        g.from_host(gb.data(), v.data(), n);
      }
    }
    Pair(Backend& h, Backend& g, size_t count) : Pair(h, g, std::vector<float>(count, 0.0f)) {}
    Buffer hb, gb;
    size_t n;
    float* h() { return hb.data(); }
    float* g() { return gb.data(); }
  };
  std::vector<float> cpu_of(Pair& p) {
    std::vector<float> v(p.n);
    if (p.n) H().to_host(v.data(), p.h(), p.n);
    return v;
  }
  std::vector<float> gpu_of(Pair& p) {
    std::vector<float> v(p.n);
    if (p.n) G().to_host(v.data(), p.g(), p.n);
    return v;
  }
  void check(const std::string& what, Pair& p, Tol t) { expect_close(what, gpu_of(p), cpu_of(p), t); }

  // Integer labels in both backends.
  struct Labels {
    Labels(Backend& h, Backend& g, const std::vector<int32_t>& v) : hb(h), gb(g) {
      hp = h.alloc_int(v.size());
      gp = g.alloc_int(v.size());
      h.labels_from_host(hp, v.data(), v.size());
      g.labels_from_host(gp, v.data(), v.size());
    }
    ~Labels() {
      hb.release_int(hp);
      gb.release_int(gp);
    }
    Backend &hb, &gb;
    int32_t *hp = nullptr, *gp = nullptr;
  };

  static std::unique_ptr<Backend> host_, gpu_;
};
std::unique_ptr<Backend> CudaOps::host_;
std::unique_ptr<Backend> CudaOps::gpu_;

WindowGeom geom(int64_t c_in, int64_t h, int64_t w, int64_t c_out, int64_t k, int64_t s, int64_t p) {
  WindowGeom g;
  g.c_in = c_in, g.h_in = h, g.w_in = w, g.c_out = c_out, g.kernel = k, g.stride = s, g.padding = p;
  g.h_out = (h + 2 * p - k) / s + 1;
  g.w_out = (w + 2 * p - k) / s + 1;
  return g;
}

std::string geom_name(const WindowGeom& g, int64_t n) {
  std::ostringstream o;
  o << "n" << n << " " << g.c_in << "x" << g.h_in << "x" << g.w_in << " -> " << g.c_out << "x" << g.h_out << "x"
    << g.w_out << " k" << g.kernel << " s" << g.stride << " p" << g.padding;
  return o.str();
}

TEST_F(CudaOps, MemoryRoundTripsAndFills) {
  Rng r(1);
  const std::vector<float> v = r.vec(1001);
  Buffer z(G(), 1001);
  std::vector<float> back(1001, 7.0f);
  G().to_host(back.data(), z.data(), back.size());
  expect_close("alloc() is zeroed", back, std::vector<float>(1001, 0.0f), kExact);
  G().from_host(z.data(), v.data(), v.size());
  G().to_host(back.data(), z.data(), back.size());
  expect_close("from_host/to_host", back, v, kExact);
  Buffer c(G(), 1001);
  G().copy(c.data(), z.data(), 1001);
  G().to_host(back.data(), c.data(), back.size());
  expect_close("copy", back, v, kExact);
  G().fill(c.data(), 3.25f, 1001);
  G().to_host(back.data(), c.data(), back.size());
  expect_close("fill 3.25", back, std::vector<float>(1001, 3.25f), kExact);
  G().fill(c.data(), 0.0f, 1001);
  G().to_host(back.data(), c.data(), back.size());
  expect_close("fill 0", back, std::vector<float>(1001, 0.0f), kExact);
  // many uploads in a row: the pinned ring must not recycle a buffer still being copied
  std::vector<Buffer> bufs;
  for (int i = 0; i < 20; ++i) {
    bufs.emplace_back(G(), 1001);
    std::vector<float> w(1001, static_cast<float>(i));
    G().from_host(bufs.back().data(), w.data(), w.size());
  }
  for (int i = 0; i < 20; ++i) {
    G().to_host(back.data(), bufs[static_cast<size_t>(i)].data(), back.size());
    expect_close("upload " + std::to_string(i), back, std::vector<float>(1001, static_cast<float>(i)), kExact);
  }
}

TEST_F(CudaOps, Gemm) {
  Rng r(2);
  struct Dims {
    int64_t M, N, K;
    Tol tol;
  };
  for (Dims d : {Dims{37, 29, 53, {2e-5, 1e-5}}, Dims{128, 512, 784, {1e-4, 1e-4}}, Dims{1, 10, 128, {2e-5, 1e-5}}})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        Pair A(H(), G(), r.vec(static_cast<size_t>(d.M * d.K)));
        Pair B(H(), G(), r.vec(static_cast<size_t>(d.K * d.N)));
        Pair C(H(), G(), r.vec(static_cast<size_t>(d.M * d.N)));
        const int64_t lda = ta ? d.M : d.K, ldb = tb ? d.K : d.N;
        for (Backend* be : {&H(), &G()}) {
          const bool g = be == &G();
          be->gemm(ta, tb, d.M, d.N, d.K, 0.75f, g ? A.g() : A.h(), lda, g ? B.g() : B.h(), ldb, 0.5f,
                   g ? C.g() : C.h(), d.N, Precision::fp32);
        }
        check("gemm " + std::to_string(d.M) + "x" + std::to_string(d.N) + "x" + std::to_string(d.K) + " ta " +
                  std::to_string(ta) + " tb " + std::to_string(tb),
              C, d.tol);
      }
  // K = 0: C = beta C
  Pair A(H(), G(), r.vec(4)), B(H(), G(), r.vec(4)), C(H(), G(), r.vec(12));
  H().gemm(false, false, 3, 4, 0, 1.0f, A.h(), 0, B.h(), 4, 0.5f, C.h(), 4, Precision::fp32);
  G().gemm(false, false, 3, 4, 0, 1.0f, A.g(), 0, B.g(), 4, 0.5f, C.g(), 4, Precision::fp32);
  check("gemm K = 0", C, {1e-7, 1e-7});
}

TEST_F(CudaOps, AxpyScaleBiasRows) {
  Rng r(3);
  Pair x(H(), G(), r.vec(1000)), y(H(), G(), r.vec(1000));
  H().axpy(1000, 0.3f, x.h(), y.h());
  G().axpy(1000, 0.3f, x.g(), y.g());
  check("axpy", y, {1e-7, 1e-6});
  H().scale(1000, 1.7f, y.h());
  G().scale(1000, 1.7f, y.g());
  check("scale", y, {1e-7, 1e-6});
  std::vector<float> bad = r.vec(10);
  bad[3] = NAN;
  bad[4] = INFINITY;
  Pair z(H(), G(), bad);
  H().scale(10, 0.0f, z.h());
  G().scale(10, 0.0f, z.g());
  check("scale by 0 clears NaN and inf", z, kExact);
  const int64_t rows = 33, cols = 70;
  Pair m(H(), G(), r.vec(static_cast<size_t>(rows * cols))), b(H(), G(), r.vec(static_cast<size_t>(cols)));
  H().bias_add_rows(m.h(), b.h(), rows, cols);
  G().bias_add_rows(m.g(), b.g(), rows, cols);
  check("bias_add_rows", m, {1e-7, 1e-6});
  H().bias_grad_rows(m.h(), b.h(), rows, cols);  // accumulates onto b
  G().bias_grad_rows(m.g(), b.g(), rows, cols);
  check("bias_grad_rows", b, {1e-6, 1e-6});
}

TEST_F(CudaOps, Conv2d) {
  Rng r(4);
  const int64_t n = 4;
  for (const WindowGeom& g : {geom(3, 11, 9, 5, 3, 1, 1), geom(3, 11, 9, 5, 3, 2, 0), geom(3, 11, 9, 5, 3, 2, 1),
                              geom(2, 12, 12, 4, 5, 1, 2), geom(4, 7, 7, 6, 1, 1, 0), geom(1, 28, 28, 32, 3, 1, 1)})
    for (bool bias : {true, false}) {
      SCOPED_TRACE(geom_name(g, n) + (bias ? " bias" : " no bias"));
      const size_t xs = static_cast<size_t>(n * g.c_in * g.h_in * g.w_in), ys = static_cast<size_t>(n * g.c_out * g.h_out * g.w_out);
      const size_t ws = static_cast<size_t>(g.c_out * g.c_in * g.kernel * g.kernel);
      Pair x(H(), G(), r.vec(xs)), w(H(), G(), r.vec(ws, -0.3f, 0.3f)), b(H(), G(), r.vec(static_cast<size_t>(g.c_out)));
      Pair y(H(), G(), ys), dy(H(), G(), r.vec(ys)), dx(H(), G(), r.vec(xs));
      Pair dw(H(), G(), r.vec(ws)), db(H(), G(), r.vec(static_cast<size_t>(g.c_out)));
      H().conv2d_forward(g, n, x.h(), w.h(), bias ? b.h() : nullptr, y.h(), Precision::fp32);
      G().conv2d_forward(g, n, x.g(), w.g(), bias ? b.g() : nullptr, y.g(), Precision::fp32);
      check("conv2d forward", y, {1e-4, 1e-5});
      H().conv2d_backward(g, n, x.h(), w.h(), dy.h(), dx.h(), dw.h(), bias ? db.h() : nullptr, Precision::fp32);
      G().conv2d_backward(g, n, x.g(), w.g(), dy.g(), dx.g(), dw.g(), bias ? db.g() : nullptr, Precision::fp32);
      check("conv2d backward dx", dx, {1e-4, 1e-5});
      check("conv2d backward dw (accumulated)", dw, {2e-4, 1e-5});
      check("conv2d backward db (accumulated)", db, {2e-4, 1e-5});
      // first layer: no dx
      H().conv2d_backward(g, n, x.h(), w.h(), dy.h(), nullptr, dw.h(), nullptr, Precision::fp32);
      G().conv2d_backward(g, n, x.g(), w.g(), dy.g(), nullptr, dw.g(), nullptr, Precision::fp32);
      check("conv2d backward without dx: dw", dw, {4e-4, 1e-5});
    }
}

TEST_F(CudaOps, MaxPoolExactWithTies) {
  Rng r(5);
  const int64_t n = 3;
  for (const WindowGeom& g : {geom(4, 8, 8, 4, 2, 2, 0), geom(4, 7, 7, 4, 2, 2, 0), geom(3, 7, 9, 3, 3, 2, 1),
                              geom(2, 6, 6, 2, 3, 1, 1), geom(2, 9, 9, 2, 3, 3, 0)})
    for (bool ties : {false, true}) {
      SCOPED_TRACE(geom_name(g, n) + (ties ? " with ties" : ""));
      const size_t xs = static_cast<size_t>(n * g.c_in * g.h_in * g.w_in), ys = static_cast<size_t>(n * g.c_out * g.h_out * g.w_out);
      std::vector<float> xv = r.vec(xs);
      if (ties)
        for (auto& v : xv) v = std::floor(v * 2.0f) * 0.5f;  // few distinct values: many equal maxima
      Pair x(H(), G(), xv), y(H(), G(), ys), dy(H(), G(), r.vec(ys)), dx(H(), G(), r.vec(xs));
      Pair am(H(), G(), ys);  // argmax storage (int32 in float-sized slots, as the layer's aux)
      H().maxpool_forward(g, n, x.h(), y.h(), reinterpret_cast<int32_t*>(am.h()));
      G().maxpool_forward(g, n, x.g(), y.g(), reinterpret_cast<int32_t*>(am.g()));
      check("maxpool forward", y, kExact);
      check("maxpool argmax (first maximum wins)", am, kExact);
      H().maxpool_backward(g, n, dy.h(), reinterpret_cast<const int32_t*>(am.h()), dx.h());
      G().maxpool_backward(g, n, dy.g(), reinterpret_cast<const int32_t*>(am.g()), dx.g());
      check("maxpool backward", dx, kExact);
    }
}

TEST_F(CudaOps, AvgPool) {
  Rng r(6);
  const int64_t n = 3;
  for (const WindowGeom& g : {geom(4, 8, 8, 4, 2, 2, 0), geom(3, 7, 9, 3, 3, 1, 1), geom(3, 7, 9, 3, 3, 2, 1)}) {
    SCOPED_TRACE(geom_name(g, n));
    const size_t xs = static_cast<size_t>(n * g.c_in * g.h_in * g.w_in), ys = static_cast<size_t>(n * g.c_out * g.h_out * g.w_out);
    Pair x(H(), G(), r.vec(xs)), y(H(), G(), ys), dy(H(), G(), r.vec(ys)), dx(H(), G(), r.vec(xs));
    H().avgpool_forward(g, n, x.h(), y.h());
    G().avgpool_forward(g, n, x.g(), y.g());
    check("avgpool forward (count_include_pad)", y, {1e-6, 1e-6});
    H().avgpool_backward(g, n, x.h(), y.h(), dy.h(), dx.h());
    G().avgpool_backward(g, n, x.g(), y.g(), dy.g(), dx.g());
    check("avgpool backward", dx, {1e-6, 1e-6});
  }
}

TEST_F(CudaOps, ReluGelu) {
  Rng r(7);
  const size_t n = 5000;
  std::vector<float> xv = r.vec(n, -4.0f, 4.0f);
  xv[0] = 0.0f;
  xv[1] = -0.0f;
  Pair x(H(), G(), xv), y(H(), G(), n), dy(H(), G(), r.vec(n)), dx(H(), G(), n);
  H().relu_forward(n, x.h(), y.h());
  G().relu_forward(n, x.g(), y.g());
  check("relu forward", y, kExact);
  H().relu_backward(n, y.h(), dy.h(), dx.h());
  G().relu_backward(n, y.g(), dy.g(), dx.g());
  check("relu backward", dx, kExact);
  H().gelu_forward(n, x.h(), y.h());
  G().gelu_forward(n, x.g(), y.g());
  check("gelu forward (erf)", y, {1e-6, 1e-5});
  H().gelu_backward(n, x.h(), dy.h(), dx.h());
  G().gelu_backward(n, x.g(), dy.g(), dx.g());
  check("gelu backward", dx, {1e-6, 1e-5});
}

TEST_F(CudaOps, LayerNorm) {
  Rng r(8);
  for (int64_t cols : {7, 300, 2048}) {
    SCOPED_TRACE("cols " + std::to_string(cols));
    const int64_t rows = 6;
    const size_t n = static_cast<size_t>(rows * cols);
    std::vector<float> xv = r.vec(n, -3.0f, 5.0f);
    Pair x(H(), G(), xv), gamma(H(), G(), r.vec(static_cast<size_t>(cols), 0.5f, 1.5f));
    Pair beta(H(), G(), r.vec(static_cast<size_t>(cols))), y(H(), G(), n), stats(H(), G(), static_cast<size_t>(2 * rows));
    H().layernorm_forward(rows, cols, 1e-5f, x.h(), gamma.h(), beta.h(), y.h(), stats.h());
    G().layernorm_forward(rows, cols, 1e-5f, x.g(), gamma.g(), beta.g(), y.g(), stats.g());
    check("layernorm stats (mean, rstd)", stats, {1e-6, 1e-6});
    check("layernorm forward", y, {1e-5, 1e-5});
    Pair dy(H(), G(), r.vec(n)), dx(H(), G(), n), dg(H(), G(), r.vec(static_cast<size_t>(cols)));
    Pair dbeta(H(), G(), r.vec(static_cast<size_t>(cols)));
    H().layernorm_backward(rows, cols, x.h(), gamma.h(), stats.h(), dy.h(), dx.h(), dg.h(), dbeta.h());
    G().layernorm_backward(rows, cols, x.g(), gamma.g(), stats.g(), dy.g(), dx.g(), dg.g(), dbeta.g());
    check("layernorm backward dx", dx, {1e-5, 1e-4});
    check("layernorm backward dgamma (accumulated)", dg, {1e-5, 1e-5});
    check("layernorm backward dbeta (accumulated)", dbeta, {1e-5, 1e-5});
    H().layernorm_backward(rows, cols, x.h(), gamma.h(), stats.h(), dy.h(), nullptr, dg.h(), dbeta.h());
    G().layernorm_backward(rows, cols, x.g(), gamma.g(), stats.g(), dy.g(), nullptr, dg.g(), dbeta.g());
    check("layernorm backward without dx: dgamma", dg, {2e-5, 1e-5});
  }
}

TEST_F(CudaOps, DropoutMasksIdentical) {
  Rng r(9);
  const int64_t n = 7, f = 333;
  const size_t total = static_cast<size_t>(n * f);
  for (float p : {0.1f, 0.5f, 0.9f}) {
    SCOPED_TRACE("p " + std::to_string(p));
    const uint64_t key = rng_key(5, Stream::dropout, 3);
    Pair x(H(), G(), r.vec(total)), y(H(), G(), total), dy(H(), G(), r.vec(total)), dx(H(), G(), total);
    H().dropout_forward(n, f, p, key, 12345, x.h(), y.h());
    G().dropout_forward(n, f, p, key, 12345, x.g(), y.g());
    check("dropout forward", y, kExact);
    H().dropout_backward(n, f, p, key, 12345, dy.h(), dx.h());
    G().dropout_backward(n, f, p, key, 12345, dy.g(), dx.g());
    check("dropout backward", dx, kExact);
    const std::vector<float> yv = gpu_of(y);
    size_t dropped = 0;
    for (float v : yv) dropped += v == 0.0f;
    EXPECT_NEAR(static_cast<double>(dropped) / static_cast<double>(total), p, 0.05) << "fraction dropped";
  }
}

TEST_F(CudaOps, SoftmaxCrossEntropyAndCountCorrect) {
  Rng r(10);
  for (int64_t classes : {10, 1000}) {
    SCOPED_TRACE("classes " + std::to_string(classes));
    const int64_t n = 33;
    const size_t total = static_cast<size_t>(n * classes);
    Pair logits(H(), G(), r.vec(total, -5.0f, 5.0f)), loss(H(), G(), static_cast<size_t>(n)), probs(H(), G(), total);
    Labels lab(H(), G(), r.labels(static_cast<size_t>(n), static_cast<int32_t>(classes)));
    H().softmax_xent_forward(n, classes, logits.h(), lab.hp, loss.h(), probs.h());
    G().softmax_xent_forward(n, classes, logits.g(), lab.gp, loss.g(), probs.g());
    check("softmax_xent loss", loss, {1e-5, 1e-5});
    check("softmax_xent probs", probs, {1e-7, 1e-5});
    Pair d(H(), G(), total);
    H().softmax_xent_backward(n, classes, probs.h(), lab.hp, 1.0f / 33.0f, d.h());
    G().softmax_xent_backward(n, classes, probs.g(), lab.gp, 1.0f / 33.0f, d.g());
    check("softmax_xent backward", d, {1e-8, 1e-5});
    EXPECT_EQ(G().count_correct(n, classes, logits.g(), lab.gp), H().count_correct(n, classes, logits.h(), lab.hp));
  }
  // ties: the lowest index is the prediction
  const int64_t n = 500, classes = 4;
  std::vector<float> lv(static_cast<size_t>(n * classes));
  for (auto& v : lv) v = std::floor(r.uniform(0.0f, 3.0f));
  Pair logits(H(), G(), lv);
  Labels lab(H(), G(), r.labels(static_cast<size_t>(n), classes));
  const int64_t want = H().count_correct(n, classes, logits.h(), lab.hp);
  EXPECT_EQ(G().count_correct(n, classes, logits.g(), lab.gp), want) << "count_correct with tied logits";
}

TEST_F(CudaOps, Reductions) {
  Rng r(11);
  const size_t n = 1000003;
  std::vector<float> v = r.vec(n);
  Pair x(H(), G(), v);
  const double hs = H().sum(n, x.h()), gs = G().sum(n, x.g());
  EXPECT_NEAR(gs, hs, 1e-7 * std::max(1.0, std::fabs(hs))) << "sum";
  EXPECT_EQ(G().sum(n, x.g()), gs) << "sum is deterministic";
  EXPECT_NEAR(G().sum(5, x.g()), H().sum(5, x.h()), 1e-12);
  EXPECT_TRUE(G().all_finite(n, x.g()));
  for (size_t at : {size_t{0}, n / 2, n - 1})
    for (float bad : {NAN, INFINITY, -INFINITY}) {
      std::vector<float> w = v;
      w[at] = bad;
      Pair y(H(), G(), w);
      EXPECT_FALSE(G().all_finite(n, y.g())) << "non-finite " << bad << " at " << at;
      EXPECT_EQ(G().all_finite(at, y.g()), H().all_finite(at, y.h())) << "prefix before " << at;
    }
}

// The bf16 primitives the CUDA backend implements itself (backend.hpp: none stages through
// the host), against the host's: packing bitwise (odd counts, NaN), unpacking exactly, the
// bf16 gemm within fp32-accumulation distance, GELU with its derivative bitwise the GPU's own
// gelu_forward and gelu_backward of ones, and sum_squares close to the host's and the same
// bits at another address. Each op against the GPU's own f32-view op, bit for bit, is the
// backend contract (tests/unit/test_packed_ops.cpp, BackendContract/cuda).
TEST_F(CudaOps, Bf16OpsAgainstTheHost) {
  Rng r(31);
  for (size_t n : {size_t{1}, size_t{33}, size_t{1000}}) {
    std::vector<float> v = r.vec(n, -8.0f, 8.0f);
    v[0] = NAN;
    Pair x(H(), G(), v), p(H(), G(), (n + 1) / 2), back(H(), G(), n);
    H().pack_bf16(n, x.h(), p.h());
    G().pack_bf16(n, x.g(), p.g());
    check("pack_bf16 n " + std::to_string(n), p, kExact);
    H().unpack_bf16(n, p.h(), back.h());
    G().unpack_bf16(n, p.g(), back.g());
    check("unpack_bf16 n " + std::to_string(n), back, kExact);
  }
  const int64_t M = 37, N = 24, K = 53;
  for (int ta = 0; ta < 2; ++ta) {
    Pair A(H(), G(), r.vec(static_cast<size_t>(M * K))), B(H(), G(), r.vec(static_cast<size_t>(K * N)));
    Pair want(H(), G(), std::vector<float>(static_cast<size_t>(M * N), 0.5f));
    G().gemm(ta, false, M, N, K, 0.75f, A.g(), ta ? M : K, B.g(), N, 1.0f, want.g(), N, Precision::bf16);
    H().gemm(ta, false, M, N, K, 0.75f, A.h(), ta ? M : K, B.h(), N, 1.0f, want.h(), N, Precision::bf16);
    check("bf16 gemm: GPU against host", want, {1e-4, 1e-4});
  }

  const size_t n = 5000;
  Pair gx(H(), G(), r.vec(n, -4.0f, 4.0f)), gy(H(), G(), n), ones(H(), G(), std::vector<float>(n, 1.0f));
  Pair want_y(H(), G(), n), want_d(H(), G(), n);
  G().gelu_forward(n, gx.g(), want_y.g());
  G().gelu_backward(n, gx.g(), ones.g(), want_d.g());
  G().gelu_forward_deriv(n, gx.g(), gy.g());
  expect_close("gelu_forward_deriv: y", gpu_of(gy), gpu_of(want_y), kExact);
  expect_close("gelu_forward_deriv: the derivative", gpu_of(gx), gpu_of(want_d), kExact);

  const size_t big = 1000003;
  const std::vector<float> sv = r.vec(big);
  Pair s(H(), G(), sv), shifted(H(), G(), big + 3);
  const double hs = H().sum_squares(big, s.h()), gs = G().sum_squares(big, s.g());
  EXPECT_NEAR(gs, hs, 1e-12 * hs) << "sum_squares";
  G().from_host(shifted.g() + 3, sv.data(), big);  // the same values at another address
  EXPECT_EQ(G().sum_squares(big, shifted.g() + 3), gs) << "sum_squares: the same bits at another address";
}

TEST_F(CudaOps, OptimizerUpdates) {
  Rng r(12);
  const size_t n = 10007;
  struct Sgd {
    float momentum, wd;
    bool nesterov;
    float scale;
  };
  for (Sgd s : {Sgd{0.0f, 0.0f, false, 1.0f}, Sgd{0.9f, 0.0f, false, 0.5f}, Sgd{0.9f, 1e-2f, true, 1.0f}}) {
    SCOPED_TRACE("sgd momentum " + std::to_string(s.momentum) + " wd " + std::to_string(s.wd) + (s.nesterov ? " nesterov" : ""));
    Pair w(H(), G(), r.vec(n)), buf(H(), G(), n);
    for (int step = 0; step < 3; ++step) {
      Pair g(H(), G(), r.vec(n));
      H().sgd_update(n, w.h(), g.h(), s.momentum != 0.0f ? buf.h() : nullptr, 0.05f, s.momentum, s.wd, s.nesterov, s.scale);
      G().sgd_update(n, w.g(), g.g(), s.momentum != 0.0f ? buf.g() : nullptr, 0.05f, s.momentum, s.wd, s.nesterov, s.scale);
    }
    check("sgd weights after 3 steps", w, {1e-7, 1e-6});
    check("sgd momentum buffer", buf, {1e-7, 1e-6});
  }
  Pair w(H(), G(), r.vec(n)), m(H(), G(), n), v(H(), G(), n);
  for (int64_t step = 1; step <= 3; ++step) {
    Pair g(H(), G(), r.vec(n));
    H().adamw_update(n, w.h(), g.h(), m.h(), v.h(), 1e-3, 0.9, 0.999, 1e-8, 1e-2, step, 0.5f);
    G().adamw_update(n, w.g(), g.g(), m.g(), v.g(), 1e-3, 0.9, 0.999, 1e-8, 1e-2, step, 0.5f);
  }
  check("adamw weights after 3 steps", w, {1e-7, 1e-6});
  check("adamw first moment", m, {1e-8, 1e-6});
  check("adamw second moment", v, {1e-10, 1e-6});
}

// ---- sequence and batch-norm ops ------------------------------------------------------

TEST_F(CudaOps, GemmStridedBatched) {
  Rng r(20);
  const int64_t M = 7, N = 5, K = 9, batch = 6;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      Pair A(H(), G(), r.vec(static_cast<size_t>(batch * M * K))), B(H(), G(), r.vec(static_cast<size_t>(batch * K * N)));
      Pair C(H(), G(), r.vec(static_cast<size_t>(batch * M * N)));
      const int64_t lda = ta ? M : K, ldb = tb ? K : N;
      for (Backend* be : {&H(), &G()}) {
        const bool g = be == &G();
        be->gemm_strided_batched(ta, tb, M, N, K, 0.5f, g ? A.g() : A.h(), lda, M * K, g ? B.g() : B.h(), ldb, K * N,
                                 0.25f, g ? C.g() : C.h(), N, M * N, batch, Precision::fp32);
      }
      check("batched gemm ta " + std::to_string(ta) + " tb " + std::to_string(tb), C, {2e-6, 1e-5});
    }
}

TEST_F(CudaOps, HeadsPermutationsAndCausalSoftmax) {
  Rng r(21);
  const int64_t n = 3, T = 37, parts = 3, Hh = 4, dh = 5;
  const size_t total = static_cast<size_t>(n * T * parts * Hh * dh);
  Pair x(H(), G(), r.vec(total)), y(H(), G(), total), back(H(), G(), total);
  H().heads_split(n, T, parts, Hh, dh, x.h(), y.h());
  G().heads_split(n, T, parts, Hh, dh, x.g(), y.g());
  check("heads_split", y, kExact);
  H().heads_merge(n, T, parts, Hh, dh, y.h(), back.h());
  G().heads_merge(n, T, parts, Hh, dh, y.g(), back.g());
  check("heads_merge", back, kExact);
  expect_close("merge(split(x)) == x", gpu_of(back), cpu_of(x), kExact);
  const int64_t batches = 5;
  const size_t tt = static_cast<size_t>(batches * T * T);
  Pair s(H(), G(), r.vec(tt, -6.0f, 6.0f)), p(H(), G(), tt), dp(H(), G(), r.vec(tt)), ds(H(), G(), tt);
  H().causal_softmax_forward(batches, T, s.h(), p.h());
  G().causal_softmax_forward(batches, T, s.g(), p.g());
  check("causal softmax", p, {1e-7, 1e-5});
  H().causal_softmax_backward(batches, T, p.h(), dp.h(), ds.h());
  G().causal_softmax_backward(batches, T, p.g(), dp.g(), ds.g());
  check("causal softmax backward", ds, {1e-7, 1e-5});
  H().causal_softmax_forward(batches, T, s.h(), s.h());  // in place
  G().causal_softmax_forward(batches, T, s.g(), s.g());
  check("causal softmax in place", s, {1e-7, 1e-5});
}

TEST_F(CudaOps, EmbeddingAndRowMeansBitwise) {
  Rng r(22);
  const int64_t n = 4, T = 9, D = 33, V = 7;  // few ids: many repeated rows in the scatter-add
  std::vector<float> tok(static_cast<size_t>(n * T));
  for (auto& v : tok) v = static_cast<float>(std::floor(r.uniform(0.0f, static_cast<float>(V) - 0.001f)));
  Pair t(H(), G(), tok), wte(H(), G(), r.vec(static_cast<size_t>(V * D))), wpe(H(), G(), r.vec(static_cast<size_t>(T * D)));
  Pair y(H(), G(), static_cast<size_t>(n * T * D)), dy(H(), G(), r.vec(static_cast<size_t>(n * T * D)));
  H().embedding_forward(n, T, D, t.h(), 0, V, wte.h(), wpe.h(), y.h());
  G().embedding_forward(n, T, D, t.g(), 0, V, wte.g(), wpe.g(), y.g());
  check("embedding forward", y, kExact);
  H().embedding_forward(n, T, D, t.h(), 2, 3, wte.h(), nullptr, y.h());  // a vocabulary part: rows 2-4
  G().embedding_forward(n, T, D, t.g(), 2, 3, wte.g(), nullptr, y.g());
  check("embedding forward, vocabulary part", y, kExact);
  H().embedding_backward(n, T, D, t.h(), 0, V, dy.h(), wte.h(), wpe.h());
  G().embedding_backward(n, T, D, t.g(), 0, V, dy.g(), wte.g(), wpe.g());
  check("embedding backward, token rows (same order of additions)", wte, kExact);
  check("embedding backward, positions", wpe, kExact);
  H().embedding_backward(n, T, D, t.h(), 2, 3, dy.h(), wte.h(), wpe.h());
  G().embedding_backward(n, T, D, t.g(), 2, 3, dy.g(), wte.g(), wpe.g());
  check("embedding backward, vocabulary part", wte, kExact);
  Pair m(H(), G(), static_cast<size_t>(n * T)), dx(H(), G(), static_cast<size_t>(n * T * D));
  H().mean_rows(n * T, D, dy.h(), m.h());
  G().mean_rows(n * T, D, dy.g(), m.g());
  check("mean_rows", m, kExact);
  H().mean_rows_backward(n * T, D, m.h(), dx.h());
  G().mean_rows_backward(n * T, D, m.g(), dx.g());
  check("mean_rows backward", dx, kExact);
}

TEST_F(CudaOps, BatchNormCudnnMatchesHost) {
  Rng r(23);
  const int64_t n = 5, C = 6, HW = 49;
  const size_t total = static_cast<size_t>(n * C * HW);
  Pair x(H(), G(), r.vec(total, -2.0f, 3.0f)), g(H(), G(), r.vec(static_cast<size_t>(C), 0.5f, 1.5f));
  Pair b(H(), G(), r.vec(static_cast<size_t>(C))), y(H(), G(), total), sm(H(), G(), static_cast<size_t>(C));
  Pair si(H(), G(), static_cast<size_t>(C)), rm(H(), G(), static_cast<size_t>(C));
  Pair rv(H(), G(), std::vector<float>(static_cast<size_t>(C), 1.0f));
  for (int step = 0; step < 2; ++step) {
    H().batchnorm_forward_training(n, C, HW, 1e-5f, 0.1f, x.h(), g.h(), b.h(), y.h(), sm.h(), si.h(), rm.h(), rv.h());
    G().batchnorm_forward_training(n, C, HW, 1e-5f, 0.1f, x.g(), g.g(), b.g(), y.g(), sm.g(), si.g(), rm.g(), rv.g());
  }
  check("batch norm training forward", y, {1e-5, 1e-5});
  check("saved mean", sm, {1e-6, 1e-5});
  check("saved 1/std", si, {1e-6, 1e-5});
  check("running mean", rm, {1e-6, 1e-5});
  check("running variance (unbiased)", rv, {1e-6, 1e-5});
  Pair dy(H(), G(), r.vec(total)), dx(H(), G(), total), dg(H(), G(), r.vec(static_cast<size_t>(C)));
  Pair db(H(), G(), r.vec(static_cast<size_t>(C)));
  H().batchnorm_backward(n, C, HW, 1e-5f, x.h(), g.h(), sm.h(), si.h(), dy.h(), dx.h(), dg.h(), db.h());
  G().batchnorm_backward(n, C, HW, 1e-5f, x.g(), g.g(), sm.g(), si.g(), dy.g(), dx.g(), dg.g(), db.g());
  check("batch norm backward dx", dx, {1e-5, 1e-4});
  check("batch norm dgamma (accumulated)", dg, {1e-4, 1e-5});
  check("batch norm dbeta (accumulated)", db, {1e-4, 1e-5});
  // the halves: bitwise the full call's outputs on the GPU
  Pair dx2(H(), G(), total), dg2(H(), G(), static_cast<size_t>(C)), db2(H(), G(), static_cast<size_t>(C));
  Pair dg3(H(), G(), static_cast<size_t>(C)), db3(H(), G(), static_cast<size_t>(C));
  G().batchnorm_backward(n, C, HW, 1e-5f, x.g(), g.g(), sm.g(), si.g(), dy.g(), dx2.g(), dg2.g(), db2.g());
  G().batchnorm_backward(n, C, HW, 1e-5f, x.g(), g.g(), sm.g(), si.g(), dy.g(), nullptr, dg3.g(), db3.g());
  expect_close("dgamma of the W half", gpu_of(dg3), gpu_of(dg2), kExact);
  expect_close("dbeta of the W half", gpu_of(db3), gpu_of(db2), kExact);
  G().batchnorm_backward(n, C, HW, 1e-5f, x.g(), g.g(), sm.g(), si.g(), dy.g(), dx.g(), nullptr, nullptr);
  expect_close("dx of the I half", gpu_of(dx), gpu_of(dx2), kExact);
  H().batchnorm_forward_inference(n, C, HW, 1e-5f, x.h(), g.h(), b.h(), rm.h(), rv.h(), y.h());
  G().batchnorm_forward_inference(n, C, HW, 1e-5f, x.g(), g.g(), b.g(), rm.g(), rv.g(), y.g());
  check("batch norm inference", y, {1e-5, 1e-5});
}

TEST_F(CudaOps, RegionTimer) {
  Buffer a(G(), 1 << 22);
  G().timer_start();
  for (int i = 0; i < 10; ++i) G().scale(1 << 22, 1.0001f, a.data());
  const double t = G().timer_stop();
  EXPECT_GT(t, 0.0);
  EXPECT_LT(t, 10.0);
}

// A stage holding every layer type, on both backends from the same parameters and inputs.
TEST_F(CudaOps, StageWithEveryLayerMatchesHost) {
  const std::string deck_text =
      "[data]\nsource = \"synthetic\"\nshape = [3, 12, 12]\nclasses = 7\n[model]\n"
      "[[model.layers]]\ntype = \"conv2d\"\nchannels = 6\nkernel = 3\npadding = 1\n"
      "[[model.layers]]\ntype = \"relu\"\n"
      "[[model.layers]]\ntype = \"maxpool2d\"\nkernel = 2\n"
      "[[model.layers]]\ntype = \"conv2d\"\nchannels = 8\nkernel = 3\nstride = 1\npadding = 1\nbias = false\n"
      "[[model.layers]]\ntype = \"gelu\"\n"
      "[[model.layers]]\ntype = \"avgpool2d\"\nkernel = 3\nstride = 1\npadding = 1\n"
      "[[model.layers]]\ntype = \"maxpool2d\"\nkernel = 3\nstride = 2\npadding = 1\n"
      "[[model.layers]]\ntype = \"flatten\"\n"
      "[[model.layers]]\ntype = \"layernorm\"\n"
      "[[model.layers]]\ntype = \"dropout\"\np = 0.25\n"
      "[[model.layers]]\ntype = \"linear\"\nout = 16\n"
      "[[model.layers]]\ntype = \"relu\"\n"
      "[[model.layers]]\ntype = \"linear\"\nout = 7\n"
      "[[model.layers]]\ntype = \"softmax_cross_entropy\"\n";
  const Deck deck = parse_deck_text(deck_text, "cuda_stage.toml", {});
  const Model model(deck, Shape::chw(3, 12, 12), 7);
  const int L = model.size();
  const int64_t mb = 6;
  Rng r(13);
  const std::vector<float> xv = r.vec(static_cast<size_t>(mb * 3 * 12 * 12), -2.0f, 2.0f);
  const std::vector<int32_t> lv = r.labels(static_cast<size_t>(mb), 7);

  struct Run {
    std::vector<float> loss, grads, logits;
    double eval_loss = 0;
    int64_t correct = 0;
  };
  auto run = [&](Backend& be) {
    Run out;
    Stage st(be, model, 0, L, mb, mb);
    const size_t np = static_cast<size_t>(st.num_params());
    std::vector<float> host(np);
    st.init_params(host.data(), 7);
    Buffer params(be, np), grads(be, np), slot_mem(be, static_cast<size_t>(st.slot_floats()));
    be.from_host(params.data(), host.data(), np);
    int32_t* labels = be.alloc_int(static_cast<size_t>(mb));
    be.labels_from_host(labels, lv.data(), lv.size());
    Stage::Slot slot = st.carve(slot_mem.data(), labels);
    be.from_host(slot.input, xv.data(), xv.size());
    LayerCtx ctx{be, 3, 60, true, labels, 1.0f / static_cast<float>(mb)};
    st.forward(slot, params.data(), ctx, mb, PollHook{});
    out.loss.resize(static_cast<size_t>(mb));
    be.to_host(out.loss.data(), st.output(slot), out.loss.size());
    st.backward(slot, params.data(), grads.data(), nullptr, nullptr, ctx, mb, PollHook{});
    out.grads.resize(np);
    be.to_host(out.grads.data(), grads.data(), np);
    // inference path (no dropout), from a separate input buffer
    Buffer xin(be, xv.size());
    be.from_host(xin.data(), xv.data(), xv.size());
    LayerCtx ectx{be, 3, 0, false, nullptr, 1.0f};
    const float* logits = st.infer(xin.data(), params.data(), ectx, mb, PollHook{});
    out.logits.resize(static_cast<size_t>(mb * 7));
    be.to_host(out.logits.data(), logits, out.logits.size());
    int64_t scored = 0;
    LayerCtx lctx{be, 3, 0, false, labels, 1.0f};
    st.eval_loss(logits, params.data(), lctx, mb, &out.eval_loss, &out.correct, &scored);
    EXPECT_EQ(scored, mb);
    be.release_int(labels);
    return out;
  };
  const Run h = run(H()), g = run(G());
  expect_close("stage per-sample loss", g.loss, h.loss, {1e-4, 1e-4});
  Stage probe(H(), model, 0, L, mb, mb);
  for (int l = 0; l < L; ++l) {
    const int64_t np = model.layer(l).num_params();
    if (!np) continue;
    const size_t off = static_cast<size_t>(probe.param_offset(l));
    expect_norm_close("gradient of layer " + std::to_string(l) + " (" + model.layer(l).type() + ")", g.grads.data() + off,
                      h.grads.data() + off, static_cast<size_t>(np), 1e-4);
  }
  expect_close("inference logits", g.logits, h.logits, {1e-4, 1e-4});
  EXPECT_NEAR(g.eval_loss, h.eval_loss, 1e-4 * std::max(1.0, std::fabs(h.eval_loss)));
  EXPECT_EQ(g.correct, h.correct);
}

// Transformer and ResNet chains on both backends: loss, every layer's gradients, the
// running statistics; and on the GPU, the split backward bitwise equal to the fused one.
namespace {

const char* kGptChain =
    "[data]\nsource = \"synthetic\"\nshape = [16]\nclasses = 50\n[model]\n"
    "[[model.layers]]\ntype = \"embedding\"\nname = \"emb\"\ndim = 32\n"
    "[[model.layers]]\ntype = \"transformer_block\"\nheads = 4\ndropout = 0.1\n"
    "[[model.layers]]\ntype = \"attention\"\nheads = 2\n"
    "[[model.layers]]\ntype = \"transformer_block\"\nheads = 8\nmlp_ratio = 2\n"
    "[[model.layers]]\ntype = \"lm_head\"\ntie = \"emb\"\n";

const char* kResNetChain =
    "[data]\nsource = \"synthetic\"\nshape = [3, 16, 16]\nclasses = 10\n[model]\n"
    "[[model.layers]]\ntype = \"conv2d\"\nchannels = 8\nkernel = 3\npadding = 1\nbias = false\n"
    "[[model.layers]]\ntype = \"batchnorm2d\"\n"
    "[[model.layers]]\ntype = \"relu\"\n"
    "[[model.layers]]\ntype = \"residual_block\"\nchannels = 8\n"
    "[[model.layers]]\ntype = \"residual_block\"\nchannels = 16\nstride = 2\n"
    "[[model.layers]]\ntype = \"global_avgpool\"\n"
    "[[model.layers]]\ntype = \"linear\"\nout = 10\n"
    "[[model.layers]]\ntype = \"softmax_cross_entropy\"\n";

struct ChainRun {
  std::vector<float> loss, grads, state;
};

ChainRun run_chain(Backend& be, const Model& model, const std::vector<float>& x, const std::vector<int32_t>& labels,
                   int64_t mb, bool split) {
  Stage st(be, model, 0, model.size(), mb, mb, split);
  const size_t np = static_cast<size_t>(st.num_params()), ns = static_cast<size_t>(st.num_state());
  std::vector<float> host(np), state0(ns);
  st.init_params(host.data(), 7);
  st.init_state(state0.data());
  Buffer params(be, np), grads(be, np), slot_mem(be, static_cast<size_t>(st.slot_floats())), state(be, std::max<size_t>(1, ns));
  be.from_host(params.data(), host.data(), np);
  if (ns) be.from_host(state.data(), state0.data(), ns);
  int32_t* lab = be.alloc_int(labels.size());
  be.labels_from_host(lab, labels.data(), labels.size());
  Stage::Slot slot = st.carve(slot_mem.data(), lab);
  be.from_host(slot.input, x.data(), x.size());
  LayerCtx ctx{be, 3, 60, true, lab, 1.0f / static_cast<float>(mb)};
  ctx.state = state.data();
  st.forward(slot, params.data(), ctx, mb, PollHook{});
  ChainRun out;
  out.loss.resize(static_cast<size_t>(mb));
  be.to_host(out.loss.data(), st.output(slot), out.loss.size());
  if (split) {
    st.backward_input(slot, params.data(), grads.data(), nullptr, nullptr, ctx, mb, PollHook{});
    st.backward_weight(slot, params.data(), grads.data(), ctx, mb, PollHook{});
  } else {
    st.backward(slot, params.data(), grads.data(), nullptr, nullptr, ctx, mb, PollHook{});
  }
  out.grads.resize(np);
  be.to_host(out.grads.data(), grads.data(), np);
  out.state.resize(ns);
  if (ns) be.to_host(out.state.data(), state.data(), ns);
  be.release_int(lab);
  return out;
}

}  // namespace

TEST_F(CudaOps, TransformerAndResNetChainsMatchHostAndSplitBitwise) {
  for (bool gpt : {true, false}) {
    SCOPED_TRACE(gpt ? "transformer chain" : "resnet chain");
    const Deck deck = parse_deck_text(gpt ? kGptChain : kResNetChain, "cuda_chain.toml", {});
    const Shape in = gpt ? Shape::tokens(16) : Shape::chw(3, 16, 16);
    const Model model(deck, in, deck.data.classes);
    const int64_t mb = 4;
    Rng r(24);
    std::vector<float> x(static_cast<size_t>(mb * in.numel()));
    for (auto& v : x) v = gpt ? std::floor(r.uniform(0.0f, 49.99f)) : r.uniform(-2.0f, 2.0f);
    const std::vector<int32_t> labels = r.labels(static_cast<size_t>(mb * model.layer(model.size() - 1).labels_per_sample()),
                                                 static_cast<int32_t>(deck.data.classes));
    const ChainRun h = run_chain(H(), model, x, labels, mb, false), g = run_chain(G(), model, x, labels, mb, false);
    expect_close("per-sample loss", g.loss, h.loss, {1e-4, 1e-4});
    expect_close("running statistics", g.state, h.state, {1e-5, 1e-4});
    Stage probe(H(), model, 0, model.size(), mb, mb);
    for (int l = 0; l < model.size(); ++l) {
      const int64_t np = model.layer(l).num_params();
      if (!np) continue;
      const size_t off = static_cast<size_t>(probe.param_offset(l));
      expect_norm_close("gradient of layer " + std::to_string(l) + " (" + model.layer(l).type() + ")", g.grads.data() + off,
                        h.grads.data() + off, static_cast<size_t>(np), 1e-4);
    }
    const ChainRun gs = run_chain(G(), model, x, labels, mb, true);
    expect_close("GPU split backward vs fused", gs.grads, g.grads, kExact);
  }
}

// The CUDA transport on one rank: messages to self and the single-rank allreduce.
class CudaTransportTest : public CudaOps {};

void self_messages(Backend& be, const char* aware) {
  setenv("PT_MPI_CUDA_AWARE", aware, 1);
  std::unique_ptr<Transport> tr = make_transport(be);
  unsetenv("PT_MPI_CUDA_AWARE");
  SCOPED_TRACE(tr->describe());
  Rng r(14);
  const size_t n = 4099;
  for (int round = 0; round < 3; ++round) {
    const std::vector<float> v = r.vec(n);
    Buffer src(be, n), dst(be, n);
    be.from_host(src.data(), v.data(), n);
    be.scale(n, 2.0f, src.data());  // queued work the send must wait for
    Request rr, sr;
    tr->irecv(dst.data(), n, 0, 10 + round, MPI_COMM_SELF, &rr);
    tr->isend(src.data(), n, 0, 10 + round, MPI_COMM_SELF, &sr);
    MPI_Wait(sr.mpi(), MPI_STATUS_IGNORE);
    MPI_Wait(rr.mpi(), MPI_STATUS_IGNORE);
    tr->finish_recv(dst.data());
    be.scale(n, 0.5f, dst.data());  // queued after the upload
    std::vector<float> back(n);
    be.to_host(back.data(), dst.data(), n);
    expect_close("message to self, round " + std::to_string(round), back, v, kExact);
  }
  const std::vector<float> v = r.vec(n);
  Buffer g(be, n);
  be.from_host(g.data(), v.data(), n);
  Request req;
  tr->iallreduce(g.data(), n, MPI_COMM_SELF, &req);
  MPI_Wait(req.mpi(), MPI_STATUS_IGNORE);
  tr->finish_allreduce(g.data());
  std::vector<float> back(n);
  be.to_host(back.data(), g.data(), n);
  expect_close("allreduce over one rank", back, v, kExact);
}

TEST_F(CudaTransportTest, StagedMessagesToSelf) { self_messages(G(), "0"); }

TEST_F(CudaTransportTest, DirectMessagesToSelfWhenMpiIsCudaAware) {
  if (const char* v = std::getenv("PT_TEST_CUDA_AWARE_MPI"); !v || std::strcmp(v, "1") != 0)
    GTEST_SKIP() << "set PT_TEST_CUDA_AWARE_MPI=1 under a CUDA-aware MPI to test device pointers passed to MPI";
  self_messages(G(), "1");
}

}  // namespace
}  // namespace pt
