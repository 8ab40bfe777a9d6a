// 2-D convolution layer (square kernel, stride, zero padding), weights [out, in, k, k].
#include <cmath>

#include "layer_types.hpp"

namespace pt::layers {

Conv2d::Conv2d(const LayerSpec& s, Shape in) : Layer(s, in) {
  g_.c_in = in.c();
  g_.h_in = in.h();
  g_.w_in = in.w();
  g_.kernel = s.kernel;
  g_.stride = s.stride;
  g_.padding = s.padding;
  const int64_t hp = in.h() + 2 * s.padding, wp = in.w() + 2 * s.padding;
  if (s.kernel > hp || s.kernel > wp)
    shape_error("kernel " + std::to_string(s.kernel) + " does not fit the input " + in.str() + " with padding " +
                std::to_string(s.padding));
  g_.c_out = s.channels;
  g_.h_out = (hp - s.kernel) / s.stride + 1;
  g_.w_out = (wp - s.kernel) / s.stride + 1;
  out_ = Shape::chw(g_.c_out, g_.h_out, g_.w_out);
}

std::vector<ParamTensor> Conv2d::params() const {
  const int64_t wsz = g_.c_out * g_.c_in * g_.kernel * g_.kernel;
  std::vector<ParamTensor> p = {{"weight", {g_.c_out, g_.c_in, g_.kernel, g_.kernel}, 0, wsz}};
  if (spec_.bias) p.push_back({"bias", {g_.c_out}, wsz, g_.c_out});
  return p;
}

void Conv2d::init_params(float* host, uint64_t seed) const {
  const float bound = 1.0f / std::sqrt(static_cast<float>(g_.c_in * g_.kernel * g_.kernel));
  int t = 0;
  for (auto& p : params()) init_uniform(host + p.offset, p.size, bound, seed, index(), t++);
}

void Conv2d::forward(const LayerCtx& c, const float* w, const float* x, float* y, float*, int64_t n) const {
  const int64_t wsz = g_.c_out * g_.c_in * g_.kernel * g_.kernel;
  c.be.conv2d_forward(g_, n, x, w, spec_.bias ? w + wsz : nullptr, y);
}

void Conv2d::backward(const LayerCtx& c, const float* w, const float* x, const float*, const float* dy, float* dx,
                      float* dw, const float*, int64_t n) const {
  const int64_t wsz = g_.c_out * g_.c_in * g_.kernel * g_.kernel;
  c.be.conv2d_backward(g_, n, x, w, dy, dx, dw, spec_.bias ? dw + wsz : nullptr);
}

double Conv2d::flops_forward() const {
  return 2.0 * g_.c_out * g_.h_out * g_.w_out * g_.c_in * g_.kernel * g_.kernel;
}
double Conv2d::flops_backward() const { return 2.0 * flops_forward(); }

}  // namespace pt::layers
