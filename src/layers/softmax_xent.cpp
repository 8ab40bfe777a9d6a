// The loss: softmax cross entropy. Output is the per-sample loss; backward ignores dy and
// uses ctx.loss_scale (1/batch_size), so gradients are those of the minibatch mean loss.
#include "layer_util.hpp"

namespace pt::layers {
namespace {

class SoftmaxCrossEntropy final : public Layer {
 public:
  SoftmaxCrossEntropy(const LayerSpec& s, Shape in) : Layer(s, in) { out_ = Shape::vec(1); }
  bool is_loss() const override { return true; }
  int64_t aux_per_sample() const override { return in_.numel(); }  // softmax probabilities
  void forward(const LayerCtx& c, ParamView, const float* x, float* y, float* aux, int64_t n) const override {
    c.be.softmax_xent_forward(n, in_.numel(), x, c.labels, y, aux);
  }
  void backward(const LayerCtx& c, ParamView, const float*, const float*, const float*, float* dx, float*,
                const float* aux, int64_t n) const override {
    if (dx) c.be.softmax_xent_backward(n, in_.numel(), aux, c.labels, c.loss_scale, dx);
  }
  double flops_forward() const override { return 4.0 * in_.numel(); }
};

LayerType softmax_xent_type() {
  LayerType t;
  t.name = "softmax_cross_entropy";
  t.doc = "softmax over the classes and cross entropy against the label, averaged over the minibatch";
  t.pytorch = "torch.nn.CrossEntropyLoss() on the logits";
  t.loss = true;
  t.make = [](const LayerSpec& s, const Shape& in, const std::string& prev) -> std::unique_ptr<Layer> {
    require_input(s, in, 1, "flat [classes] logits as", prev);
    return std::make_unique<SoftmaxCrossEntropy>(s, in);
  };
  return t;
}

}  // namespace

PT_REGISTER_LAYER(softmax_cross_entropy, softmax_xent_type())

}  // namespace pt::layers
