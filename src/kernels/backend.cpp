// The Backend interface's default compositions (backend.hpp): operations a backend may
// override with a fused kernel, written here in terms of its primitive operations. None of
// them allocates or copies through the host.
#include "pipetrain/backend.hpp"
#include "pipetrain/error.hpp"

namespace pt {

void Backend::linear_forward(int64_t rows, int64_t in, int64_t out, const float* x, const float* w, const float* b,
                             float* y, bool x_packed, bool y_packed) {
  if (x_packed) gemm_packed(false, true, rows, out, in, 1.0f, x, true, w, false, 0.0f, y);
  else gemm(false, true, rows, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
  if (b) bias_add_rows(y, b, rows, out);
  if (y_packed) pack_bf16(static_cast<size_t>(rows * out), y, y);
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

void Backend::gelu_forward_deriv_packed(size_t n, float* x, float* y) {
  gelu_forward_deriv(n, x, y);
  pack_bf16(n, y, y);
}
void Backend::mul_packed(size_t n, const float* a, const float* b, float* y) {
  mul(n, a, b, y);
  pack_bf16(n, y, y);
}

// A backend without the fused kernel: the layer asks fused_attention() first and composes,
// so reaching these is a bug in the caller.
void Backend::attention_forward(const AttentionGeom&, const float*, float*, float*) {
  PT_CHECK(false, "attention_forward: the " << describe() << " backend has no fused attention kernel");
}
void Backend::attention_backward(const AttentionGeom&, const float*, const float*, const float*, float*) {
  PT_CHECK(false, "attention_backward: the " << describe() << " backend has no fused attention kernel");
}

}  // namespace pt
