// Host batch normalisation over NCHW batches, per channel: statistics in double over
// (n, H, W) in a fixed order, rounded once to float; running statistics with PyTorch's
// momentum rule and unbiased variance. The backward's per-channel sums are the same in
// the dx-only and the dgamma/dbeta-only calls, so the split halves are bitwise the full call.
#include <cmath>

#include "host_backend.hpp"
#include "pipetrain/views.hpp"

namespace pt::host {
namespace {

// sum over (n, HW) of f(value index) for channel c, in sample then position order
template <class F>
double channel_sum(int64_t n, int64_t C, int64_t HW, int64_t c, F f) {
  double acc = 0;
  for (int64_t s = 0; s < n; ++s) {
    const int64_t base = (s * C + c) * HW;
    for (int64_t k = 0; k < HW; ++k) acc += f(base + k);
  }
  return acc;
}

}  // namespace

void HostBackend::batchnorm_forward_training(int64_t n, int64_t C, int64_t HW, float eps, float momentum,
                                             const float* x, const float* gamma, const float* beta, float* y,
                                             float* save_mean, float* save_invstd, float* running_mean,
                                             float* running_var) {
  const double count = static_cast<double>(n * HW);
  Kokkos::parallel_for("pt::batchnorm_forward_training", Range(0, C), [=](int64_t c) {
    const double mean = channel_sum(n, C, HW, c, [&](int64_t i) { return static_cast<double>(x[i]); }) / count;
    const double var = channel_sum(n, C, HW, c, [&](int64_t i) { return (x[i] - mean) * (x[i] - mean); }) / count;
    const float m = static_cast<float>(mean), rstd = static_cast<float>(1.0 / std::sqrt(var + eps));
    const float g = gamma[c], b = beta[c];
    for (int64_t s = 0; s < n; ++s) {
      const int64_t base = (s * C + c) * HW;
      for (int64_t k = 0; k < HW; ++k) y[base + k] = (x[base + k] - m) * rstd * g + b;
    }
    save_mean[c] = m;
    save_invstd[c] = rstd;
    if (running_mean) {
      const double unbiased = count > 1 ? var * count / (count - 1) : var;
      running_mean[c] = static_cast<float>((1.0 - momentum) * running_mean[c] + momentum * mean);
      running_var[c] = static_cast<float>((1.0 - momentum) * running_var[c] + momentum * unbiased);
    }
  });
}

void HostBackend::batchnorm_forward_inference(int64_t n, int64_t C, int64_t HW, float eps, const float* x,
                                              const float* gamma, const float* beta, const float* running_mean,
                                              const float* running_var, float* y) {
  Kokkos::parallel_for("pt::batchnorm_forward_inference", Range(0, n * C), [=](int64_t sc) {
    const int64_t c = sc % C;
    const float m = running_mean[c], rstd = 1.0f / std::sqrt(running_var[c] + eps), g = gamma[c], b = beta[c];
    for (int64_t k = 0; k < HW; ++k) y[sc * HW + k] = (x[sc * HW + k] - m) * rstd * g + b;
  });
}

void HostBackend::batchnorm_backward(int64_t n, int64_t C, int64_t HW, float, const float* x, const float* gamma,
                                     const float* save_mean, const float* save_invstd, const float* dy, float* dx,
                                     float* dgamma, float* dbeta) {
  const double count = static_cast<double>(n * HW);
  Kokkos::parallel_for("pt::batchnorm_backward", Range(0, C), [=](int64_t c) {
    const float m = save_mean[c], rstd = save_invstd[c];
    const double sum_dy = channel_sum(n, C, HW, c, [&](int64_t i) { return static_cast<double>(dy[i]); });
    const double sum_dy_xhat = channel_sum(n, C, HW, c, [&](int64_t i) { return static_cast<double>(dy[i] * ((x[i] - m) * rstd)); });
    if (dgamma) {
      dgamma[c] += static_cast<float>(sum_dy_xhat);
      dbeta[c] += static_cast<float>(sum_dy);
    }
    if (!dx) return;
    const float a = static_cast<float>(sum_dy / count), b = static_cast<float>(sum_dy_xhat / count);
    const float k = gamma[c] * rstd;
    for (int64_t s = 0; s < n; ++s) {
      const int64_t base = (s * C + c) * HW;
      for (int64_t j = 0; j < HW; ++j) {
        const float xhat = (x[base + j] - m) * rstd;
        dx[base + j] = k * (dy[base + j] - a - xhat * b);
      }
    }
  });
}

}  // namespace pt::host
