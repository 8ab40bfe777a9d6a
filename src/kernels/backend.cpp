// The default compositions of the Backend interface (backend.hpp) and of its fused kernels
// (fused.hpp): operations a backend may override with a fused kernel, written here in terms of
// its primitive operations. None of them allocates or copies through the host.
#include "pipetrain/backend.hpp"
#include "pipetrain/error.hpp"

namespace pt {

void FusedKernels::linear_forward(int64_t rows, int64_t in, int64_t out, CView x, CView w, const float* b,
                                  View y, Precision p) {
  be_.gemm(false, true, rows, out, in, 1.0f, x, in, w, in, 0.0f, y.data, out, p);
  if (b) be_.bias_add_rows(y.data, b, rows, out);
  if (y.bf16()) be_.pack_bf16(static_cast<size_t>(rows * out), y.data, y.data);
}

void FusedKernels::batchnorm_forward(bool training, const BnArgs& a, const float* x, View yv, CView addv,
                                     bool relu) {
  PT_CHECK(!a.y_nchw || a.layout == ImageLayout::nchw,
           "batchnorm_forward: an NCHW output of a channel-minor input needs the backend's fused kernel");
  PT_CHECK(!yv.bf16() && !addv.bf16(), "batchnorm_forward: a bf16 y or add needs the backend's fused kernel");
  float* y = yv.data;
  const float* add = addv.data;
  if (training)
    be_.batchnorm_forward_training(a.n, a.C, a.HW, a.eps, a.momentum, x, a.gamma, a.beta, y, a.save_mean,
                                   a.save_invstd, a.running_mean, a.running_var, a.layout);
  else
    be_.batchnorm_forward_inference(a.n, a.C, a.HW, a.eps, x, a.gamma, a.beta, a.running_mean, a.running_var, y,
                                    a.layout);
  const size_t count = static_cast<size_t>(a.n * a.C * a.HW);
  if (add) be_.axpy(count, 1.0f, add, y);
  if (relu) be_.relu_forward(count, y, y);
}

void Backend::round_pack_bf16(size_t n, const float* x, float* y, float* packed) {
  round_bf16(n, x, y);
  pack_bf16(n, y, packed);  // exact: y holds bf16 values
}

void Backend::add(size_t n, const float* a, const float* b, float* y) {
  if (y == b) return axpy(n, 1.0f, a, y);
  copy(y, a, n);
  axpy(n, 1.0f, b, y);
}

// A backend without the fused kernel: the layer asks attention() first and composes, so
// reaching these is a bug in the caller.
void FusedKernels::attention_forward(const AttentionGeom&, CView, View, View) {
  PT_CHECK(false, "attention_forward: the " << be_.describe() << " backend has no fused attention kernel");
}
void FusedKernels::attention_backward(const AttentionGeom&, CView, CView, const float*, View) {
  PT_CHECK(false, "attention_backward: the " << be_.describe() << " backend has no fused attention kernel");
}

}  // namespace pt
