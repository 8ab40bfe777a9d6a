// 2-D convolution layer (square kernel, stride, zero padding), weights [out, in, k, k].
// Backward splits into the data gradient (dx) and the filter and bias gradients (dw, db).
#include <cmath>

#include "layer_util.hpp"

namespace pt::layers {
namespace {

struct Conv2dSettings : WindowSettings {
  int64_t channels = 0;
  bool bias = true;
};

class Conv2d final : public Layer {
 public:
  Conv2d(const LayerSpec& s, Shape in)
      : Layer(s, in), k_(s.settings_as<Conv2dSettings>()), g_(window_geom(s, k_, in, k_.channels)) {
    out_ = Shape::chw(g_.c_out, g_.h_out, g_.w_out);
  }

  std::vector<ParamTensor> params() const override {
    std::vector<ParamTensor> p = {{"weight", {g_.c_out, g_.c_in, g_.kernel, g_.kernel}, 0, wsz()}};
    if (k_.bias) p.push_back({"bias", {g_.c_out}, wsz(), g_.c_out});
    return p;
  }
  void init_params(float* host, uint64_t seed) const override {
    const float bound = 1.0f / std::sqrt(static_cast<float>(g_.c_in * g_.kernel * g_.kernel));
    int t = 0;
    for (auto& p : params()) init_uniform(host + p.offset, p.size, bound, seed, index(), t++);
  }
  void forward(const LayerCtx& c, ParamView w, const float* x, float* y, float*, int64_t n) const override {
    c.be.conv2d_forward(g_, n, x, w, k_.bias ? w + wsz() : nullptr, y, c.precision);
  }
  void backward(const LayerCtx& c, ParamView w, const float* x, const float*, const float* dy, float* dx, float* dw,
                const float*, int64_t n) const override {
    c.be.conv2d_backward(g_, n, x, w, dy, dx, dw, k_.bias ? dw + wsz() : nullptr, c.precision);
  }
  std::vector<ConvUse> convolutions() const override { return {{g_, k_.bias}}; }
  bool splits_backward() const override { return true; }
  void backward_input(const LayerCtx& c, ParamView w, const float* x, const float*, const float* dy, float* dx, float*,
                      float*, int64_t n) const override {
    if (dx) c.be.conv2d_backward(g_, n, x, w, dy, dx, nullptr, nullptr, c.precision);
  }
  void backward_weight(const LayerCtx& c, ParamView w, const float* x, const float*, const float* dy, float* dw,
                       const float*, int64_t n) const override {
    c.be.conv2d_backward(g_, n, x, w, dy, nullptr, dw, k_.bias ? dw + wsz() : nullptr, c.precision);
  }
  double flops_forward() const override { return 2.0 * g_.c_out * g_.h_out * g_.w_out * g_.c_in * g_.kernel * g_.kernel; }
  double flops_backward() const override { return 2.0 * flops_forward(); }

 private:
  int64_t wsz() const { return g_.c_out * g_.c_in * g_.kernel * g_.kernel; }
  Conv2dSettings k_;
  WindowGeom g_;
};

LayerType conv2d_type() {
  LayerType t;
  t.name = "conv2d";
  t.doc = "2-D convolution, square kernel, zero padding";
  t.pytorch = "torch.nn.Conv2d(in, channels, kernel, stride, padding, bias)";
  using S = Conv2dSettings;
  t.keys = layer_keys<S>(concat_keys<S>(
      concat_keys<S>({required_key("channels", &S::channels, key_gt(0), "output channels")},
                     window_keys<S>("square kernel size", 1, "stride (default 1)", "zero padding (default 0)")),
      {key("bias", &S::bias, true, "add a bias (default true)")}));
  t.make = [](const LayerSpec& s, const Shape& in, const std::string& prev) -> std::unique_ptr<Layer> {
    require_input(s, in, 3, "an image [C, H, W]", prev);
    return std::make_unique<Conv2d>(s, in);
  };
  return t;
}

}  // namespace

PT_REGISTER_LAYER(conv2d, conv2d_type())

}  // namespace pt::layers
