// The Backend interface's default compositions (backend.hpp): operations a backend may
// override with a fused kernel, written here in terms of its primitive operations.
#include "pipetrain/backend.hpp"
#include "pipetrain/error.hpp"

namespace pt {

void Backend::linear_forward(int64_t rows, int64_t in, int64_t out, const float* x, const float* w, const float* b,
                             float* y) {
  gemm(false, true, rows, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
  if (b) bias_add_rows(y, b, rows, out);
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
