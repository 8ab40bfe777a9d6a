// Batch normalisation of images per channel: in training, the statistics of the
// microbatch of this forward call (as PyTorch per forward call) normalise it and update
// the running mean and variance (momentum, unbiased variance) in the layer's state
// (LayerCtx::state: mean [C] then variance [C], not parameters); in evaluation the
// running statistics normalise. Parameters weight [C] (1) and bias [C] (0). Backward
// splits: dx (I) and dweight, dbias (W), both from the saved batch statistics.
#include "layer_util.hpp"

namespace pt::layers {

void ChannelNorm::init_state(float* host) const {
  init_constant(host, C, 0.0f);
  init_constant(host + C, C, 1.0f);
}

void ChannelNorm::forward(const LayerCtx& c, ParamView w, const float* x, View y, float* stats, float* state, int64_t n,
                          CView add, bool relu, bool y_nchw) const {
  PT_CHECK(c.training || state, "batch norm in evaluation without its running statistics (LayerCtx::state is null)");
  const FusedKernels::BnArgs a{n,     C,         HW, eps, momentum, w, w + C, stats, stats ? stats + C : nullptr,
                               state, state ? state + C : nullptr, layout, y_nchw};
  c.be.fused().batchnorm_forward(c.training, a, x, y, add, relu);
}

void ChannelNorm::backward_input(Backend& be, const float* w, const float* x, const float* stats, const float* dy,
                                 View dx, int64_t n) const {
  if (dx.data) backward(be, w, x, stats, dy, dx, nullptr, n);
}

void ChannelNorm::backward(Backend& be, const float* w, const float* x, const float* stats, const float* dy, View dx,
                           float* dw, int64_t n) const {
  be.batchnorm_backward(n, C, HW, eps, x, w, stats, stats + C, dy, dx, dw, dw ? dw + C : nullptr, layout);
}

void ChannelNorm::backward_weight(Backend& be, const float* w, const float* x, const float* stats, const float* dy,
                                  float* dw, int64_t n) const {
  backward(be, w, x, stats, dy, nullptr, dw, n);
}

namespace {

class BatchNorm2d final : public Layer {
 public:
  BatchNorm2d(const LayerSpec& s, Shape in)
      : Layer(s, in),
        bn_{in.c(), in.h() * in.w(), static_cast<float>(s.settings_as<BatchNormSettings>().eps),
            static_cast<float>(s.settings_as<BatchNormSettings>().momentum)} {}

  std::vector<ParamTensor> params() const override {
    return {{"weight", {bn_.C}, 0, bn_.C}, {"bias", {bn_.C}, bn_.C, bn_.C}};
  }
  void init_params(float* host, uint64_t) const override {
    init_constant(host, bn_.C, 1.0f);
    init_constant(host + bn_.C, bn_.C, 0.0f);
  }
  int64_t num_state() const override { return 2 * bn_.C; }
  void init_state(float* host) const override { bn_.init_state(host); }
  int64_t aux_per_sample() const override { return 2 * bn_.C; }  // the call's statistics (in its first 2 C floats)
  void forward(const LayerCtx& c, ParamView w, const float* x, float* y, float* aux, int64_t n) const override {
    bn_.forward(c, w, x, y, aux, c.state, n);
  }
  void backward(const LayerCtx& c, ParamView w, const float* x, const float*, const float* dy, float* dx, float* dw,
                const float* aux, int64_t n) const override {
    bn_.backward(c.be, w, x, aux, dy, dx, dw, n);
  }
  bool splits_backward() const override { return true; }
  void backward_input(const LayerCtx& c, ParamView w, const float* x, const float*, const float* dy, float* dx, float*,
                      float* aux, int64_t n) const override {
    bn_.backward_input(c.be, w, x, aux, dy, dx, n);
  }
  void backward_weight(const LayerCtx& c, ParamView w, const float* x, const float*, const float* dy, float* dw,
                       const float* aux, int64_t n) const override {
    bn_.backward_weight(c.be, w, x, aux, dy, dw, n);
  }
  double flops_forward() const override { return 8.0 * out_.numel(); }
  double flops_backward() const override { return 12.0 * out_.numel(); }

 private:
  ChannelNorm bn_;
};

LayerType batchnorm2d_type() {
  LayerType t;
  t.name = "batchnorm2d";
  t.doc = "batch normalisation per channel of [C, H, W]: microbatch statistics in training (running mean and unbiased "
          "variance updated), running statistics in evaluation";
  t.pytorch = "torch.nn.BatchNorm2d(C, eps, momentum) (running_mean, running_var are pipetrain's state)";
  t.keys = layer_keys<BatchNormSettings>(batchnorm_keys<BatchNormSettings>());
  t.make = [](const LayerSpec& s, const Shape& in, const std::string& prev) -> std::unique_ptr<Layer> {
    require_input(s, in, 3, "an image [C, H, W]", prev);
    return std::make_unique<BatchNorm2d>(s, in);
  };
  return t;
}

}  // namespace

PT_REGISTER_LAYER(batchnorm2d, batchnorm2d_type())

}  // namespace pt::layers
