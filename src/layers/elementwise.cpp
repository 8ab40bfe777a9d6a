// Elementwise layers: relu, gelu, dropout (flatten is a view and has no kernels).
#include "layer_types.hpp"
#include "pipetrain/rng.hpp"

namespace pt::layers {

void Relu::forward(const LayerCtx& c, const float*, const float* x, float* y, float*, int64_t n) const {
  c.be.relu_forward(static_cast<size_t>(n * in_.numel()), x, y);
}
void Relu::backward(const LayerCtx& c, const float*, const float*, const float* y, const float* dy, float* dx,
                    float*, const float*, int64_t n) const {
  if (dx) c.be.relu_backward(static_cast<size_t>(n * in_.numel()), y, dy, dx);
}

void Gelu::forward(const LayerCtx& c, const float*, const float* x, float* y, float*, int64_t n) const {
  c.be.gelu_forward(static_cast<size_t>(n * in_.numel()), x, y);
}
void Gelu::backward(const LayerCtx& c, const float*, const float* x, const float*, const float* dy, float* dx,
                    float*, const float*, int64_t n) const {
  if (dx) c.be.gelu_backward(static_cast<size_t>(n * in_.numel()), x, dy, dx);
}

// The mask is keyed by (seed, layer index, global sample id, element): the same on any
// rank and in any layout; backward recomputes it instead of storing it.
void Dropout::forward(const LayerCtx& c, const float*, const float* x, float* y, float*, int64_t n) const {
  const int64_t f = in_.numel();
  if (!c.training || spec_.p == 0.0) {
    c.be.copy(y, x, static_cast<size_t>(n * f));
    return;
  }
  const uint64_t key = rng_key(c.seed, Stream::dropout, static_cast<uint64_t>(index()));
  c.be.dropout_forward(n, f, static_cast<float>(spec_.p), key, c.sample0, x, y);
}
void Dropout::backward(const LayerCtx& c, const float*, const float*, const float*, const float* dy, float* dx,
                       float*, const float*, int64_t n) const {
  if (!dx) return;
  const int64_t f = in_.numel();
  if (spec_.p == 0.0) {
    c.be.copy(dx, dy, static_cast<size_t>(n * f));
    return;
  }
  const uint64_t key = rng_key(c.seed, Stream::dropout, static_cast<uint64_t>(index()));
  c.be.dropout_backward(n, f, static_cast<float>(spec_.p), key, c.sample0, dy, dx);
}

}  // namespace pt::layers
