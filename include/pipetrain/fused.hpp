// Fused kernels: operations a backend may run in one pass over memory where the Backend's
// primitives (backend.hpp) would take several. Each has a default composition of the
// backend's primitives (src/kernels/backend.cpp), which allocates nothing and copies nothing
// through the host; a backend overrides what it fuses and hands its instance out through
// Backend::fused(). Layers call them only there: be.fused().linear_forward(...).
//   - linear + bias (+ a bf16 output): the host runs oneDNN's matmul with the bias fused; the
//     CUDA backend packs a bf16 output from device scratch;
//   - the causal attention core: the host's kernel (attention_kernel.cpp); without one
//     (attention() false: the CUDA backend) the layers compose it from gemm_strided_batched,
//     heads_split/merge and the causal softmax.
// GELU with its derivative (gelu_forward_deriv) and the layer norm are single elementwise or
// row kernels on both backends, with nothing to compose them from that would not need
// scratch, so they stay Backend primitives.
#pragma once
#include <cstdint>

#include "pipetrain/device.hpp"
#include "pipetrain/dtype.hpp"

namespace pt {

class Backend;

// The causal attention core's geometry: n samples of T tokens, H heads of dh features, the
// score scale, and the products' precision.
struct AttentionGeom {
  int64_t n = 0, T = 0, H = 0, dh = 0;
  float scale = 1.0f;
  Precision precision = Precision::fp32;
};

class FusedKernels {
 public:
  explicit FusedKernels(Backend& be) : be_(be) {}
  virtual ~FusedKernels() = default;
  FusedKernels(const FusedKernels&) = delete;
  FusedKernels& operator=(const FusedKernels&) = delete;

  // A linear layer's forward in precision p: y[rows, out] = x[rows, in] W[out, in]^T + b (b
  // may be null). x may be a bf16 view (p = bf16); a bf16 y is written as the bf16 of the
  // fp32 result (rounded to nearest even). Default: gemm, bias_add_rows, then pack_bf16 in
  // place for a bf16 y (which then needs room for rows out floats); the host runs oneDNN's
  // matmul with the bias fused (one pass over y instead of two, the same fp32 sum acc + b) and
  // writes a bf16 y directly (subnormal results to 0), the CUDA backend packs from scratch, so
  // on both a bf16 y needs only its ceil(rows out / 2) floats (layers keep it so).
  virtual void linear_forward(int64_t rows, int64_t in, int64_t out, CView x, CView w, const float* b, View y,
                              Precision p);

  // A batch norm's forward with its epilogue: y = relu(bn(x) + add) over n C HW values, `add`
  // may be null and `relu` false. bn(x) and the statistics are batchnorm_forward_training's
  // (training) or batchnorm_forward_inference's (running statistics, which must be given).
  // Default: that call, then axpy(1, add, y) and relu_forward(y, y); the host applies both in
  // the normalisation's own pass over y (the same float operations in the same order, so the
  // same bits). In a channel-minor layout the host also takes add as a bf16 view (its values
  // read exactly) and, unless y_nchw, y as a bf16 view (each result's bf16_bits, the rounding
  // a bf16 convolution reading it would make); the default refuses both.
  struct BnArgs {
    int64_t n, C, HW;
    float eps, momentum;
    const float *gamma, *beta;
    float *save_mean, *save_invstd;     // training
    float *running_mean, *running_var;  // training: updated when given; inference: read
    ImageLayout layout = ImageLayout::nchw;  // of x, add and y
    // y in NCHW instead (x and add in `layout`): the move out in the normalisation's pass; only
    // a backend whose conv_layout names channel-minor layouts (the host) takes it
    bool y_nchw = false;
  };
  virtual void batchnorm_forward(bool training, const BnArgs& a, const float* x, View y, CView add, bool relu);

  // The causal attention core, where the backend has it (attention(); else the layers
  // compose it, and the calls below are refused). Operands stay token-major, as the
  // projections write and read them: qkv [n, T, 3, H, dh] (q, k, v of each token), o and do
  // [n, T, H, dh], P [n, H, T, T] the probabilities (0 above the diagonal), dqkv like qkv. In
  // bf16 (precision) the operands of the products (q, k, v, P; do, v, P, dS, k, q) are
  // rounded to bf16 as gemm rounds them; softmax and every sum stay fp32, and the softmax
  // backward reads P as the products do (its bf16 values in bf16, as autocast's softmax
  // backward reads its bf16 output). qkv and P may be bf16 views, and o and dqkv bf16 views
  // (written as the bf16 of their values), in bf16 only. No dropout: a layer with dropout of
  // the probabilities composes. Forward: P = causal_softmax(scale q k^T), o = P v.
  // Backward: dP = do v^T, dS = causal_softmax_backward(P, dP), dq = scale dS k,
  // dk = scale dS^T q, dv = P^T do. P may be null in both (selective recomputation): the
  // forward then stores no probabilities and the backward recomputes them from q and k as
  // the forward computes them, bitwise the same values.
  virtual bool attention() const { return false; }
  virtual void attention_forward(const AttentionGeom& g, CView qkv, View P, View o);
  virtual void attention_backward(const AttentionGeom& g, CView qkv, CView P, const float* dout, View dqkv);

 protected:
  Backend& be_;
};

}  // namespace pt
