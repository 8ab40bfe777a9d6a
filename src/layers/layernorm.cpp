// Layer normalisation over all features of a sample, with elementwise affine weight and
// bias. Backward splits: dx (needs the weight) and dweight, dbias (the W half).
#include "layer_util.hpp"

namespace pt::layers {
namespace {

class LayerNorm final : public Layer {
 public:
  using Layer::Layer;
  std::vector<ParamTensor> params() const override {
    const int64_t f = in_.numel();
    std::vector<int64_t> shape = in_.rank == 3 ? std::vector<int64_t>{in_.c(), in_.h(), in_.w()} : std::vector<int64_t>{f};
    return {{"weight", shape, 0, f}, {"bias", shape, f, f}};
  }
  void init_params(float* host, uint64_t) const override {
    const int64_t f = in_.numel();
    for (int64_t i = 0; i < f; ++i) host[i] = 1.0f, host[f + i] = 0.0f;
  }
  int64_t aux_per_sample() const override { return 2; }
  void forward(const LayerCtx& c, const float* w, const float* x, float* y, float* aux, int64_t n) const override {
    const int64_t f = in_.numel();
    c.be.layernorm_forward(n, f, static_cast<float>(spec_.eps), x, w, w + f, y, aux);
  }
  void backward(const LayerCtx& c, const float* w, const float* x, const float*, const float* dy, float* dx, float* dw,
                const float* aux, int64_t n) const override {
    const int64_t f = in_.numel();
    c.be.layernorm_backward(n, f, x, w, aux, dy, dx, dw, dw + f);
  }
  bool splits_backward() const override { return true; }
  void backward_input(const LayerCtx& c, const float* w, const float* x, const float*, const float* dy, float* dx, float*,
                      const float* aux, int64_t n) const override {
    if (dx) c.be.layernorm_backward(n, in_.numel(), x, w, aux, dy, dx, nullptr, nullptr);
  }
  void backward_weight(const LayerCtx& c, const float* w, const float* x, const float*, const float* dy, float* dw,
                       const float* aux, int64_t n) const override {
    const int64_t f = in_.numel();
    c.be.layernorm_backward(n, f, x, w, aux, dy, nullptr, dw, dw + f);
  }
  double flops_forward() const override { return 8.0 * out_.numel(); }
  double flops_backward() const override { return 12.0 * out_.numel(); }
};

LayerType layernorm_type() {
  LayerType t;
  t.name = "layernorm";
  t.doc = "normalise each sample over its features, then weight and bias";
  t.pytorch = "torch.nn.LayerNorm(sample shape, eps)";
  t.keys = {PT_LAYER_KEY("eps", KeyKind::Float, false, key_gt(0), "epsilon (default 1e-5)", eps)};
  t.make = [](const LayerSpec& s, const Shape& in, const std::string& prev) -> std::unique_ptr<Layer> {
    if (in.is_tokens) require_input(s, in, 1, "a float", prev);
    return std::make_unique<LayerNorm>(s, in);
  };
  return t;
}

}  // namespace

PT_REGISTER_LAYER(layernorm, layernorm_type())

}  // namespace pt::layers
