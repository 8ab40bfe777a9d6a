// Host kernels for sequence models: batched GEMM (one batched oneDNN matmul, or a loop of
// KokkosBlas GEMMs where the fp32 rule keeps OpenBLAS), the
// head-major permutations of attention, the causal softmax and its backward, token plus
// position embedding (a scatter-add in (sample, position) order: deterministic), and row
// means (global average pooling, the per-sample mean of token losses). Kokkos Serial.
#include <cmath>
#include <cstring>

#include "host_backend.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/views.hpp"
#include "vec_math.hpp"

namespace pt::host {

void HostBackend::gemm_strided_batched(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                                       int64_t lda, int64_t stride_a, const float* B, int64_t ldb, int64_t stride_b,
                                       float beta, float* C, int64_t ldc, int64_t stride_c, int64_t batch,
                                       Precision p) {
  if (M == 0 || N == 0 || batch == 0) return;
  const bool contiguous = lda == (ta ? M : K) && ldb == (tb ? K : N) && ldc == N;
  if (K == 0 || (contiguous && !onednn_gemm(ta, tb, M, N, K, batch, p))) {  // a loop of OpenBLAS GEMMs
    for (int64_t b = 0; b < batch; ++b) {
      if (K == 0) gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C + b * stride_c, ldc, p);
      else blas_gemm(ta, tb, M, N, K, alpha, A + b * stride_a, B + b * stride_b, beta, C + b * stride_c);
    }
    return;
  }
  GemmArgs a;  // one batched oneDNN matmul
  a.ta = ta, a.tb = tb, a.M = M, a.N = N, a.K = K, a.alpha = alpha, a.beta = beta, a.batch = batch;
  a.A = A, a.lda = lda, a.stride_a = stride_a, a.B = B, a.ldb = ldb, a.stride_b = stride_b;
  a.C = C, a.ldc = ldc, a.stride_c = stride_c;
  onednn().gemm(p, a);
}

namespace {

// One row of dh floats per (part, sample, head, position): copy between the token-major
// and the head-major layout, in either direction.
void permute_heads(int64_t n, int64_t T, int64_t parts, int64_t H, int64_t dh, const float* src, float* dst,
                   bool to_heads) {
  Kokkos::parallel_for("pt::heads_permute", Range(0, parts * n * H * T), [=](int64_t r) {
    const int64_t t = r % T, h = (r / T) % H, s = (r / (T * H)) % n, p = r / (T * H * n);
    const int64_t tok = (((s * T + t) * parts + p) * H + h) * dh;  // [n, T, parts, H, dh]
    const int64_t head = r * dh;                                    // [parts, n, H, T, dh]
    if (to_heads) std::memcpy(dst + head, src + tok, sizeof(float) * dh);
    else std::memcpy(dst + tok, src + head, sizeof(float) * dh);
  });
}

}  // namespace

void HostBackend::heads_split(int64_t n, int64_t T, int64_t parts, int64_t H, int64_t dh, const float* x, float* y) {
  permute_heads(n, T, parts, H, dh, x, y, true);
}
void HostBackend::heads_merge(int64_t n, int64_t T, int64_t parts, int64_t H, int64_t dh, const float* y, float* x) {
  permute_heads(n, T, parts, H, dh, y, x, false);
}

// Row i of each [T, T] block: softmax over keys 0..i (fp32, lanes of vec_math.hpp), zeros after.
void HostBackend::causal_softmax_forward(int64_t batches, int64_t T, const float* s, float* p) {
  Kokkos::parallel_for("pt::causal_softmax_forward", Range(0, batches * T),
                       [=](int64_t r) { causal_softmax_row(s + r * T, p + r * T, r % T + 1, T); });
}

void HostBackend::causal_softmax_backward(int64_t batches, int64_t T, const float* p, const float* dp, float* ds) {
  Kokkos::parallel_for("pt::causal_softmax_backward", Range(0, batches * T),
                       [=](int64_t r) { causal_softmax_grad_row(p + r * T, dp + r * T, ds + r * T, r % T + 1, T); });
}

void HostBackend::embedding_forward(int64_t n, int64_t T, int64_t D, const float* tokens, int64_t v0, int64_t rows,
                                    const float* wte, const float* wpe, float* y) {
  Kokkos::parallel_for("pt::embedding_forward", Range(0, n * T), [=](int64_t r) {
    const int64_t v = static_cast<int64_t>(tokens[r]) - v0;
    const float* e = v >= 0 && v < rows ? wte + v * D : nullptr;
    const float* q = wpe ? wpe + (r % T) * D : nullptr;
    float* yr = y + r * D;
    for (int64_t d = 0; d < D; ++d) yr[d] = (e ? e[d] : 0.0f) + (q ? q[d] : 0.0f);
  });
}

void HostBackend::embedding_backward(int64_t n, int64_t T, int64_t D, const float* tokens, int64_t v0, int64_t rows,
                                     const float* dy, float* dwte, float* dwpe) {
  // one kernel index: the scatter-add runs in (sample, position) order
  Kokkos::parallel_for("pt::embedding_backward", Range(0, 1), [=](int) {
    for (int64_t r = 0; r < n * T; ++r) {
      const float* d = dy + r * D;
      const int64_t v = static_cast<int64_t>(tokens[r]) - v0;
      float* q = dwpe + (r % T) * D;
      for (int64_t k = 0; k < D; ++k) q[k] += d[k];
      if (v < 0 || v >= rows) continue;
      float* e = dwte + v * D;
      for (int64_t k = 0; k < D; ++k) e[k] += d[k];
    }
  });
}

void HostBackend::mean_rows(int64_t rows, int64_t cols, const float* x, float* y) {
  const float count = static_cast<float>(cols);
  Kokkos::parallel_for("pt::mean_rows", Range(0, rows), [=](int64_t r) {
    const float* xr = x + r * cols;
    float acc = 0.0f;
    for (int64_t c = 0; c < cols; ++c) acc += xr[c];
    y[r] = acc / count;
  });
}

void HostBackend::mean_rows_backward(int64_t rows, int64_t cols, const float* dy, float* dx) {
  const float count = static_cast<float>(cols);
  Kokkos::parallel_for("pt::mean_rows_backward", Range(0, rows * cols), [=](int64_t i) { dx[i] = dy[i / cols] / count; });
}

}  // namespace pt::host
