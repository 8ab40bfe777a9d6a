// The concrete layer classes (one .cpp each); only the factory needs their declarations.
#pragma once
#include "pipetrain/layers.hpp"

namespace pt::layers {

class Linear final : public Layer {
 public:
  Linear(const LayerSpec& s, Shape in);
  std::vector<ParamTensor> params() const override;
  void init_params(float* host, uint64_t seed) const override;
  void forward(const LayerCtx& c, const float* w, const float* x, float* y, float* aux, int64_t n) const override;
  void backward(const LayerCtx& c, const float* w, const float* x, const float* y, const float* dy, float* dx,
                float* dw, const float* aux, int64_t n) const override;
  double flops_forward() const override;
  double flops_backward() const override;
};

class Conv2d final : public Layer {
 public:
  Conv2d(const LayerSpec& s, Shape in);
  std::vector<ParamTensor> params() const override;
  void init_params(float* host, uint64_t seed) const override;
  void forward(const LayerCtx& c, const float* w, const float* x, float* y, float* aux, int64_t n) const override;
  void backward(const LayerCtx& c, const float* w, const float* x, const float* y, const float* dy, float* dx,
                float* dw, const float* aux, int64_t n) const override;
  double flops_forward() const override;
  double flops_backward() const override;

 private:
  WindowGeom g_;
};

class Pool2d final : public Layer {  // maxpool2d and avgpool2d
 public:
  Pool2d(const LayerSpec& s, Shape in);
  int64_t aux_per_sample() const override { return max_ ? out_.numel() : 0; }
  void forward(const LayerCtx& c, const float* w, const float* x, float* y, float* aux, int64_t n) const override;
  void backward(const LayerCtx& c, const float* w, const float* x, const float* y, const float* dy, float* dx,
                float* dw, const float* aux, int64_t n) const override;
  double flops_forward() const override;

 private:
  WindowGeom g_;
  bool max_;
};

class Relu final : public Layer {
 public:
  using Layer::Layer;
  void forward(const LayerCtx& c, const float* w, const float* x, float* y, float* aux, int64_t n) const override;
  void backward(const LayerCtx& c, const float* w, const float* x, const float* y, const float* dy, float* dx,
                float* dw, const float* aux, int64_t n) const override;
};

class Gelu final : public Layer {
 public:
  using Layer::Layer;
  void forward(const LayerCtx& c, const float* w, const float* x, float* y, float* aux, int64_t n) const override;
  void backward(const LayerCtx& c, const float* w, const float* x, const float* y, const float* dy, float* dx,
                float* dw, const float* aux, int64_t n) const override;
  double flops_forward() const override { return 20.0 * out_.numel(); }
};

class Flatten final : public Layer {
 public:
  Flatten(const LayerSpec& s, Shape in) : Layer(s, in) { out_ = Shape::vec(in.numel()); }
  bool is_view() const override { return true; }
  void forward(const LayerCtx&, const float*, const float*, float*, float*, int64_t) const override {}
  void backward(const LayerCtx&, const float*, const float*, const float*, const float*, float*, float*,
                const float*, int64_t) const override {}
  double flops_forward() const override { return 0; }
  double flops_backward() const override { return 0; }
};

class LayerNorm final : public Layer {
 public:
  using Layer::Layer;
  std::vector<ParamTensor> params() const override;
  void init_params(float* host, uint64_t seed) const override;
  int64_t aux_per_sample() const override { return 2; }
  void forward(const LayerCtx& c, const float* w, const float* x, float* y, float* aux, int64_t n) const override;
  void backward(const LayerCtx& c, const float* w, const float* x, const float* y, const float* dy, float* dx,
                float* dw, const float* aux, int64_t n) const override;
  double flops_forward() const override { return 8.0 * out_.numel(); }
  double flops_backward() const override { return 12.0 * out_.numel(); }
};

class Dropout final : public Layer {
 public:
  using Layer::Layer;
  void forward(const LayerCtx& c, const float* w, const float* x, float* y, float* aux, int64_t n) const override;
  void backward(const LayerCtx& c, const float* w, const float* x, const float* y, const float* dy, float* dx,
                float* dw, const float* aux, int64_t n) const override;
};

class SoftmaxCrossEntropy final : public Layer {
 public:
  SoftmaxCrossEntropy(const LayerSpec& s, Shape in) : Layer(s, in) { out_ = Shape::vec(1); }
  bool is_loss() const override { return true; }
  int64_t aux_per_sample() const override { return in_.numel(); }  // softmax probabilities
  void forward(const LayerCtx& c, const float* w, const float* x, float* y, float* aux, int64_t n) const override;
  void backward(const LayerCtx& c, const float* w, const float* x, const float* y, const float* dy, float* dx,
                float* dw, const float* aux, int64_t n) const override;
  double flops_forward() const override { return 4.0 * in_.numel(); }
};

// PyTorch's default init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases.
void init_uniform(float* host, int64_t count, float bound, uint64_t seed, int layer, int tensor);

}  // namespace pt::layers
