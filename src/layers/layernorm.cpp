// Layer normalisation over all features of a sample, with elementwise affine weight and bias.
#include "layer_types.hpp"

namespace pt::layers {

std::vector<ParamTensor> LayerNorm::params() const {
  const int64_t f = in_.numel();
  std::vector<int64_t> shape = in_.rank == 3 ? std::vector<int64_t>{in_.c(), in_.h(), in_.w()} : std::vector<int64_t>{f};
  return {{"weight", shape, 0, f}, {"bias", shape, f, f}};
}

void LayerNorm::init_params(float* host, uint64_t) const {
  const int64_t f = in_.numel();
  for (int64_t i = 0; i < f; ++i) host[i] = 1.0f, host[f + i] = 0.0f;
}

void LayerNorm::forward(const LayerCtx& c, const float* w, const float* x, float* y, float* aux, int64_t n) const {
  const int64_t f = in_.numel();
  c.be.layernorm_forward(n, f, static_cast<float>(spec_.eps), x, w, w + f, y, aux);
}

void LayerNorm::backward(const LayerCtx& c, const float* w, const float* x, const float*, const float* dy,
                         float* dx, float* dw, const float* aux, int64_t n) const {
  const int64_t f = in_.numel();
  c.be.layernorm_backward(n, f, x, w, aux, dy, dx, dw, dw + f);
}

}  // namespace pt::layers
