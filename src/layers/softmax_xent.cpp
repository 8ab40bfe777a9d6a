// The loss: softmax cross entropy. Output is the per-sample loss; backward ignores dy and
// uses ctx.loss_scale (1/batch_size), so gradients are those of the minibatch mean loss.
#include "layer_types.hpp"

namespace pt::layers {

void SoftmaxCrossEntropy::forward(const LayerCtx& c, const float*, const float* x, float* y, float* aux,
                                  int64_t n) const {
  c.be.softmax_xent_forward(n, in_.numel(), x, c.labels, y, aux);
}

void SoftmaxCrossEntropy::backward(const LayerCtx& c, const float*, const float*, const float*, const float*,
                                   float* dx, float*, const float* aux, int64_t n) const {
  if (dx) c.be.softmax_xent_backward(n, in_.numel(), aux, c.labels, c.loss_scale, dx);
}

}  // namespace pt::layers
