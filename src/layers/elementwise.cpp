// Elementwise layers without parameters: relu, gelu, dropout, and flatten (a view: its
// output is its input reinterpreted, no kernels).
#include "layer_util.hpp"

namespace pt::layers {
namespace {

class Relu final : public Layer {
 public:
  using Layer::Layer;
  bool passes_values() const override { return true; }  // max(x, 0); dy where y > 0, else 0
  void forward(const LayerCtx& c, ParamView, const float* x, float* y, float*, int64_t n) const override {
    c.be.relu_forward(static_cast<size_t>(n * in_.numel()), x, y);
  }
  void backward(const LayerCtx& c, ParamView, const float*, const float* y, const float* dy, float* dx, float*,
                const float*, int64_t n) const override {
    if (dx) c.be.relu_backward(static_cast<size_t>(n * in_.numel()), y, dy, dx);
  }
};

class Gelu final : public Layer {
 public:
  using Layer::Layer;
  void forward(const LayerCtx& c, ParamView, const float* x, float* y, float*, int64_t n) const override {
    c.be.gelu_forward(static_cast<size_t>(n * in_.numel()), x, y);
  }
  void backward(const LayerCtx& c, ParamView, const float* x, const float*, const float* dy, float* dx, float*,
                const float*, int64_t n) const override {
    if (dx) c.be.gelu_backward(static_cast<size_t>(n * in_.numel()), x, dy, dx);
  }
  double flops_forward() const override { return 20.0 * out_.numel(); }
};

struct DropoutSettings : LayerSettings {
  double p = 0;
};

// The mask is keyed by (seed, layer index, global sample id, element): the same on any
// rank and in any layout; backward recomputes it instead of storing it.
class Dropout final : public Layer {
 public:
  Dropout(const LayerSpec& s, Shape in) : Layer(s, in), p_(static_cast<float>(s.settings_as<DropoutSettings>().p)) {}
  void forward(const LayerCtx& c, ParamView, const float* x, float* y, float*, int64_t n) const override {
    dropout_apply(c, index(), 0, p_, in_.numel(), x, y, n);
  }
  void backward(const LayerCtx& c, ParamView, const float*, const float*, const float* dy, float* dx, float*,
                const float*, int64_t n) const override {
    if (dx) dropout_grad(c, index(), 0, p_, in_.numel(), dy, dx, n);
  }

 private:
  float p_;
};

class Flatten final : public Layer {
 public:
  Flatten(const LayerSpec& s, Shape in) : Layer(s, in) { out_ = Shape::vec(in.numel()); }
  bool is_view() const override { return true; }
  void forward(const LayerCtx&, ParamView, const float*, float*, float*, int64_t) const override {}
  void backward(const LayerCtx&, ParamView, const float*, const float*, const float*, float*, float*, const float*,
                int64_t) const override {}
  double flops_forward() const override { return 0; }
  double flops_backward() const override { return 0; }
};

template <class L>
LayerType simple(const char* name, const char* doc, const char* pytorch, LayerKeys keys = {}) {
  LayerType t;
  t.name = name;
  t.doc = doc;
  t.pytorch = pytorch;
  t.keys = std::move(keys);
  t.make = [](const LayerSpec& s, const Shape& in, const std::string& prev) -> std::unique_ptr<Layer> {
    if (in.is_tokens) require_input(s, in, 1, "a float", prev);
    return std::make_unique<L>(s, in);
  };
  return t;
}

}  // namespace

PT_REGISTER_LAYER(relu, simple<Relu>("relu", "max(x, 0)", "torch.nn.ReLU()"))
PT_REGISTER_LAYER(gelu, simple<Gelu>("gelu", "exact (erf) GELU", "torch.nn.GELU()"))
PT_REGISTER_LAYER(flatten, simple<Flatten>("flatten", "reinterpret a sample as a flat [F] vector", "torch.nn.Flatten()"))
PT_REGISTER_LAYER(dropout, simple<Dropout>("dropout", "inverted dropout, mask keyed by (seed, layer, sample, element)",
                                           "torch.nn.Dropout(p) (another random stream)",
                                           layer_keys<DropoutSettings>({required_key(
                                               "p", &DropoutSettings::p, key_between(0, 1, true), "drop probability")})))

}  // namespace pt::layers
