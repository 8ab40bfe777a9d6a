// Global average pooling: [C, H, W] -> [C], the mean of each channel over H and W (the
// ResNet head before its linear classifier). No parameters.
#include "layer_util.hpp"

namespace pt::layers {
namespace {

class GlobalAvgPool final : public Layer {
 public:
  GlobalAvgPool(const LayerSpec& s, Shape in) : Layer(s, in) { out_ = Shape::vec(in.c()); }
  void forward(const LayerCtx& c, ParamView, const float* x, float* y, float*, int64_t n) const override {
    c.be.mean_rows(n * in_.c(), in_.h() * in_.w(), x, y);
  }
  void backward(const LayerCtx& c, ParamView, const float*, const float*, const float* dy, float* dx, float*,
                const float*, int64_t n) const override {
    if (dx) c.be.mean_rows_backward(n * in_.c(), in_.h() * in_.w(), dy, dx);
  }
  double flops_forward() const override { return static_cast<double>(in_.numel()); }
  double flops_backward() const override { return static_cast<double>(in_.numel()); }
};

LayerType global_avgpool_type() {
  LayerType t;
  t.name = "global_avgpool";
  t.doc = "mean of each channel over H and W: [C, H, W] -> [C]";
  t.pytorch = "torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())";
  t.make = [](const LayerSpec& s, const Shape& in, const std::string& prev) -> std::unique_ptr<Layer> {
    require_input(s, in, 3, "an image [C, H, W]", prev);
    return std::make_unique<GlobalAvgPool>(s, in);
  };
  return t;
}

}  // namespace

PT_REGISTER_LAYER(global_avgpool, global_avgpool_type())

}  // namespace pt::layers
