// Max and average pooling over square windows.
#include "layer_types.hpp"

namespace pt::layers {

Pool2d::Pool2d(const LayerSpec& s, Shape in) : Layer(s, in), max_(s.type == "maxpool2d") {
  g_.c_in = g_.c_out = in.c();
  g_.h_in = in.h();
  g_.w_in = in.w();
  g_.kernel = s.kernel;
  g_.stride = s.stride;
  g_.padding = s.padding;
  const int64_t hp = in.h() + 2 * s.padding, wp = in.w() + 2 * s.padding;
  if (s.kernel > hp || s.kernel > wp)
    shape_error("kernel " + std::to_string(s.kernel) + " does not fit the input " + in.str());
  g_.h_out = (hp - s.kernel) / s.stride + 1;
  g_.w_out = (wp - s.kernel) / s.stride + 1;
  out_ = Shape::chw(g_.c_out, g_.h_out, g_.w_out);
}

void Pool2d::forward(const LayerCtx& c, const float*, const float* x, float* y, float* aux, int64_t n) const {
  if (max_) c.be.maxpool_forward(g_, n, x, y, reinterpret_cast<int32_t*>(aux));
  else c.be.avgpool_forward(g_, n, x, y);
}

void Pool2d::backward(const LayerCtx& c, const float*, const float* x, const float* y, const float* dy, float* dx,
                      float*, const float* aux, int64_t n) const {
  if (!dx) return;
  if (max_) c.be.maxpool_backward(g_, n, dy, reinterpret_cast<const int32_t*>(aux), dx);
  else c.be.avgpool_backward(g_, n, x, y, dy, dx);
}

double Pool2d::flops_forward() const { return static_cast<double>(out_.numel()) * g_.kernel * g_.kernel; }

}  // namespace pt::layers
