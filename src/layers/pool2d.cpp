// Max and average pooling over square windows (no parameters).
#include "layer_util.hpp"

namespace pt::layers {
namespace {

// stride 0 (unset) is the kernel; padding at most half the kernel
struct PoolSettings : WindowSettings {
  void finish() override {
    if (stride == 0) stride = kernel;
  }
  std::pair<std::string, std::string> check() const override {
    if (padding * 2 <= kernel) return {"", ""};
    return {"padding", "must be at most half the kernel, kernel / 2 = " + std::to_string(kernel / 2) + " (kernel = " +
                           std::to_string(kernel) + "), got " + std::to_string(padding)};
  }
};

class Pool2d final : public Layer {
 public:
  Pool2d(const LayerSpec& s, Shape in, bool max)
      : Layer(s, in), g_(window_geom(s, s.settings_as<PoolSettings>(), in, 0)), max_(max) {
    out_ = Shape::chw(g_.c_out, g_.h_out, g_.w_out);
  }
  int64_t aux_per_sample() const override { return max_ ? out_.numel() : 0; }
  void forward(const LayerCtx& c, ParamView, const float* x, float* y, float* aux, int64_t n) const override {
    if (max_) c.be.maxpool_forward(g_, n, x, y, reinterpret_cast<int32_t*>(aux));
    else c.be.avgpool_forward(g_, n, x, y);
  }
  void backward(const LayerCtx& c, ParamView, const float* x, const float* y, const float* dy, float* dx, float*,
                const float* aux, int64_t n) const override {
    if (!dx) return;
    if (max_) c.be.maxpool_backward(g_, n, dy, reinterpret_cast<const int32_t*>(aux), dx);
    else c.be.avgpool_backward(g_, n, x, y, dy, dx);
  }
  double flops_forward() const override { return static_cast<double>(out_.numel()) * g_.kernel * g_.kernel; }

 private:
  WindowGeom g_;
  bool max_;
};

LayerType pool_type(const char* name, bool max, const char* doc, const char* pytorch, const char* padding_doc) {
  LayerType t;
  t.name = name;
  t.doc = doc;
  t.pytorch = pytorch;
  t.keys = layer_keys<PoolSettings>(window_keys<PoolSettings>("square window", 0, "stride (default = kernel)", padding_doc));
  t.make = [max](const LayerSpec& s, const Shape& in, const std::string& prev) -> std::unique_ptr<Layer> {
    require_input(s, in, 3, "an image [C, H, W]", prev);
    return std::make_unique<Pool2d>(s, in, max);
  };
  return t;
}

}  // namespace

PT_REGISTER_LAYER(maxpool2d, pool_type("maxpool2d", true, "max over square windows", "torch.nn.MaxPool2d(kernel, stride, padding)",
                                       "padding (default 0)"))
PT_REGISTER_LAYER(avgpool2d, pool_type("avgpool2d", false, "mean over square windows", "torch.nn.AvgPool2d(kernel, stride, padding)",
                                       "zero padding, counted in the average (default 0)"))

}  // namespace pt::layers
