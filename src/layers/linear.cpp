// Linear layer: y = x W^T + b with W [out, in] (PyTorch layout). Backward splits: the input
// gradient dx = dy W, and the weight gradient dW += dy^T x, db += column sums of dy.
#include <cmath>

#include "layer_util.hpp"
#include "pipetrain/rng.hpp"

namespace pt::layers {

void init_uniform(float* host, int64_t count, float bound, uint64_t seed, int layer, int tensor) {
  const uint64_t key = rng_key(seed, Stream::init, static_cast<uint64_t>(layer), static_cast<uint64_t>(tensor));
  for (int64_t i = 0; i < count; ++i) host[i] = (2.0f * rng_uniform(key, static_cast<uint64_t>(i)) - 1.0f) * bound;
}

namespace {

class Linear final : public Layer {
 public:
  Linear(const LayerSpec& s, Shape in) : Layer(s, in) { out_ = Shape::vec(s.out); }

  std::vector<ParamTensor> params() const override {
    const int64_t in = in_.numel(), out = out_.numel();
    std::vector<ParamTensor> p = {{"weight", {out, in}, 0, out * in}};
    if (spec_.bias) p.push_back({"bias", {out}, out * in, out});
    return p;
  }
  void init_params(float* host, uint64_t seed) const override {
    const float bound = 1.0f / std::sqrt(static_cast<float>(in_.numel()));
    int t = 0;
    for (auto& p : params()) init_uniform(host + p.offset, p.size, bound, seed, index(), t++);
  }
  void forward(const LayerCtx& c, const float* w, const float* x, float* y, float*, int64_t n) const override {
    const int64_t in = in_.numel(), out = out_.numel();
    c.be.gemm(false, true, n, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
    if (spec_.bias) c.be.bias_add_rows(y, w + out * in, n, out);
  }
  void backward(const LayerCtx& c, const float* w, const float* x, const float* y, const float* dy, float* dx, float* dw,
                const float* aux, int64_t n) const override {
    backward_weight(c, w, x, y, dy, dw, aux, n);
    backward_input(c, w, x, y, dy, dx, dw, aux, n);
  }
  bool splits_backward() const override { return true; }
  void backward_input(const LayerCtx& c, const float* w, const float*, const float*, const float* dy, float* dx, float*,
                      const float*, int64_t n) const override {
    const int64_t in = in_.numel(), out = out_.numel();
    if (dx) c.be.gemm(false, false, n, in, out, 1.0f, dy, out, w, in, 0.0f, dx, in);  // dx = dy W
  }
  void backward_weight(const LayerCtx& c, const float*, const float* x, const float*, const float* dy, float* dw,
                       const float*, int64_t n) const override {
    const int64_t in = in_.numel(), out = out_.numel();
    c.be.gemm(true, false, out, in, n, 1.0f, dy, out, x, in, 1.0f, dw, in);  // dW += dy^T x
    if (spec_.bias) c.be.bias_grad_rows(dy, dw + out * in, n, out);
  }
  double flops_forward() const override { return 2.0 * in_.numel() * out_.numel(); }
  double flops_backward() const override { return 4.0 * in_.numel() * out_.numel(); }
};

LayerType linear_type() {
  LayerType t;
  t.name = "linear";
  t.doc = "y = x W^T + b";
  t.pytorch = "torch.nn.Linear(in, out, bias)";
  t.keys = {PT_LAYER_KEY("out", KeyKind::Int, true, key_gt(0), "output features", out),
            PT_LAYER_KEY("bias", KeyKind::Bool, false, KeyRange{}, "add a bias (default true)", bias)};
  t.make = [](const LayerSpec& s, const Shape& in, const std::string& prev) -> std::unique_ptr<Layer> {
    require_input(s, in, 1, "a flat [F]", prev);
    return std::make_unique<Linear>(s, in);
  };
  return t;
}

}  // namespace

PT_REGISTER_LAYER(linear, linear_type())

}  // namespace pt::layers
