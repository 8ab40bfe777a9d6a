// Layer normalisation with elementwise affine weight and bias. A flat [F] or image
// [C, H, W] sample is normalised over all its features (weight and bias of the sample's
// shape); a sequence [T, D] over D at each position (weight and bias [D], as
// torch.nn.LayerNorm(D)). Backward splits: dx (needs the weight) and dweight, dbias.
#include "layer_util.hpp"

namespace pt::layers {
namespace {

struct LayerNormSettings : LayerSettings {
  double eps = 1e-5;
};

class LayerNorm final : public Layer {
 public:
  LayerNorm(const LayerSpec& s, Shape in)
      : Layer(s, in),
        per_pos_(in.rank == 2),
        map_{per_pos_ ? in.D() : in.numel(), static_cast<float>(s.settings_as<LayerNormSettings>().eps)} {}

  std::vector<ParamTensor> params() const override {
    const int64_t f = map_.cols;
    std::vector<int64_t> shape = in_.rank == 3 ? std::vector<int64_t>{in_.c(), in_.h(), in_.w()} : std::vector<int64_t>{f};
    return {{"weight", shape, 0, f}, {"bias", shape, f, f}};
  }
  void init_params(float* host, uint64_t) const override {
    init_constant(host, map_.cols, 1.0f);
    init_constant(host + map_.cols, map_.cols, 0.0f);
  }
  int64_t aux_per_sample() const override { return 2 * rows(1); }
  void forward(const LayerCtx& c, ParamView w, const float* x, float* y, float* aux, int64_t n) const override {
    map_.forward(c.be, w, x, y, aux, rows(n));
  }
  void backward(const LayerCtx& c, ParamView w, const float* x, const float*, const float* dy, float* dx, float* dw,
                const float* aux, int64_t n) const override {
    c.be.layernorm_backward(rows(n), map_.cols, x, w, aux, dy, dx, dw, dw + map_.cols);
  }
  bool splits_backward() const override { return true; }
  void backward_input(const LayerCtx& c, ParamView w, const float* x, const float*, const float* dy, float* dx, float*,
                      float* aux, int64_t n) const override {
    map_.backward_input(c.be, w, x, aux, dy, dx, rows(n));
  }
  void backward_weight(const LayerCtx& c, ParamView w, const float* x, const float*, const float* dy, float* dw,
                       const float* aux, int64_t n) const override {
    map_.backward_weight(c.be, w, x, aux, dy, dw, rows(n));
  }
  double flops_forward() const override { return 8.0 * out_.numel(); }
  double flops_backward() const override { return 12.0 * out_.numel(); }

 private:
  int64_t rows(int64_t n) const { return per_pos_ ? n * in_.T() : n; }
  bool per_pos_;
  RowNorm map_;
};

LayerType layernorm_type() {
  LayerType t;
  t.name = "layernorm";
  t.doc = "normalise each sample over its features ([F], [C, H, W]) or each position over D ([T, D]), then weight and bias";
  t.pytorch = "torch.nn.LayerNorm(sample shape, eps); for [T, D]: torch.nn.LayerNorm(D, eps)";
  t.keys = layer_keys<LayerNormSettings>({key("eps", &LayerNormSettings::eps, 1e-5, key_gt(0), "epsilon (default 1e-5)")});
  t.make = [](const LayerSpec& s, const Shape& in, const std::string& prev) -> std::unique_ptr<Layer> {
    if (in.is_tokens) require_input(s, in, 1, "a float", prev);
    return std::make_unique<LayerNorm>(s, in);
  };
  return t;
}

}  // namespace

PT_REGISTER_LAYER(layernorm, layernorm_type())

}  // namespace pt::layers
