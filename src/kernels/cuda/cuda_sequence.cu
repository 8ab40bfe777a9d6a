// CUDA kernels for sequence models, following src/kernels/host/sequence_ops.cpp: the
// head-major permutations of attention (pure copies), the causal softmax and its backward
// (one warp per row; max and sum in fp32), token plus position embedding and its
// deterministic backward (one thread per column, tokens in (sample, position) order: the
// host's order of additions, so the result is bitwise the host's), and row means. Batched
// GEMM is cuBLAS (cuda_backend.cu).
#include <cmath>

#include "cuda_backend.hpp"
#include "cuda_common.hpp"

namespace pt::cuda {
namespace {


// one element per thread: [n, T, parts, H, dh] <-> [parts, n, H, T, dh]
__global__ void k_permute_heads(size_t total, int64_t n, int64_t T, int64_t parts, int64_t H, int64_t dh,
                                const float* src, float* dst, bool to_heads) {
  GRID_STRIDE(i, total) {
    const int64_t e = static_cast<int64_t>(i);
    const int64_t d = e % dh, r = e / dh;
    const int64_t t = r % T, h = (r / T) % H, s = (r / (T * H)) % n, p = r / (T * H * n);
    const int64_t tok = (((s * T + t) * parts + p) * H + h) * dh + d;
    if (to_heads) dst[e] = src[tok];
    else dst[tok] = src[e];
  }
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

constexpr int kWarps = 8;  // rows per block of the softmax kernels

__global__ void k_causal_softmax_forward(int64_t rows, int64_t T, const float* s, float* p) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const int64_t i = r % T;
  const float* sr = s + r * T;
  float* pr = p + r * T;
  float mx = -INFINITY;
  for (int64_t j = lane; j <= i; j += 32) mx = fmaxf(mx, sr[j]);
  mx = warp_max(mx);
  float sum = 0.0f;
  for (int64_t j = lane; j <= i; j += 32) sum += expf(sr[j] - mx);
  sum = warp_sum(sum);
  const float inv = 1.0f / sum;
  for (int64_t j = lane; j < T; j += 32) pr[j] = j <= i ? expf(sr[j] - mx) * inv : 0.0f;
}

__global__ void k_causal_softmax_backward(int64_t rows, int64_t T, const float* p, const float* dp, float* ds) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const int64_t i = r % T;
  const float* pr = p + r * T;
  const float* dpr = dp + r * T;
  float* dsr = ds + r * T;
  float dot = 0.0f;
  for (int64_t j = lane; j <= i; j += 32) dot += pr[j] * dpr[j];
  dot = warp_sum(dot);
  for (int64_t j = lane; j < T; j += 32) dsr[j] = j <= i ? pr[j] * (dpr[j] - dot) : 0.0f;
}

__global__ void k_embedding_forward(size_t total, int64_t T, int64_t D, const float* tokens, int64_t v0,
                                    int64_t rows, const float* wte, const float* wpe, float* y) {
  GRID_STRIDE(i, total) {
    const int64_t e = static_cast<int64_t>(i), r = e / D, d = e % D, v = static_cast<int64_t>(tokens[r]) - v0;
    y[e] = (v >= 0 && v < rows ? wte[v * D + d] : 0.0f) + (wpe ? wpe[(r % T) * D + d] : 0.0f);
  }
}

// one thread per column: the token rows in (sample, position) order
__global__ void k_embedding_backward_tokens(int64_t count, int64_t D, const float* tokens, int64_t v0, int64_t rows,
                                            const float* dy, float* dwte) {
  GRID_STRIDE(dd, static_cast<size_t>(D)) {
    const int64_t d = static_cast<int64_t>(dd);
    for (int64_t r = 0; r < count; ++r) {
      const int64_t v = static_cast<int64_t>(tokens[r]) - v0;
      if (v >= 0 && v < rows) dwte[v * D + d] += dy[r * D + d];
    }
  }
}

// one thread per (position, column): the samples in order
__global__ void k_embedding_backward_pos(int64_t n, int64_t T, int64_t D, const float* dy, float* dwpe) {
  GRID_STRIDE(i, static_cast<size_t>(T * D)) {
    const int64_t e = static_cast<int64_t>(i);
    float acc = dwpe[e];
    for (int64_t s = 0; s < n; ++s) acc += dy[s * T * D + e];
    dwpe[e] = acc;
  }
}

__global__ void k_mean_rows(int64_t rows, int64_t cols, const float* x, float* y) {
  GRID_STRIDE(rr, static_cast<size_t>(rows)) {
    const int64_t r = static_cast<int64_t>(rr);
    float acc = 0.0f;
    for (int64_t c = 0; c < cols; ++c) acc += x[r * cols + c];
    y[r] = acc / static_cast<float>(cols);
  }
}

__global__ void k_mean_rows_backward(size_t total, int64_t cols, const float* dy, float* dx) {
  GRID_STRIDE(i, total) dx[i] = dy[static_cast<int64_t>(i) / cols] / static_cast<float>(cols);
}

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>((rows + kWarps - 1) / kWarps); }

}  // namespace

void CudaBackend::heads_split(int64_t n, int64_t T, int64_t parts, int64_t H, int64_t dh, const float* x, float* y) {
  const size_t total = static_cast<size_t>(n * T * parts * H * dh);
  if (total == 0) return;
  k_permute_heads<<<blocks_for(total), kThreads, 0, compute_>>>(total, n, T, parts, H, dh, x, y, true);
  PT_CU_LAUNCHED();
}

void CudaBackend::heads_merge(int64_t n, int64_t T, int64_t parts, int64_t H, int64_t dh, const float* y, float* x) {
  const size_t total = static_cast<size_t>(n * T * parts * H * dh);
  if (total == 0) return;
  k_permute_heads<<<blocks_for(total), kThreads, 0, compute_>>>(total, n, T, parts, H, dh, y, x, false);
  PT_CU_LAUNCHED();
}

void CudaBackend::causal_softmax_forward(int64_t batches, int64_t T, const float* s, float* p) {
  const int64_t rows = batches * T;
  if (rows == 0) return;
  PT_CHECK(row_blocks(rows) <= INT32_MAX, "causal softmax rows " << rows);
  k_causal_softmax_forward<<<row_blocks(rows), 32 * kWarps, 0, compute_>>>(rows, T, s, p);
  PT_CU_LAUNCHED();
}

void CudaBackend::causal_softmax_backward(int64_t batches, int64_t T, const float* p, const float* dp, float* ds) {
  const int64_t rows = batches * T;
  if (rows == 0) return;
  k_causal_softmax_backward<<<row_blocks(rows), 32 * kWarps, 0, compute_>>>(rows, T, p, dp, ds);
  PT_CU_LAUNCHED();
}

void CudaBackend::embedding_forward(int64_t n, int64_t T, int64_t D, const float* tokens, int64_t v0, int64_t rows,
                                    const float* wte, const float* wpe, float* y) {
  const size_t total = static_cast<size_t>(n * T * D);
  if (total == 0) return;
  k_embedding_forward<<<blocks_for(total), kThreads, 0, compute_>>>(total, T, D, tokens, v0, rows, wte, wpe, y);
  PT_CU_LAUNCHED();
}

void CudaBackend::embedding_backward(int64_t n, int64_t T, int64_t D, const float* tokens, int64_t v0, int64_t rows,
                                     const float* dy, float* dwte, float* dwpe) {
  if (n * T * D == 0) return;
  k_embedding_backward_tokens<<<blocks_for(static_cast<size_t>(D), 64), 64, 0, compute_>>>(n * T, D, tokens, v0, rows, dy, dwte);
  PT_CU_LAUNCHED();
  k_embedding_backward_pos<<<blocks_for(static_cast<size_t>(T * D)), kThreads, 0, compute_>>>(n, T, D, dy, dwpe);
  PT_CU_LAUNCHED();
}

void CudaBackend::mean_rows(int64_t rows, int64_t cols, const float* x, float* y) {
  if (rows == 0) return;
  k_mean_rows<<<blocks_for(static_cast<size_t>(rows)), kThreads, 0, compute_>>>(rows, cols, x, y);
  PT_CU_LAUNCHED();
}

void CudaBackend::mean_rows_backward(int64_t rows, int64_t cols, const float* dy, float* dx) {
  const size_t total = static_cast<size_t>(rows * cols);
  if (total == 0) return;
  k_mean_rows_backward<<<blocks_for(total), kThreads, 0, compute_>>>(total, cols, dy, dx);
  PT_CU_LAUNCHED();
}

}  // namespace pt::cuda
