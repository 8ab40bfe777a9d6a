// Host batch normalisation over image batches, per channel: statistics in double over
// (n, H, W) in a fixed order (samples in turn, positions on the fixed lanes of vec_math.hpp:
// position p on lane p % 16), rounded once to float; running statistics with PyTorch's
// momentum rule and unbiased variance. Every pass streams the batch in memory order. In NCHW
// a channel's plane is one run; in the channel-minor layouts (nChw16c, NHWC: ImageLayout) a
// position's 16 channels of a group are one vector, each with its own 16 lanes, so every
// channel's sums add the same values in the same order: the same bits in every layout. The
// backward's per-channel sums are
// the same in the dx-only and the dgamma/dbeta-only calls, so the split halves are bitwise
// the full call. The fused forward (HostFused::batchnorm_forward) adds a residual and applies
// ReLU in the normalisation's pass over y.
#include <cmath>
#include <cstring>
#include <vector>

#include "host_backend.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/views.hpp"
#include "vec_math.hpp"

namespace pt::host {
namespace {

struct Lanes {
  double v[kLanes];
};

// A channel-minor batch (ImageLayout nchw16c or nhwc): each(f) calls f(j, off, p) in memory
// order for every position p of every group j of 16 channels of every sample (samples in
// turn), off the offset of its 16 values.
struct C16Walk {
  int64_t n, C, HW, step;
  C16Walk(int64_t n_, int64_t C_, int64_t HW_, ImageLayout l) : n(n_), C(C_), HW(HW_), step(layout_step(l, C_)) {
    PT_CHECK(C % 16 == 0 && step > 0, "batch norm: a channel-minor layout needs C % 16 == 0 (C " << C << ")");
  }
  template <class F>
  void each(F f) const {
    const int64_t G = C / 16, per = step / 16;
    for (int64_t r = 0; r < n * G / per; ++r)
      for (int64_t p = 0; p < HW; ++p)
        for (int64_t jj = 0; jj < per; ++jj) f((r * per + jj) % G, r * per * 16 * HW + p * step + 16 * jj, p);
  }
};

// 8 doubles (one AVX-512 register), at any double's address; a channel group's 16 values
// widen to two of them, so its sums vectorize (the same operations per element as the NCHW
// loops, in the same order per lane).
typedef double vec8d __attribute__((vector_size(64), aligned(8)));
typedef float vec8f __attribute__((vector_size(32), aligned(4)));
inline vec8d widen(const float* p) { return __builtin_convertvector(*reinterpret_cast<const vec8f*>(p), vec8d); }
inline void add8(double* a, vec8d v) { *reinterpret_cast<vec8d*>(a) += v; }
inline vec8d load8(const double* p) { return *reinterpret_cast<const vec8d*>(p); }

// Per-channel lanes of a channel-minor batch: acc[(j 16 + lane) 16 + ch] for channel 16 j + ch.
struct C16Sums {
  std::vector<double> acc;
  explicit C16Sums(int64_t C) : acc(static_cast<size_t>(C * kLanes), 0.0) {}
  double* at(int64_t j, int64_t p) { return acc.data() + (j * kLanes + p % kLanes) * 16; }
  double total(int64_t c) const {  // lanes in order, as lane_total
    double s = 0;
    for (int l = 0; l < kLanes; ++l) s += acc[static_cast<size_t>(((c / 16) * kLanes + l) * 16 + c % 16)];
    return s;
  }
};

// Per-channel sums over (n, HW), streamed in memory order (sample, channel, position):
// channel c's sum adds its samples in turn, positions on its own lanes, so the result is
// the same as a channel-at-a-time loop. f(c, i) is the value at flat index i of channel c.
template <class F>
std::vector<Lanes> channel_sums(int64_t n, int64_t C, int64_t HW, F f) {
  std::vector<Lanes> acc(static_cast<size_t>(C), Lanes{});
  for (int64_t s = 0; s < n; ++s)
    for (int64_t c = 0; c < C; ++c) {
      const int64_t base = (s * C + c) * HW;
      lane_add(acc[static_cast<size_t>(c)].v, HW, [&](int64_t k) { return f(c, base + k); });
    }
  return acc;
}

// y = (x - mean) invstd gamma + beta per channel, then + add (ADD), then ReLU (RELU), in one
// pass; the float operations of the separate passes in the same order.
template <bool ADD, bool RELU>
void normalise(int64_t n, int64_t C, int64_t HW, const float* x, const float* mean, const float* invstd,
               const float* gamma, const float* beta, float* y, const float* add) {
  for (int64_t sc = 0; sc < n * C; ++sc) {
    const int64_t c = sc % C;
    const float m = mean[c], rstd = invstd[c], g = gamma[c], b = beta[c];
    const float* xs = x + sc * HW;
    const float* as = ADD ? add + sc * HW : nullptr;
    float* ys = y + sc * HW;
    for (int64_t k = 0; k < HW; ++k) {
      float v = (xs[k] - m) * rstd * g + b;
      if (ADD) v += as[k];
      if (RELU) v = v > 0.0f ? v : 0.0f;
      ys[k] = v;
    }
  }
}

// The same in a channel-minor layout: 16 channels of one position at a time (bn_normalised16),
// y and add fp32 or bf16 (NCHW: fp32 only).
template <bool ADD, bool RELU>
void normalise_in(int64_t n, int64_t C, int64_t HW, ImageLayout l, const float* x, const float* mean,
                  const float* invstd, const float* gamma, const float* beta, View y, CView add) {
  if (l == ImageLayout::nchw) {
    PT_CHECK(!y.bf16() && !add.bf16(), "batch norm: a bf16 y or add in NCHW");
    return normalise<ADD, RELU>(n, C, HW, x, mean, invstd, gamma, beta, y.data, add.data);
  }
  const BnNorm bn{C, mean, invstd, gamma, beta};
  const CView none{static_cast<const float*>(nullptr)};
  C16Walk(n, C, HW, l).each([&](int64_t j, int64_t off, int64_t) {
    store_view(y, off, bn_normalised16(bn, 16 * j, load(x + off), ADD ? add : none, off, RELU));
  });
}

void normalise_out(int64_t n, int64_t C, int64_t HW, ImageLayout l, const float* x, const float* mean,
                   const float* invstd, const float* gamma, const float* beta, View y, CView add, bool relu) {
  if (add.data && relu) return normalise_in<true, true>(n, C, HW, l, x, mean, invstd, gamma, beta, y, add);
  if (add.data) return normalise_in<true, false>(n, C, HW, l, x, mean, invstd, gamma, beta, y, add);
  if (relu) return normalise_in<false, true>(n, C, HW, l, x, mean, invstd, gamma, beta, y, add);
  normalise_in<false, false>(n, C, HW, l, x, mean, invstd, gamma, beta, y, add);
}

// The batch's mean and 1/std per channel (double sums, rounded once), and the running
// statistics' update when they are given.
// The sum over (n, HW) of each channel's x (double, the lanes above) and then of its
// (x - mean)^2, in NCHW or a channel-minor layout.
void moments(int64_t n, int64_t C, int64_t HW, ImageLayout l, const float* x, double* mean, double* sq) {
  const double count = static_cast<double>(n * HW);
  if (l == ImageLayout::nchw) {
    const std::vector<Lanes> s1 = channel_sums(n, C, HW, [&](int64_t, int64_t i) { return x[i]; });
    for (int64_t c = 0; c < C; ++c) mean[c] = lane_total(s1[static_cast<size_t>(c)].v) / count;
    const std::vector<Lanes> s2 = channel_sums(n, C, HW, [&](int64_t c, int64_t i) {
      const double d = x[i] - mean[c];
      return d * d;
    });
    for (int64_t c = 0; c < C; ++c) sq[c] = lane_total(s2[static_cast<size_t>(c)].v);
    return;
  }
  const C16Walk walk(n, C, HW, l);
  C16Sums s1(C), s2(C);
  walk.each([&](int64_t j, int64_t off, int64_t p) {
    double* a = s1.at(j, p);
    add8(a, widen(x + off));
    add8(a + 8, widen(x + off + 8));
  });
  for (int64_t c = 0; c < C; ++c) mean[c] = s1.total(c) / count;
  walk.each([&](int64_t j, int64_t off, int64_t p) {
    double* a = s2.at(j, p);
    for (int h = 0; h < 2; ++h) {
      const vec8d d = widen(x + off + 8 * h) - load8(mean + 16 * j + 8 * h);
      add8(a + 8 * h, d * d);
    }
  });
  for (int64_t c = 0; c < C; ++c) sq[c] = s2.total(c);
}

void batch_statistics(int64_t n, int64_t C, int64_t HW, ImageLayout l, float eps, float momentum, const float* x,
                      float* save_mean, float* save_invstd, float* running_mean, float* running_var) {
  const double count = static_cast<double>(n * HW);
  std::vector<double> mean(static_cast<size_t>(C)), sq(static_cast<size_t>(C));
  moments(n, C, HW, l, x, mean.data(), sq.data());
  for (int64_t c = 0; c < C; ++c) {
    const double mu = mean[static_cast<size_t>(c)], var = sq[static_cast<size_t>(c)] / count;
    save_mean[c] = static_cast<float>(mu);
    save_invstd[c] = static_cast<float>(1.0 / std::sqrt(var + eps));
    if (!running_mean) continue;
    const double unbiased = count > 1 ? var * count / (count - 1) : var;
    running_mean[c] = static_cast<float>((1.0 - momentum) * running_mean[c] + momentum * mu);
    running_var[c] = static_cast<float>((1.0 - momentum) * running_var[c] + momentum * unbiased);
  }
}

// normalise_out, or with y in NCHW (BnArgs::y_nchw) the move out in the same pass.
void normalise_to(const FusedKernels::BnArgs& a, const float* x, const float* mean, const float* invstd, View y,
                  CView add, bool relu) {
  if (!a.y_nchw || a.layout == ImageLayout::nchw)
    return normalise_out(a.n, a.C, a.HW, a.layout, x, mean, invstd, a.gamma, a.beta, y, add, relu);
  PT_CHECK(!y.bf16(), "batch norm: a bf16 y written to NCHW (y_nchw)");
  normalise_c16_to_nchw(a.n * a.C / 16, a.HW, layout_step(a.layout, a.C), BnNorm{a.C, mean, invstd, a.gamma, a.beta},
                        x, add, relu, y.data);
}

void bn_training(const FusedKernels::BnArgs& a, const float* x, View y, CView add, bool relu) {
  Kokkos::parallel_for("pt::batchnorm_forward_training", Range(0, 1), [=](int) {
    batch_statistics(a.n, a.C, a.HW, a.layout, a.eps, a.momentum, x, a.save_mean, a.save_invstd, a.running_mean,
                     a.running_var);
    normalise_to(a, x, a.save_mean, a.save_invstd, y, add, relu);
  });
}

void bn_inference(const FusedKernels::BnArgs& a, const float* x, View y, CView add, bool relu) {
  Kokkos::parallel_for("pt::batchnorm_forward_inference", Range(0, 1), [=](int) {
    std::vector<float> invstd(static_cast<size_t>(a.C));
    for (int64_t c = 0; c < a.C; ++c) invstd[static_cast<size_t>(c)] = 1.0f / std::sqrt(a.running_var[c] + a.eps);
    normalise_to(a, x, a.running_mean, invstd.data(), y, add, relu);
  });
}

}  // namespace

void HostBackend::batchnorm_forward_training(int64_t n, int64_t C, int64_t HW, float eps, float momentum,
                                             const float* x, const float* gamma, const float* beta, float* y,
                                             float* save_mean, float* save_invstd, float* running_mean,
                                             float* running_var, ImageLayout layout) {
  bn_training({n, C, HW, eps, momentum, gamma, beta, save_mean, save_invstd, running_mean, running_var, layout}, x, y,
              nullptr, false);
}

void HostBackend::batchnorm_forward_inference(int64_t n, int64_t C, int64_t HW, float eps, const float* x,
                                              const float* gamma, const float* beta, const float* running_mean,
                                              const float* running_var, float* y, ImageLayout layout) {
  bn_inference({n, C, HW, eps, 0.0f, gamma, beta, nullptr, nullptr, const_cast<float*>(running_mean),
                const_cast<float*>(running_var), layout},
               x, y, nullptr, false);
}

void HostFused::batchnorm_forward(bool training, const BnArgs& a, const float* x, View y, CView add, bool relu) {
  if (training) return bn_training(a, x, y, add, relu);
  PT_CHECK(a.running_mean && a.running_var, "batch norm inference without running statistics");
  bn_inference(a, x, y, add, relu);
}

namespace {

// The channel sums of dy and dy xhat (double, the lanes above) for the backward.
void backward_sums(int64_t n, int64_t C, int64_t HW, ImageLayout l, const float* x, const float* save_mean,
                   const float* save_invstd, const float* dy, double* sum_dy, double* sum_dy_xhat) {
  if (l == ImageLayout::nchw) {
    std::vector<Lanes> sdy(static_cast<size_t>(C), Lanes{}), sdx(static_cast<size_t>(C), Lanes{});
    for (int64_t sc = 0; sc < n * C; ++sc) {
      const int64_t c = sc % C;
      const float m = save_mean[c], rstd = save_invstd[c];
      const float* xs = x + sc * HW;
      const float* ds = dy + sc * HW;
      lane_add2(sdy[static_cast<size_t>(c)].v, sdx[static_cast<size_t>(c)].v, HW, [&](int64_t k) { return ds[k]; },
                [&](int64_t k) { return ds[k] * ((xs[k] - m) * rstd); });
    }
    for (int64_t c = 0; c < C; ++c) {
      sum_dy[c] = lane_total(sdy[static_cast<size_t>(c)].v);
      sum_dy_xhat[c] = lane_total(sdx[static_cast<size_t>(c)].v);
    }
    return;
  }
  C16Sums sdy(C), sdx(C);
  C16Walk(n, C, HW, l).each([&](int64_t j, int64_t off, int64_t p) {
    const vec16 prod = load(dy + off) * ((load(x + off) - load(save_mean + 16 * j)) * load(save_invstd + 16 * j));
    alignas(64) float t[16];
    store(t, prod);
    double *a = sdy.at(j, p), *b = sdx.at(j, p);
    for (int h = 0; h < 2; ++h) {
      add8(a + 8 * h, widen(dy + off + 8 * h));
      add8(b + 8 * h, widen(t + 8 * h));
    }
  });
  for (int64_t c = 0; c < C; ++c) sum_dy[c] = sdy.total(c), sum_dy_xhat[c] = sdx.total(c);
}

// dx = gamma invstd (dy - a - xhat b) per channel, a and b the sums over the count; a bf16
// dx gets each value's bf16_bits (bf16_half16: the same bits) in the same pass.
void backward_dx(int64_t n, int64_t C, int64_t HW, ImageLayout l, const float* x, const float* gamma,
                 const float* save_mean, const float* save_invstd, const float* a, const float* b, const float* dy,
                 View dx) {
  uint16_t* dxb = dx.bf16() ? reinterpret_cast<uint16_t*>(dx.data) : nullptr;
  if (l != ImageLayout::nchw)
    return C16Walk(n, C, HW, l).each([&](int64_t j, int64_t off, int64_t) {
      const int64_t c = 16 * j;
      const vec16 rstd = load(save_invstd + c), k = load(gamma + c) * rstd;
      const vec16 xhat = (load(x + off) - load(save_mean + c)) * rstd;
      store_view(dx, off, k * (load(dy + off) - load(a + c) - xhat * load(b + c)));
    });
  for (int64_t sc = 0; sc < n * C; ++sc) {
    const int64_t c = sc % C;
    const float m = save_mean[c], rstd = save_invstd[c], k = gamma[c] * rstd, ac = a[c], bc = b[c];
    auto v = [&](int64_t i) { return k * (dy[i] - ac - (x[i] - m) * rstd * bc); };
    if (dxb)
      for (int64_t i = sc * HW; i < (sc + 1) * HW; ++i) dxb[i] = bf16_bits(v(i));
    else
      for (int64_t i = sc * HW; i < (sc + 1) * HW; ++i) dx.data[i] = v(i);
  }
}

}  // namespace

// One pass for both channel sums (dy, dy xhat), then one for dx.
void HostBackend::batchnorm_backward(int64_t n, int64_t C, int64_t HW, float, const float* x, const float* gamma,
                                     const float* save_mean, const float* save_invstd, const float* dy, View dx,
                                     float* dgamma, float* dbeta, ImageLayout layout) {
  const double count = static_cast<double>(n * HW);
  Kokkos::parallel_for("pt::batchnorm_backward", Range(0, 1), [=](int) {
    std::vector<double> sdy(static_cast<size_t>(C)), sdx(static_cast<size_t>(C));
    backward_sums(n, C, HW, layout, x, save_mean, save_invstd, dy, sdy.data(), sdx.data());
    std::vector<float> a(static_cast<size_t>(C)), b(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) {
      const double sum_dy = sdy[static_cast<size_t>(c)], sum_dy_xhat = sdx[static_cast<size_t>(c)];
      if (dgamma) {
        dgamma[c] += static_cast<float>(sum_dy_xhat);
        dbeta[c] += static_cast<float>(sum_dy);
      }
      a[static_cast<size_t>(c)] = static_cast<float>(sum_dy / count);
      b[static_cast<size_t>(c)] = static_cast<float>(sum_dy_xhat / count);
    }
    if (dx.data) backward_dx(n, C, HW, layout, x, gamma, save_mean, save_invstd, a.data(), b.data(), dy, dx);
  });
}

}  // namespace pt::host
