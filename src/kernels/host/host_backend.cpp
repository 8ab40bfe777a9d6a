// Host backend, its elementwise, normalisation, dropout, loss, reduction and optimizer
// kernels as named Kokkos kernels on the Serial space (memory: host_memory.cpp; products:
// host_gemm.cpp; convolutions and pooling: conv_pool.cpp; sequences: sequence_ops.cpp and
// attention_kernel.cpp).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "host_backend.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/rng.hpp"
#include "pipetrain/views.hpp"
#include "vec_math.hpp"

namespace pt::host {

void HostBackend::axpy(size_t n, float a, const float* x, float* y) {
  Kokkos::parallel_for("pt::axpy", Range(0, n), [=](size_t i) { y[i] += a * x[i]; });
}
void HostBackend::scale(size_t n, float a, float* x) {
  if (a == 0.0f) {
    std::memset(x, 0, n * sizeof(float));
    return;
  }
  Kokkos::parallel_for("pt::scale", Range(0, n), [=](size_t i) { x[i] *= a; });
}

void HostBackend::bias_add_rows(float* y, const float* b, int64_t rows, int64_t cols) {
  Kokkos::parallel_for("pt::bias_add_rows", Range(0, rows), [=](int64_t r) {
    float* yr = y + r * cols;
    for (int64_t c = 0; c < cols; ++c) yr[c] += b[c];
  });
}
// rows outer so the inner loop streams contiguous memory; a bf16 dy read 16 bits at a time
void HostBackend::bias_grad_rows(CView dy, float* db, int64_t rows, int64_t cols) {
  const float* d = dy.data;
  const auto* h = reinterpret_cast<const unsigned char*>(dy.data);
  const bool bf16 = dy.bf16();
  Kokkos::parallel_for("pt::bias_grad_rows", Range(0, 1), [=](int) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t i = r * cols + c;
        if (!bf16) {
          db[c] += d[i];
          continue;
        }
        uint16_t b;
        std::memcpy(&b, h + 2 * i, sizeof b);
        db[c] += bf16_to_float(b);
      }
  });
}

void HostBackend::relu_forward(size_t n, const float* x, float* y) {
  Kokkos::parallel_for("pt::relu_forward", Range(0, n), [=](size_t i) { y[i] = x[i] > 0.0f ? x[i] : 0.0f; });
}
void HostBackend::relu_backward(size_t n, CView yv, const float* dy, float* dx) {
  const float* y = yv.data;
  if (!yv.bf16())
    return Kokkos::parallel_for("pt::relu_backward", Range(0, n), [=](size_t i) { dx[i] = y[i] > 0.0f ? dy[i] : 0.0f; });
  const uint16_t* yb = reinterpret_cast<const uint16_t*>(y);
  Kokkos::parallel_for("pt::relu_backward", Range(0, n), [=](size_t i) { dx[i] = bf16_to_float(yb[i]) > 0.0f ? dy[i] : 0.0f; });
}
namespace {
// f(i) for i in [0, n), written packed (pack_bf16) to out: blocks of 256 values computed into
// a stack buffer by a plain loop (which GCC vectorises as it does the unpacked op), then
// rounded and stored as 16-bit values; the upper half of the last word zeroed
template <class F>
void packed_map(size_t n, float* out, F f) {
  constexpr size_t kBlock = 256;
  auto* o = reinterpret_cast<unsigned char*>(out);
  Kokkos::parallel_for("pt::packed_map", Range(0, (n + kBlock - 1) / kBlock), [=](size_t b) {
    const size_t i0 = b * kBlock, m = n - i0 < kBlock ? n - i0 : kBlock;
    float v[kBlock];
    for (size_t k = 0; k < m; ++k) v[k] = f(i0 + k);
    pack_bf16_span(m, v, o + 2 * i0);
  });
  if (n % 2) std::memset(o + 2 * n, 0, 2);
}

// y[i] = f(x[i]) over an f32 or bf16 x into an f32 or bf16 y (each loop plain, so GCC
// vectorises it; the bf16 x widened as read)
template <class F>
void map_views(const char* name, size_t n, CView x, View y, F f) {
  const float* xf = x.data;
  const uint16_t* xb = reinterpret_cast<const uint16_t*>(x.data);
  if (y.bf16()) {
    if (x.bf16()) return packed_map(n, y.data, [=](size_t i) { return f(i, bf16_to_float(xb[i])); });
    return packed_map(n, y.data, [=](size_t i) { return f(i, xf[i]); });
  }
  float* yd = y.data;
  if (x.bf16()) return Kokkos::parallel_for(name, Range(0, n), [=](size_t i) { yd[i] = f(i, bf16_to_float(xb[i])); });
  Kokkos::parallel_for(name, Range(0, n), [=](size_t i) { yd[i] = f(i, xf[i]); });
}
}  // namespace

// gelu(x) = x Phi(x) and gelu'(x) = Phi(x) + x phi(x), the expressions both GELU kernels use
inline float gelu_of(float v) { return v * normal_cdf_pdf(v).cdf; }
inline float gelu_slope(float v) {
  const NormalCdfPdf g = normal_cdf_pdf(v);
  return g.cdf + v * g.pdf;
}

// Both for every bf16 value (65536 each, by bit pattern), computed once by the same
// expressions: a bf16 x (the up-projection's output under the bf16 policy) is looked up
// instead of evaluated, the same bits at a fraction of the cost (the two GELU kernels were 7%
// of a tinygpt bf16 step, 2026-12-05; tests/unit/test_vec_math.cpp compares every entry).
struct GeluTables {
  std::vector<float> value, slope;
  GeluTables() : value(65536), slope(65536) {
    for (uint32_t b = 0; b < 65536; ++b) {
      const float v = bf16_to_float(static_cast<uint16_t>(b));
      value[b] = gelu_of(v), slope[b] = gelu_slope(v);
    }
  }
};
const GeluTables& gelu_tables() {
  static const GeluTables t;
  return t;
}

void HostBackend::gelu_forward(size_t n, CView x, View y) {
  if (x.bf16()) {
    const float* t = gelu_tables().value.data();
    const auto* xb = reinterpret_cast<const uint16_t*>(x.data);
    if (y.bf16()) return packed_map(n, y.data, [=](size_t i) { return t[xb[i]]; });
    float* yd = y.data;
    return Kokkos::parallel_for("pt::gelu_forward", Range(0, n), [=](size_t i) { yd[i] = t[xb[i]]; });
  }
  map_views("pt::gelu_forward", n, x, y, [](size_t, float v) { return gelu_of(v); });
}
void HostBackend::gelu_backward(size_t n, CView x, const float* dy, View dx) {
  if (x.bf16()) {
    const float* t = gelu_tables().slope.data();
    const auto* xb = reinterpret_cast<const uint16_t*>(x.data);
    if (dx.bf16()) return packed_map(n, dx.data, [=](size_t i) { return dy[i] * t[xb[i]]; });
    float* d = dx.data;
    return Kokkos::parallel_for("pt::gelu_backward", Range(0, n), [=](size_t i) { d[i] = dy[i] * t[xb[i]]; });
  }
  map_views("pt::gelu_backward", n, x, dx, [=](size_t i, float v) { return dy[i] * gelu_slope(v); });
}

// gelu and gelu' from one normal_cdf_pdf, the expressions of gelu_forward and gelu_backward
void HostBackend::gelu_forward_deriv(size_t n, float* x, View y) {
  if (y.bf16()) {
    return packed_map(n, y.data, [=](size_t i) {
      const float v = x[i];
      const NormalCdfPdf g = normal_cdf_pdf(v);
      x[i] = g.cdf + v * g.pdf;
      return v * g.cdf;
    });
  }
  float* yd = y.data;
  Kokkos::parallel_for("pt::gelu_forward_deriv", Range(0, n), [=](size_t i) {
    const float v = x[i];
    const NormalCdfPdf g = normal_cdf_pdf(v);
    yd[i] = v * g.cdf;
    x[i] = g.cdf + v * g.pdf;
  });
}
void HostBackend::add(size_t n, const float* a, const float* b, float* y) {
  Kokkos::parallel_for("pt::add", Range(0, n), [=](size_t i) { y[i] = a[i] + b[i]; });
}
void HostBackend::mul(size_t n, const float* a, const float* b, View y) {
  if (y.bf16()) return packed_map(n, y.data, [=](size_t i) { return a[i] * b[i]; });
  float* yd = y.data;
  Kokkos::parallel_for("pt::mul", Range(0, n), [=](size_t i) { yd[i] = a[i] * b[i]; });
}

// Row statistics in double over fixed lanes (vec_math.hpp), two passes.
void HostBackend::layernorm_forward(int64_t rows, int64_t cols, float eps, const float* x, const float* gamma,
                                    const float* beta, float* y, float* stats) {
  Kokkos::parallel_for("pt::layernorm_forward", Range(0, rows), [=](int64_t r) {
    const float* xr = x + r * cols;
    const double mean = lane_sum(cols, [&](int64_t c) { return xr[c]; }) / static_cast<double>(cols);
    const double var = lane_sum(cols, [&](int64_t c) { return (xr[c] - mean) * (xr[c] - mean); }) / static_cast<double>(cols);
    const float m = static_cast<float>(mean), rstd = static_cast<float>(1.0 / std::sqrt(var + eps));
    float* yr = y + r * cols;
    for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - m) * rstd * gamma[c] + beta[c];
    stats[2 * r] = m;
    stats[2 * r + 1] = rstd;
  });
}

// Rows in order (dgamma and dbeta accumulate row by row); each row's two sums in double lanes.
void HostBackend::layernorm_backward(int64_t rows, int64_t cols, const float* x, const float* gamma,
                                     const float* stats, const float* dy, float* dx, float* dgamma, float* dbeta) {
  Kokkos::parallel_for("pt::layernorm_backward", Range(0, 1), [=](int) {
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * cols;
      const float* dyr = dy + r * cols;
      const float m = stats[2 * r], rstd = stats[2 * r + 1];
      if (dgamma) {
        for (int64_t c = 0; c < cols; ++c) {
          dgamma[c] += dyr[c] * ((xr[c] - m) * rstd);
          dbeta[c] += dyr[c];
        }
      }
      if (!dx) continue;
      double acc[kLanes] = {}, acc_x[kLanes] = {};
      lane_add(acc, cols, [&](int64_t c) { return dyr[c] * gamma[c]; });
      lane_add(acc_x, cols, [&](int64_t c) { return dyr[c] * gamma[c] * ((xr[c] - m) * rstd); });
      const float a = static_cast<float>(lane_total(acc) / cols), b = static_cast<float>(lane_total(acc_x) / cols);
      float* dxr = dx + r * cols;
      for (int64_t c = 0; c < cols; ++c) {
        const float xhat = (xr[c] - m) * rstd;
        dxr[c] = rstd * (dyr[c] * gamma[c] - a - xhat * b);
      }
    }
  });
}

void HostBackend::dropout_forward(int64_t n, int64_t features, float p, uint64_t key, int64_t sample0,
                                  const float* x, float* y) {
  const float keep_scale = 1.0f / (1.0f - p);
  Kokkos::parallel_for("pt::dropout_forward", Range(0, n * features), [=](int64_t i) {
    const int64_t s = i / features, j = i % features;
    const bool keep = rng_uniform(key, static_cast<uint64_t>((sample0 + s) * features + j)) >= p;
    y[i] = keep ? x[i] * keep_scale : 0.0f;
  });
}
void HostBackend::dropout_backward(int64_t n, int64_t features, float p, uint64_t key, int64_t sample0,
                                   const float* dy, float* dx) {
  const float keep_scale = 1.0f / (1.0f - p);
  Kokkos::parallel_for("pt::dropout_backward", Range(0, n * features), [=](int64_t i) {
    const int64_t s = i / features, j = i % features;
    const bool keep = rng_uniform(key, static_cast<uint64_t>((sample0 + s) * features + j)) >= p;
    dx[i] = keep ? dy[i] * keep_scale : 0.0f;
  });
}

void HostBackend::softmax_xent_forward(int64_t n, int64_t classes, const float* logits, const int32_t* labels,
                                       float* loss, float* probs) {
  Kokkos::parallel_for("pt::softmax_xent_forward", Range(0, n), [=](int64_t i) {
    const float* l = logits + i * classes;
    float* pr = probs + i * classes;
    const float target = l[labels[i]];  // read first: probs may alias logits
    float mx = l[0];
    for (int64_t c = 1; c < classes; ++c) mx = l[c] > mx ? l[c] : mx;
    float s = 0.0f;
    for (int64_t c = 0; c < classes; ++c) {
      pr[c] = std::exp(l[c] - mx);
      s += pr[c];
    }
    const float inv = 1.0f / s;
    for (int64_t c = 0; c < classes; ++c) pr[c] *= inv;
    loss[i] = std::log(s) + mx - target;
  });
}
void HostBackend::softmax_xent_backward(int64_t n, int64_t classes, const float* probs, const int32_t* labels,
                                        float scale, float* dlogits) {
  Kokkos::parallel_for("pt::softmax_xent_backward", Range(0, n), [=](int64_t i) {
    const float* pr = probs + i * classes;
    float* d = dlogits + i * classes;
    for (int64_t c = 0; c < classes; ++c) d[c] = scale * pr[c];
    d[labels[i]] -= scale;
  });
}
void HostBackend::softmax_xent_shard_max(int64_t n, int64_t classes, const float* logits, float* mx) {
  Kokkos::parallel_for("pt::softmax_xent_shard_max", Range(0, n), [=](int64_t i) {
    const float* l = logits + i * classes;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c < classes; ++c) m = l[c] > m ? l[c] : m;
    mx[i] = m;
  });
}
void HostBackend::softmax_xent_shard_sums(int64_t n, int64_t classes, int64_t c0, const float* logits,
                                          const int32_t* labels, const float* mx, float* sums) {
  Kokkos::parallel_for("pt::softmax_xent_shard_sums", Range(0, n), [=](int64_t i) {
    const float* l = logits + i * classes;
    float s = 0.0f;
    for (int64_t c = 0; c < classes; ++c) s += std::exp(l[c] - mx[i]);
    const int64_t k = labels[i] - c0;
    sums[i] = s;
    sums[n + i] = k >= 0 && k < classes ? l[k] : 0.0f;
  });
}
void HostBackend::softmax_xent_shard_finish(int64_t n, int64_t classes, const float* logits, const float* mx,
                                            const float* sums, float* loss, float* probs) {
  Kokkos::parallel_for("pt::softmax_xent_shard_finish", Range(0, n), [=](int64_t i) {
    const float* l = logits + i * classes;
    float* pr = probs + i * classes;
    const float inv = 1.0f / sums[i];
    for (int64_t c = 0; c < classes; ++c) pr[c] = std::exp(l[c] - mx[i]) * inv;
    loss[i] = std::log(sums[i]) + mx[i] - sums[n + i];
  });
}
void HostBackend::softmax_xent_shard_backward(int64_t n, int64_t classes, int64_t c0, const float* probs,
                                              const int32_t* labels, float scale, float* dlogits) {
  Kokkos::parallel_for("pt::softmax_xent_shard_backward", Range(0, n), [=](int64_t i) {
    const float* pr = probs + i * classes;
    float* d = dlogits + i * classes;
    for (int64_t c = 0; c < classes; ++c) d[c] = scale * pr[c];
    const int64_t k = labels[i] - c0;
    if (k >= 0 && k < classes) d[k] -= scale;
  });
}
int64_t HostBackend::count_correct(int64_t n, int64_t classes, const float* logits, const int32_t* labels) {
  int64_t correct = 0;
  Kokkos::parallel_reduce(
      "pt::count_correct", Range(0, n),
      [=](int64_t i, int64_t& acc) {
        const float* l = logits + i * classes;
        int64_t best = 0;
        for (int64_t c = 1; c < classes; ++c)
          if (l[c] > l[best]) best = c;
        acc += best == labels[i] ? 1 : 0;
      },
      correct);
  return correct;
}

double HostBackend::sum(size_t n, const float* x) {
  double s = 0;
  Kokkos::parallel_reduce("pt::sum", Range(0, n), [=](size_t i, double& acc) { acc += x[i]; }, s);
  return s;
}
double HostBackend::sum_squares(size_t n, const float* x) { return host::sum_squares(x, static_cast<int64_t>(n)); }

// The largest |x| bit pattern: above the largest finite float's is an infinity or a NaN
// (an integer max vectorises; isfinite in a reduction does not).
bool HostBackend::all_finite(size_t n, const float* x) {
  uint32_t worst = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, x + i, sizeof u);
    worst = std::max(worst, u & 0x7fffffffu);
  }
  return worst < 0x7f800000u;
}

void HostBackend::sgd_update(size_t n, float* w, const float* g, float* buf, float lr, float momentum,
                             float weight_decay, bool nesterov, float grad_scale) {
  Kokkos::parallel_for("pt::sgd_update", Range(0, n), [=](size_t i) {
    float d = g[i] * grad_scale;
    if (weight_decay != 0.0f) d += weight_decay * w[i];
    if (momentum != 0.0f) {
      buf[i] = momentum * buf[i] + d;
      d = nesterov ? d + momentum * buf[i] : buf[i];
    }
    w[i] -= lr * d;
  });
}

void HostBackend::adamw_update(size_t n, float* w, const float* g, float* m, float* v, double lr, double beta1,
                               double beta2, double eps, double weight_decay, int64_t step, float grad_scale) {
  const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(step));
  const float step_size = static_cast<float>(lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float decay = static_cast<float>(1.0 - lr * weight_decay);
  const float b1 = static_cast<float>(beta1), b2 = static_cast<float>(beta2);
  const float c1 = static_cast<float>(1.0 - beta1), c2 = static_cast<float>(1.0 - beta2), e = static_cast<float>(eps);
  Kokkos::parallel_for("pt::adamw_update", Range(0, n), [=](size_t i) {
    const float gi = g[i] * grad_scale;
    w[i] *= decay;
    m[i] = b1 * m[i] + c1 * gi;
    v[i] = b2 * v[i] + c2 * gi * gi;
    const float denom = std::sqrt(v[i]) / bc2_sqrt + e;
    w[i] -= step_size * (m[i] / denom);
  });
}

}  // namespace pt::host
