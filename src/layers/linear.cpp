// Linear layer: y = x W^T + b with W [out, in] (PyTorch layout).
#include <cmath>

#include "layer_types.hpp"
#include "pipetrain/rng.hpp"

namespace pt::layers {

void init_uniform(float* host, int64_t count, float bound, uint64_t seed, int layer, int tensor) {
  const uint64_t key = rng_key(seed, Stream::init, static_cast<uint64_t>(layer), static_cast<uint64_t>(tensor));
  for (int64_t i = 0; i < count; ++i) host[i] = (2.0f * rng_uniform(key, static_cast<uint64_t>(i)) - 1.0f) * bound;
}

Linear::Linear(const LayerSpec& s, Shape in) : Layer(s, in) { out_ = Shape::vec(s.out); }

std::vector<ParamTensor> Linear::params() const {
  const int64_t in = in_.numel(), out = out_.numel();
  std::vector<ParamTensor> p = {{"weight", {out, in}, 0, out * in}};
  if (spec_.bias) p.push_back({"bias", {out}, out * in, out});
  return p;
}

void Linear::init_params(float* host, uint64_t seed) const {
  const float bound = 1.0f / std::sqrt(static_cast<float>(in_.numel()));
  int t = 0;
  for (auto& p : params()) init_uniform(host + p.offset, p.size, bound, seed, index(), t++);
}

void Linear::forward(const LayerCtx& c, const float* w, const float* x, float* y, float*, int64_t n) const {
  const int64_t in = in_.numel(), out = out_.numel();
  c.be.gemm(false, true, n, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
  if (spec_.bias) c.be.bias_add_rows(y, w + out * in, n, out);
}

void Linear::backward(const LayerCtx& c, const float* w, const float* x, const float*, const float* dy, float* dx,
                      float* dw, const float*, int64_t n) const {
  const int64_t in = in_.numel(), out = out_.numel();
  c.be.gemm(true, false, out, in, n, 1.0f, dy, out, x, in, 1.0f, dw, in);  // dW += dy^T x
  if (spec_.bias) c.be.bias_grad_rows(dy, dw + out * in, n, out);
  if (dx) c.be.gemm(false, false, n, in, out, 1.0f, dy, out, w, in, 0.0f, dx, in);  // dx = dy W
}

double Linear::flops_forward() const { return 2.0 * in_.numel() * out_.numel(); }
double Linear::flops_backward() const { return 4.0 * in_.numel() * out_.numel(); }

}  // namespace pt::layers
