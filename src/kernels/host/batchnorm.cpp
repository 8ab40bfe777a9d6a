// Host batch normalisation over NCHW batches, per channel: statistics in double over
// (n, H, W) in a fixed order (samples in turn, positions on the fixed lanes of vec_math.hpp),
// rounded once to float; running statistics with PyTorch's momentum rule and unbiased
// variance. Every pass streams the batch in memory order. The backward's per-channel sums are
// the same in the dx-only and the dgamma/dbeta-only calls, so the split halves are bitwise
// the full call. The fused forward (HostFused::batchnorm_forward) adds a residual and applies
// ReLU in the normalisation's pass over y.
#include <cmath>
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

void normalise_out(int64_t n, int64_t C, int64_t HW, const float* x, const float* mean, const float* invstd,
                   const float* gamma, const float* beta, float* y, const float* add, bool relu) {
  if (add && relu) return normalise<true, true>(n, C, HW, x, mean, invstd, gamma, beta, y, add);
  if (add) return normalise<true, false>(n, C, HW, x, mean, invstd, gamma, beta, y, add);
  if (relu) return normalise<false, true>(n, C, HW, x, mean, invstd, gamma, beta, y, add);
  normalise<false, false>(n, C, HW, x, mean, invstd, gamma, beta, y, add);
}

// The batch's mean and 1/std per channel (double sums, rounded once), and the running
// statistics' update when they are given.
void batch_statistics(int64_t n, int64_t C, int64_t HW, float eps, float momentum, const float* x, float* save_mean,
                      float* save_invstd, float* running_mean, float* running_var) {
  const double count = static_cast<double>(n * HW);
  const std::vector<Lanes> s1 = channel_sums(n, C, HW, [&](int64_t, int64_t i) { return x[i]; });
  std::vector<double> mean(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) mean[static_cast<size_t>(c)] = lane_total(s1[static_cast<size_t>(c)].v) / count;
  const std::vector<Lanes> s2 = channel_sums(n, C, HW, [&](int64_t c, int64_t i) {
    const double d = x[i] - mean[static_cast<size_t>(c)];
    return d * d;
  });
  for (int64_t c = 0; c < C; ++c) {
    const double mu = mean[static_cast<size_t>(c)], var = lane_total(s2[static_cast<size_t>(c)].v) / count;
    save_mean[c] = static_cast<float>(mu);
    save_invstd[c] = static_cast<float>(1.0 / std::sqrt(var + eps));
    if (!running_mean) continue;
    const double unbiased = count > 1 ? var * count / (count - 1) : var;
    running_mean[c] = static_cast<float>((1.0 - momentum) * running_mean[c] + momentum * mu);
    running_var[c] = static_cast<float>((1.0 - momentum) * running_var[c] + momentum * unbiased);
  }
}

void bn_training(const FusedKernels::BnArgs& a, const float* x, float* y, const float* add, bool relu) {
  Kokkos::parallel_for("pt::batchnorm_forward_training", Range(0, 1), [=](int) {
    batch_statistics(a.n, a.C, a.HW, a.eps, a.momentum, x, a.save_mean, a.save_invstd, a.running_mean, a.running_var);
    normalise_out(a.n, a.C, a.HW, x, a.save_mean, a.save_invstd, a.gamma, a.beta, y, add, relu);
  });
}

void bn_inference(const FusedKernels::BnArgs& a, const float* x, float* y, const float* add, bool relu) {
  Kokkos::parallel_for("pt::batchnorm_forward_inference", Range(0, 1), [=](int) {
    std::vector<float> invstd(static_cast<size_t>(a.C));
    for (int64_t c = 0; c < a.C; ++c) invstd[static_cast<size_t>(c)] = 1.0f / std::sqrt(a.running_var[c] + a.eps);
    normalise_out(a.n, a.C, a.HW, x, a.running_mean, invstd.data(), a.gamma, a.beta, y, add, relu);
  });
}

}  // namespace

void HostBackend::batchnorm_forward_training(int64_t n, int64_t C, int64_t HW, float eps, float momentum,
                                             const float* x, const float* gamma, const float* beta, float* y,
                                             float* save_mean, float* save_invstd, float* running_mean,
                                             float* running_var) {
  bn_training({n, C, HW, eps, momentum, gamma, beta, save_mean, save_invstd, running_mean, running_var}, x, y, nullptr,
              false);
}

void HostBackend::batchnorm_forward_inference(int64_t n, int64_t C, int64_t HW, float eps, const float* x,
                                              const float* gamma, const float* beta, const float* running_mean,
                                              const float* running_var, float* y) {
  bn_inference({n, C, HW, eps, 0.0f, gamma, beta, nullptr, nullptr, const_cast<float*>(running_mean),
                const_cast<float*>(running_var)},
               x, y, nullptr, false);
}

void HostFused::batchnorm_forward(bool training, const BnArgs& a, const float* x, float* y, const float* add,
                                  bool relu) {
  if (training) return bn_training(a, x, y, add, relu);
  PT_CHECK(a.running_mean && a.running_var, "batch norm inference without running statistics");
  bn_inference(a, x, y, add, relu);
}

// One pass for both channel sums (dy, dy xhat), then one for dx.
void HostBackend::batchnorm_backward(int64_t n, int64_t C, int64_t HW, float, const float* x, const float* gamma,
                                     const float* save_mean, const float* save_invstd, const float* dy, float* dx,
                                     float* dgamma, float* dbeta) {
  const double count = static_cast<double>(n * HW);
  Kokkos::parallel_for("pt::batchnorm_backward", Range(0, 1), [=](int) {
    std::vector<Lanes> sdy(static_cast<size_t>(C), Lanes{}), sdx(static_cast<size_t>(C), Lanes{});
    for (int64_t sc = 0; sc < n * C; ++sc) {
      const int64_t c = sc % C;
      const float m = save_mean[c], rstd = save_invstd[c];
      const float* xs = x + sc * HW;
      const float* ds = dy + sc * HW;
      lane_add2(sdy[static_cast<size_t>(c)].v, sdx[static_cast<size_t>(c)].v, HW, [&](int64_t k) { return ds[k]; },
                [&](int64_t k) { return ds[k] * ((xs[k] - m) * rstd); });
    }
    std::vector<float> a(static_cast<size_t>(C)), b(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) {
      const double sum_dy = lane_total(sdy[static_cast<size_t>(c)].v), sum_dy_xhat = lane_total(sdx[static_cast<size_t>(c)].v);
      if (dgamma) {
        dgamma[c] += static_cast<float>(sum_dy_xhat);
        dbeta[c] += static_cast<float>(sum_dy);
      }
      a[static_cast<size_t>(c)] = static_cast<float>(sum_dy / count);
      b[static_cast<size_t>(c)] = static_cast<float>(sum_dy_xhat / count);
    }
    if (!dx) return;
    for (int64_t sc = 0; sc < n * C; ++sc) {
      const int64_t c = sc % C;
      const float m = save_mean[c], rstd = save_invstd[c], k = gamma[c] * rstd;
      const float ac = a[static_cast<size_t>(c)], bc = b[static_cast<size_t>(c)];
      for (int64_t j = 0; j < HW; ++j) {
        const float xhat = (x[sc * HW + j] - m) * rstd;
        dx[sc * HW + j] = k * (dy[sc * HW + j] - ac - xhat * bc);
      }
    }
  });
}

}  // namespace pt::host
