// The Backend interface's default compositions (backend.hpp): operations a backend may
// override with a fused kernel, written here in terms of its primitive operations.
#include "pipetrain/backend.hpp"

namespace pt {

void Backend::linear_forward(int64_t rows, int64_t in, int64_t out, const float* x, const float* w, const float* b,
                             float* y) {
  gemm(false, true, rows, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
  if (b) bias_add_rows(y, b, rows, out);
}

}  // namespace pt
