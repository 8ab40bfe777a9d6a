// Linear layer: y = x W^T + b with W [out, in] (PyTorch layout). Backward splits: the input
// gradient dx = dy W, and the weight gradient dW += dy^T x, db += column sums of dy.
#include <cmath>

#include "layer_util.hpp"

namespace pt::layers {
namespace {

struct LinearSettings : LayerSettings {
  int64_t out = 0;
  bool bias = true;
};

class Linear final : public Layer {
 public:
  Linear(const LayerSpec& s, Shape in) : Layer(s, in), map_{in.numel(), k(s).out, k(s).bias} { out_ = Shape::vec(k(s).out); }

  std::vector<ParamTensor> params() const override {
    const int64_t in = in_.numel(), out = out_.numel();
    std::vector<ParamTensor> p = {{"weight", {out, in}, 0, out * in}};
    if (map_.bias) p.push_back({"bias", {out}, out * in, out});
    return p;
  }
  void init_params(float* host, uint64_t seed) const override {
    const float bound = 1.0f / std::sqrt(static_cast<float>(in_.numel()));
    int t = 0;
    for (auto& p : params()) init_uniform(host + p.offset, p.size, bound, seed, index(), t++);
  }
  void forward(const LayerCtx& c, ParamView w, const float* x, float* y, float*, int64_t n) const override {
    map_.forward(c, w, x, y, n);
  }
  void backward(const LayerCtx& c, ParamView w, const float* x, const float*, const float* dy, float* dx, float* dw,
                const float*, int64_t n) const override {
    map_.backward_weight(c, x, dy, dw, n);
    map_.backward_input(c, w, dy, dx, n);
  }
  bool splits_backward() const override { return true; }
  void backward_input(const LayerCtx& c, ParamView w, const float*, const float*, const float* dy, float* dx, float*,
                      float*, int64_t n) const override {
    map_.backward_input(c, w, dy, dx, n);
  }
  void backward_weight(const LayerCtx& c, ParamView, const float* x, const float*, const float* dy, float* dw,
                       const float*, int64_t n) const override {
    map_.backward_weight(c, x, dy, dw, n);
  }
  double flops_forward() const override { return 2.0 * in_.numel() * out_.numel(); }
  double flops_backward() const override { return 4.0 * in_.numel() * out_.numel(); }
  int64_t product_weight_values() const override { return map_.in * map_.out; }

 private:
  static const LinearSettings& k(const LayerSpec& s) { return s.settings_as<LinearSettings>(); }
  RowLinear map_;
};

LayerType linear_type() {
  LayerType t;
  t.name = "linear";
  t.doc = "y = x W^T + b";
  t.pytorch = "torch.nn.Linear(in, out, bias)";
  t.keys = layer_keys<LinearSettings>({required_key("out", &LinearSettings::out, key_gt(0), "output features"),
                                        key("bias", &LinearSettings::bias, true, "add a bias (default true)")});
  t.make = [](const LayerSpec& s, const Shape& in, const std::string& prev) -> std::unique_ptr<Layer> {
    require_input(s, in, 1, "a flat [F]", prev);
    return std::make_unique<Linear>(s, in);
  };
  return t;
}

}  // namespace

PT_REGISTER_LAYER(linear, linear_type())

}  // namespace pt::layers
