// CUDA kernels behind the ops that are not GEMM or cuDNN: fill/axpy/scale, bias rows,
// activations, layer norm, dropout, softmax cross entropy, reductions, optimizer updates
// and max pooling. Each follows the host kernel in src/kernels/host/ (same formulas, and
// the same summation order where that is cheap: bias and parameter-gradient column sums,
// max-pooling gradients); reductions are deterministic (fixed grid, fixed tree order).
#include <cmath>

#include "cuda_backend.hpp"
#include "cuda_common.hpp"
#include "pipetrain/rng.hpp"

namespace pt::cuda {
namespace {


// Block-wide sum of one double per thread (blockDim.x a power of two <= 1024), fixed order.
__device__ double block_sum(double v, double* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  const double r = sh[0];
  __syncthreads();
  return r;
}

// rng_uniform of include/pipetrain/rng.hpp on the device: the same bits from the same
// constexpr rng_bits (callable here with --expt-relaxed-constexpr), so masks match the host.
__device__ __forceinline__ float dev_uniform(uint64_t key, uint64_t i) {
  return static_cast<float>(rng_bits(key, i) >> 40) * (1.0f / 16777216.0f);
}

__global__ void k_fill(float* x, float v, size_t n) { GRID_STRIDE(i, n) x[i] = v; }
__global__ void k_axpy(size_t n, float a, const float* x, float* y) { GRID_STRIDE(i, n) y[i] += a * x[i]; }
__global__ void k_scale(size_t n, float a, float* x) { GRID_STRIDE(i, n) x[i] *= a; }

__global__ void k_bias_add_rows(float* y, const float* b, size_t total, int64_t cols) {
  GRID_STRIDE(i, total) y[i] += b[static_cast<int64_t>(i) % cols];
}
// one thread per column, rows in order: the host's summation order
__global__ void k_bias_grad_rows(const float* dy, float* db, int64_t rows, int64_t cols) {
  GRID_STRIDE(c, static_cast<size_t>(cols)) {
    float acc = db[c];
    for (int64_t r = 0; r < rows; ++r) acc += dy[r * cols + static_cast<int64_t>(c)];
    db[c] = acc;
  }
}

__global__ void k_relu_forward(size_t n, const float* x, float* y) { GRID_STRIDE(i, n) y[i] = x[i] > 0.0f ? x[i] : 0.0f; }
// GELU and its derivative, one definition for the three kernels below, so that
// gelu_forward_deriv is bitwise gelu_forward and gelu_backward of ones (the same code).
__device__ __forceinline__ float dev_gelu(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)); }
__device__ __forceinline__ float dev_gelu_deriv(float v) {
  const float cdf = 0.5f * (1.0f + erff(v * 0.70710678118654752f));
  const float pdf = 0.39894228040143268f * expf(-0.5f * v * v);
  return cdf + v * pdf;
}
// X, Y = float (an f32 view) or uint16_t (a bf16 view: the bf16 of each value, written
// directly, so a bf16 y needs only its ceil(n / 2) floats; read widened)
__device__ __forceinline__ void dev_store(float* y, size_t i, float v) { y[i] = v; }
__device__ __forceinline__ void dev_store(uint16_t* y, size_t i, float v) { y[i] = dev_bf16_bits(v); }
__device__ __forceinline__ float dev_load(const float* x, size_t i) { return x[i]; }
__device__ __forceinline__ float dev_load(const uint16_t* x, size_t i) { return __uint_as_float(static_cast<uint32_t>(x[i]) << 16); }
template <class Y>
__global__ void k_relu_backward(size_t n, const Y* y, const float* dy, float* dx) {
  GRID_STRIDE(i, n) dx[i] = dev_load(y, i) > 0.0f ? dy[i] : 0.0f;
}
template <class X, class Y>
__global__ void k_gelu_forward(size_t n, const X* x, Y* y) { GRID_STRIDE(i, n) dev_store(y, i, dev_gelu(dev_load(x, i))); }
template <class X, class Y>
__global__ void k_gelu_backward(size_t n, const X* x, const float* dy, Y* dx) {
  GRID_STRIDE(i, n) dev_store(dx, i, dy[i] * dev_gelu_deriv(dev_load(x, i)));
}
template <class Y>
__global__ void k_gelu_forward_deriv(size_t n, float* x, Y* y) {
  GRID_STRIDE(i, n) {
    const float v = x[i];
    dev_store(y, i, dev_gelu(v));
    x[i] = 1.0f * dev_gelu_deriv(v);  // as gelu_backward with dy = 1
  }
}
template <class Y>
__global__ void k_mul(size_t n, const float* a, const float* b, Y* y) {
  GRID_STRIDE(i, n) { dev_store(y, i, a[i] * b[i]); }
}


// one block per row; mean and variance in double as on the host
__global__ void k_layernorm_forward(int64_t cols, float eps, const float* x, const float* gamma, const float* beta,
                                    float* y, float* stats) {
  __shared__ double sh[kThreads];
  const int64_t r = blockIdx.x;
  const float* xr = x + r * cols;
  double s = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += xr[c];
  const double mean = block_sum(s, sh) / static_cast<double>(cols);
  double v = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) v += (xr[c] - mean) * (xr[c] - mean);
  const double var = block_sum(v, sh) / static_cast<double>(cols);
  const float m = static_cast<float>(mean), rstd = static_cast<float>(1.0 / sqrt(var + eps));
  float* yr = y + r * cols;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = (xr[c] - m) * rstd * gamma[c] + beta[c];
  if (threadIdx.x == 0) {
    stats[2 * r] = m;
    stats[2 * r + 1] = rstd;
  }
}

// dx of one row per block (the row sums in double as on the host)
__global__ void k_layernorm_backward_dx(int64_t cols, const float* x, const float* gamma, const float* stats,
                                        const float* dy, float* dx) {
  __shared__ double sh[kThreads];
  const int64_t r = blockIdx.x;
  const float* xr = x + r * cols;
  const float* dyr = dy + r * cols;
  const float m = stats[2 * r], rstd = stats[2 * r + 1];
  double s1 = 0, s2 = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float xhat = (xr[c] - m) * rstd;
    const float dxhat = dyr[c] * gamma[c];
    s1 += dxhat;
    s2 += dxhat * xhat;
  }
  const double sum_dxhat = block_sum(s1, sh), sum_dxhat_xhat = block_sum(s2, sh);
  const float a = static_cast<float>(sum_dxhat / cols), b = static_cast<float>(sum_dxhat_xhat / cols);
  float* dxr = dx + r * cols;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float xhat = (xr[c] - m) * rstd;
    dxr[c] = rstd * (dyr[c] * gamma[c] - a - xhat * b);
  }
}

// dgamma, dbeta: one thread per column, rows in order (the host's order)
__global__ void k_layernorm_backward_params(int64_t rows, int64_t cols, const float* x, const float* stats,
                                            const float* dy, float* dgamma, float* dbeta) {
  GRID_STRIDE(cc, static_cast<size_t>(cols)) {
    const int64_t c = static_cast<int64_t>(cc);
    float g = dgamma[c], b = dbeta[c];
    for (int64_t r = 0; r < rows; ++r) {
      const float xhat = (x[r * cols + c] - stats[2 * r]) * stats[2 * r + 1];
      const float d = dy[r * cols + c];
      g += d * xhat;
      b += d;
    }
    dgamma[c] = g;
    dbeta[c] = b;
  }
}

// element i of the microbatch is element (sample0 * features + i) of the layer's stream
__global__ void k_dropout(size_t total, int64_t features, float p, float keep_scale, uint64_t key, int64_t sample0,
                          const float* x, float* y) {
  GRID_STRIDE(i, total) {
    const uint64_t idx = static_cast<uint64_t>(sample0 * features + static_cast<int64_t>(i));
    y[i] = dev_uniform(key, idx) >= p ? x[i] * keep_scale : 0.0f;
  }
}

// one thread per sample (classes are few); the host's loop order
__global__ void k_softmax_xent_forward(int64_t n, int64_t classes, const float* logits, const int32_t* labels,
                                       float* loss, float* probs) {
  GRID_STRIDE(ii, static_cast<size_t>(n)) {
    const int64_t i = static_cast<int64_t>(ii);
    const float* l = logits + i * classes;
    float* pr = probs + i * classes;
    const float target = l[labels[i]];  // read first: probs may alias logits
    float mx = l[0];
    for (int64_t c = 1; c < classes; ++c) mx = l[c] > mx ? l[c] : mx;
    float s = 0.0f;
    for (int64_t c = 0; c < classes; ++c) {
      pr[c] = expf(l[c] - mx);
      s += pr[c];
    }
    const float inv = 1.0f / s;
    for (int64_t c = 0; c < classes; ++c) pr[c] *= inv;
    loss[i] = logf(s) + mx - target;
  }
}

__global__ void k_softmax_xent_backward(size_t total, int64_t classes, const float* probs, const int32_t* labels,
                                        float scale, float* dlogits) {
  GRID_STRIDE(i, total) {
    const int64_t row = static_cast<int64_t>(i) / classes, c = static_cast<int64_t>(i) % classes;
    float d = scale * probs[i];
    if (c == labels[row]) d -= scale;
    dlogits[i] = d;
  }
}

// the vocabulary-parallel pieces (backend.hpp): one thread per row, the host's loop order
__global__ void k_xent_shard_max(int64_t n, int64_t classes, const float* logits, float* mx) {
  GRID_STRIDE(ii, static_cast<size_t>(n)) {
    const int64_t i = static_cast<int64_t>(ii);
    const float* l = logits + i * classes;
    float m = -INFINITY;
    for (int64_t c = 0; c < classes; ++c) m = l[c] > m ? l[c] : m;
    mx[i] = m;
  }
}
__global__ void k_xent_shard_sums(int64_t n, int64_t classes, int64_t c0, const float* logits, const int32_t* labels,
                                  const float* mx, float* sums) {
  GRID_STRIDE(ii, static_cast<size_t>(n)) {
    const int64_t i = static_cast<int64_t>(ii);
    const float* l = logits + i * classes;
    float s = 0.0f;
    for (int64_t c = 0; c < classes; ++c) s += expf(l[c] - mx[i]);
    const int64_t k = labels[i] - c0;
    sums[i] = s;
    sums[n + i] = k >= 0 && k < classes ? l[k] : 0.0f;
  }
}
__global__ void k_xent_shard_finish(int64_t n, int64_t classes, const float* logits, const float* mx, const float* sums,
                                    float* loss, float* probs) {
  GRID_STRIDE(ii, static_cast<size_t>(n)) {
    const int64_t i = static_cast<int64_t>(ii);
    const float* l = logits + i * classes;
    float* pr = probs + i * classes;
    const float inv = 1.0f / sums[i];
    for (int64_t c = 0; c < classes; ++c) pr[c] = expf(l[c] - mx[i]) * inv;
    loss[i] = logf(sums[i]) + mx[i] - sums[n + i];
  }
}
__global__ void k_xent_shard_backward(size_t total, int64_t classes, int64_t c0, const float* probs,
                                      const int32_t* labels, float scale, float* dlogits) {
  GRID_STRIDE(i, total) {
    const int64_t row = static_cast<int64_t>(i) / classes, c = static_cast<int64_t>(i) % classes;
    float d = scale * probs[i];
    if (c == labels[row] - c0) d -= scale;
    dlogits[i] = d;
  }
}

__global__ void k_count_correct(int64_t n, int64_t classes, const float* logits, const int32_t* labels,
                                unsigned long long* count) {
  GRID_STRIDE(ii, static_cast<size_t>(n)) {
    const int64_t i = static_cast<int64_t>(ii);
    const float* l = logits + i * classes;
    int64_t best = 0;
    for (int64_t c = 1; c < classes; ++c)
      if (l[c] > l[best]) best = c;
    if (best == labels[i]) atomicAdd(count, 1ull);
  }
}

// deterministic sum: fixed grid of partials, then one block over the partials
__global__ void k_sum_partial(size_t n, const float* x, double* partial) {
  __shared__ double sh[kThreads];
  double s = 0;
  GRID_STRIDE(i, n) s += x[i];
  s = block_sum(s, sh);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}
__global__ void k_sum_squares_partial(size_t n, const float* x, double* partial) {
  __shared__ double sh[kThreads];
  double s = 0;
  GRID_STRIDE(i, n) {
    const double v = x[i];
    s += v * v;
  }
  s = block_sum(s, sh);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}
__global__ void k_sum_final(int parts, const double* partial, double* out) {
  __shared__ double sh[1024];
  double s = 0;
  for (int i = threadIdx.x; i < parts; i += blockDim.x) s += partial[i];
  s = block_sum(s, sh);
  if (threadIdx.x == 0) *out = s;
}

__global__ void k_any_nonfinite(size_t n, const float* x, unsigned long long* flag) {
  GRID_STRIDE(i, n)
  if (!isfinite(x[i])) *flag = 1ull;  // benign race: every writer stores 1
}

__global__ void k_sgd(size_t n, float* w, const float* g, float* buf, float lr, float momentum, float weight_decay,
                      bool nesterov, float grad_scale) {
  GRID_STRIDE(i, n) {
    float d = g[i] * grad_scale;
    if (weight_decay != 0.0f) d += weight_decay * w[i];
    if (momentum != 0.0f) {
      buf[i] = momentum * buf[i] + d;
      d = nesterov ? d + momentum * buf[i] : buf[i];
    }
    w[i] -= lr * d;
  }
}

__global__ void k_adamw(size_t n, float* w, const float* g, float* m, float* v, float beta1, float beta2, float c1,
                        float c2, float eps, float decay, float step_size, float bc2_sqrt, float grad_scale) {
  GRID_STRIDE(i, n) {
    const float gi = g[i] * grad_scale;
    w[i] *= decay;
    m[i] = beta1 * m[i] + c1 * gi;
    v[i] = beta2 * v[i] + c2 * gi * gi;
    const float denom = sqrtf(v[i]) / bc2_sqrt + eps;
    w[i] -= step_size * (m[i] / denom);
  }
}

struct PoolDims {
  int64_t k, st, pad, h_in, w_in, h_out, w_out;
};

// one thread per output; the first maximum in window scan order wins (the host's and
// PyTorch's tie rule); argmax is the flat index within the input plane
__global__ void k_maxpool_forward(size_t total, PoolDims d, const float* x, float* y, int32_t* argmax) {
  const int64_t out_plane = d.h_out * d.w_out, in_plane = d.h_in * d.w_in;
  GRID_STRIDE(i, total) {
    const int64_t plane = static_cast<int64_t>(i) / out_plane, o = static_cast<int64_t>(i) % out_plane;
    const int64_t oh = o / d.w_out, ow = o % d.w_out;
    const float* xp = x + plane * in_plane;
    const int64_t ih0 = max(int64_t{0}, oh * d.st - d.pad), iw0 = max(int64_t{0}, ow * d.st - d.pad);
    const int64_t ih1 = min(d.h_in, oh * d.st - d.pad + d.k), iw1 = min(d.w_in, ow * d.st - d.pad + d.k);
    float best = xp[ih0 * d.w_in + iw0];
    int32_t at = static_cast<int32_t>(ih0 * d.w_in + iw0);
    for (int64_t ih = ih0; ih < ih1; ++ih)
      for (int64_t iw = iw0; iw < iw1; ++iw) {
        const float v = xp[ih * d.w_in + iw];
        if (v > best) {
          best = v;
          at = static_cast<int32_t>(ih * d.w_in + iw);
        }
      }
    y[i] = best;
    argmax[i] = at;
  }
}

// one thread per input element, gathering from the windows that cover it in increasing
// output order: the same additions in the same order as the host's scatter
__global__ void k_maxpool_backward(size_t total, PoolDims d, const float* dy, const int32_t* argmax, float* dx) {
  const int64_t out_plane = d.h_out * d.w_out, in_plane = d.h_in * d.w_in;
  GRID_STRIDE(i, total) {
    const int64_t plane = static_cast<int64_t>(i) / in_plane, e = static_cast<int64_t>(i) % in_plane;
    const int64_t ih = e / d.w_in, iw = e % d.w_in;
    const int64_t nh = ih + d.pad - d.k + 1, nw = iw + d.pad - d.k + 1;
    const int64_t oh0 = nh <= 0 ? 0 : (nh + d.st - 1) / d.st, ow0 = nw <= 0 ? 0 : (nw + d.st - 1) / d.st;
    const int64_t oh1 = min(d.h_out - 1, (ih + d.pad) / d.st), ow1 = min(d.w_out - 1, (iw + d.pad) / d.st);
    const float* dyp = dy + plane * out_plane;
    const int32_t* ap = argmax + plane * out_plane;
    float acc = 0.0f;
    for (int64_t oh = oh0; oh <= oh1; ++oh)
      for (int64_t ow = ow0; ow <= ow1; ++ow) {
        const int64_t o = oh * d.w_out + ow;
        if (ap[o] == e) acc += dyp[o];
      }
    dx[i] = acc;
  }
}

PoolDims dims_of(const WindowGeom& g) { return {g.kernel, g.stride, g.padding, g.h_in, g.w_in, g.h_out, g.w_out}; }

}  // namespace

void CudaBackend::fill(float* x, float v, size_t n) {
  if (n == 0) return;
  if (v == 0.0f && !std::signbit(v)) {
    PT_CU_CHECK(cudaMemsetAsync(x, 0, n * sizeof(float), compute_));
    return;
  }
  k_fill<<<blocks_for(n), kThreads, 0, compute_>>>(x, v, n);
  PT_CU_LAUNCHED();
}

void CudaBackend::axpy(size_t n, float a, const float* x, float* y) {
  if (n == 0) return;
  k_axpy<<<blocks_for(n), kThreads, 0, compute_>>>(n, a, x, y);
  PT_CU_LAUNCHED();
}

void CudaBackend::scale(size_t n, float a, float* x) {
  if (n == 0) return;
  if (a == 0.0f) {  // as the host: zero, even where x held NaN or inf
    PT_CU_CHECK(cudaMemsetAsync(x, 0, n * sizeof(float), compute_));
    return;
  }
  k_scale<<<blocks_for(n), kThreads, 0, compute_>>>(n, a, x);
  PT_CU_LAUNCHED();
}

void CudaBackend::bias_add_rows(float* y, const float* b, int64_t rows, int64_t cols) {
  const size_t total = static_cast<size_t>(rows * cols);
  if (total == 0) return;
  k_bias_add_rows<<<blocks_for(total), kThreads, 0, compute_>>>(y, b, total, cols);
  PT_CU_LAUNCHED();
}

void CudaBackend::bias_grad_rows(CView dy, float* db, int64_t rows, int64_t cols) {
  if (dy.bf16()) return bias_grad_rows_bf16(dy.data, db, rows, cols);
  if (rows == 0 || cols == 0) return;
  k_bias_grad_rows<<<blocks_for(static_cast<size_t>(cols)), kThreads, 0, compute_>>>(dy.data, db, rows, cols);
  PT_CU_LAUNCHED();
}

void CudaBackend::relu_forward(size_t n, const float* x, float* y) {
  if (n == 0) return;
  k_relu_forward<<<blocks_for(n), kThreads, 0, compute_>>>(n, x, y);
  PT_CU_LAUNCHED();
}
void CudaBackend::relu_backward(size_t n, CView y, const float* dy, float* dx) {
  if (n == 0) return;
  if (y.bf16())
    k_relu_backward<<<blocks_for(n), kThreads, 0, compute_>>>(n, reinterpret_cast<const uint16_t*>(y.data), dy, dx);
  else
    k_relu_backward<<<blocks_for(n), kThreads, 0, compute_>>>(n, y.data, dy, dx);
  PT_CU_LAUNCHED();
}
// k<<<...>>>(n, x, args..., y) with x and y as their views' element types
#define PT_LAUNCH_VIEWS(k, n, x, y, ...)                                                                  \
  do {                                                                                                 \
    const auto* xf = (x).data;                                                                         \
    const auto* xb = reinterpret_cast<const uint16_t*>((x).data);                                      \
    auto* yb = reinterpret_cast<uint16_t*>((y).data);                                                  \
    if ((x).bf16() && (y).bf16()) k<<<blocks_for(n), kThreads, 0, compute_>>>(n, xb, __VA_ARGS__ yb);   \
    else if ((x).bf16()) k<<<blocks_for(n), kThreads, 0, compute_>>>(n, xb, __VA_ARGS__(y).data);      \
    else if ((y).bf16()) k<<<blocks_for(n), kThreads, 0, compute_>>>(n, xf, __VA_ARGS__ yb);           \
    else k<<<blocks_for(n), kThreads, 0, compute_>>>(n, xf, __VA_ARGS__(y).data);                      \
    PT_CU_LAUNCHED();                                                                                  \
  } while (0)
void CudaBackend::gelu_forward(size_t n, CView x, View y) {
  if (n == 0) return;
  PT_LAUNCH_VIEWS(k_gelu_forward, n, x, y, );
  zero_odd_tail(n, y);
}
// A bf16 y's odd last word: its upper half 0, as pack_bf16 leaves it.
void CudaBackend::zero_odd_tail(size_t n, View y) {
  if (y.bf16() && n % 2) PT_CU_CHECK(cudaMemsetAsync(reinterpret_cast<uint16_t*>(y.data) + n, 0, 2, compute_));
}
void CudaBackend::mul(size_t n, const float* a, const float* b, View y) {
  if (n == 0) return;
  if (y.bf16()) k_mul<<<blocks_for(n), kThreads, 0, compute_>>>(n, a, b, reinterpret_cast<uint16_t*>(y.data));
  else k_mul<<<blocks_for(n), kThreads, 0, compute_>>>(n, a, b, y.data);
  PT_CU_LAUNCHED();
  zero_odd_tail(n, y);
}
void CudaBackend::gelu_forward_deriv(size_t n, float* x, View y) {
  if (n == 0) return;
  if (y.bf16()) k_gelu_forward_deriv<<<blocks_for(n), kThreads, 0, compute_>>>(n, x, reinterpret_cast<uint16_t*>(y.data));
  else k_gelu_forward_deriv<<<blocks_for(n), kThreads, 0, compute_>>>(n, x, y.data);
  PT_CU_LAUNCHED();
  zero_odd_tail(n, y);
}
void CudaBackend::gelu_backward(size_t n, CView x, const float* dy, View dx) {
  if (n == 0) return;
  PT_LAUNCH_VIEWS(k_gelu_backward, n, x, dx, dy, );
  zero_odd_tail(n, dx);
}

void CudaBackend::layernorm_forward(int64_t rows, int64_t cols, float eps, const float* x, const float* gamma,
                                    const float* beta, float* y, float* stats) {
  if (rows == 0) return;
  PT_CHECK(rows <= INT32_MAX, "layernorm rows " << rows);
  k_layernorm_forward<<<static_cast<unsigned>(rows), kThreads, 0, compute_>>>(cols, eps, x, gamma, beta, y, stats);
  PT_CU_LAUNCHED();
}

void CudaBackend::layernorm_backward(int64_t rows, int64_t cols, const float* x, const float* gamma,
                                     const float* stats, const float* dy, float* dx, float* dgamma, float* dbeta) {
  if (rows == 0) return;
  PT_CHECK(rows <= INT32_MAX, "layernorm rows " << rows);
  if (dgamma) {
    k_layernorm_backward_params<<<blocks_for(static_cast<size_t>(cols)), kThreads, 0, compute_>>>(rows, cols, x, stats,
                                                                                                 dy, dgamma, dbeta);
    PT_CU_LAUNCHED();
  }
  if (dx) {
    k_layernorm_backward_dx<<<static_cast<unsigned>(rows), kThreads, 0, compute_>>>(cols, x, gamma, stats, dy, dx);
    PT_CU_LAUNCHED();
  }
}

void CudaBackend::dropout_forward(int64_t n, int64_t features, float p, uint64_t key, int64_t sample0, const float* x,
                                  float* y) {
  const size_t total = static_cast<size_t>(n * features);
  if (total == 0) return;
  const float keep_scale = 1.0f / (1.0f - p);
  k_dropout<<<blocks_for(total), kThreads, 0, compute_>>>(total, features, p, keep_scale, key, sample0, x, y);
  PT_CU_LAUNCHED();
}

void CudaBackend::dropout_backward(int64_t n, int64_t features, float p, uint64_t key, int64_t sample0,
                                   const float* dy, float* dx) {
  const size_t total = static_cast<size_t>(n * features);
  if (total == 0) return;
  const float keep_scale = 1.0f / (1.0f - p);
  k_dropout<<<blocks_for(total), kThreads, 0, compute_>>>(total, features, p, keep_scale, key, sample0, dy, dx);
  PT_CU_LAUNCHED();
}

void CudaBackend::softmax_xent_forward(int64_t n, int64_t classes, const float* logits, const int32_t* labels,
                                       float* loss, float* probs) {
  if (n == 0) return;
  k_softmax_xent_forward<<<blocks_for(static_cast<size_t>(n), 128), 128, 0, compute_>>>(n, classes, logits, labels,
                                                                                         loss, probs);
  PT_CU_LAUNCHED();
}

void CudaBackend::softmax_xent_backward(int64_t n, int64_t classes, const float* probs, const int32_t* labels,
                                        float scale, float* dlogits) {
  const size_t total = static_cast<size_t>(n * classes);
  if (total == 0) return;
  k_softmax_xent_backward<<<blocks_for(total), kThreads, 0, compute_>>>(total, classes, probs, labels, scale, dlogits);
  PT_CU_LAUNCHED();
}

void CudaBackend::softmax_xent_shard_max(int64_t n, int64_t classes, const float* logits, float* mx) {
  if (n == 0) return;
  k_xent_shard_max<<<blocks_for(static_cast<size_t>(n), 128), 128, 0, compute_>>>(n, classes, logits, mx);
  PT_CU_LAUNCHED();
}
void CudaBackend::softmax_xent_shard_sums(int64_t n, int64_t classes, int64_t c0, const float* logits,
                                          const int32_t* labels, const float* mx, float* sums) {
  if (n == 0) return;
  k_xent_shard_sums<<<blocks_for(static_cast<size_t>(n), 128), 128, 0, compute_>>>(n, classes, c0, logits, labels, mx,
                                                                                    sums);
  PT_CU_LAUNCHED();
}
void CudaBackend::softmax_xent_shard_finish(int64_t n, int64_t classes, const float* logits, const float* mx,
                                            const float* sums, float* loss, float* probs) {
  if (n == 0) return;
  k_xent_shard_finish<<<blocks_for(static_cast<size_t>(n), 128), 128, 0, compute_>>>(n, classes, logits, mx, sums, loss,
                                                                                      probs);
  PT_CU_LAUNCHED();
}
void CudaBackend::softmax_xent_shard_backward(int64_t n, int64_t classes, int64_t c0, const float* probs,
                                              const int32_t* labels, float scale, float* dlogits) {
  const size_t total = static_cast<size_t>(n * classes);
  if (total == 0) return;
  k_xent_shard_backward<<<blocks_for(total), kThreads, 0, compute_>>>(total, classes, c0, probs, labels, scale, dlogits);
  PT_CU_LAUNCHED();
}

int64_t CudaBackend::count_correct(int64_t n, int64_t classes, const float* logits, const int32_t* labels) {
  if (n == 0) return 0;
  PT_CU_CHECK(cudaMemsetAsync(cnt_dev_, 0, sizeof(unsigned long long), compute_));
  k_count_correct<<<blocks_for(static_cast<size_t>(n), 128), 128, 0, compute_>>>(n, classes, logits, labels, cnt_dev_);
  PT_CU_LAUNCHED();
  auto* h = static_cast<unsigned long long*>(red_host_.data());
  PT_CU_CHECK(cudaMemcpyAsync(h, cnt_dev_, sizeof(unsigned long long), cudaMemcpyDeviceToHost, compute_));
  PT_CU_CHECK(cudaStreamSynchronize(compute_));
  return static_cast<int64_t>(*h);
}

double CudaBackend::sum(size_t n, const float* x) {
  if (n == 0) return 0.0;
  const unsigned parts = std::min<unsigned>(blocks_for(n), kRedBlocks);
  k_sum_partial<<<parts, kThreads, 0, compute_>>>(n, x, red_dev_);
  PT_CU_LAUNCHED();
  return reduce_partials(parts);
}

// A fixed tree that depends on n alone (the grid, then the block's halvings): the same values
// give the same bits in any buffer (backend.hpp), not the host's 16-lane order.
double CudaBackend::sum_squares(size_t n, const float* x) {
  if (n == 0) return 0.0;
  const unsigned parts = std::min<unsigned>(blocks_for(n), kRedBlocks);
  k_sum_squares_partial<<<parts, kThreads, 0, compute_>>>(n, x, red_dev_);
  PT_CU_LAUNCHED();
  return reduce_partials(parts);
}

double CudaBackend::reduce_partials(unsigned parts) {
  k_sum_final<<<1, 1024, 0, compute_>>>(static_cast<int>(parts), red_dev_, red_dev_ + kRedBlocks);
  PT_CU_LAUNCHED();
  auto* h = static_cast<double*>(red_host_.data());
  PT_CU_CHECK(cudaMemcpyAsync(h, red_dev_ + kRedBlocks, sizeof(double), cudaMemcpyDeviceToHost, compute_));
  PT_CU_CHECK(cudaStreamSynchronize(compute_));
  return *h;
}

bool CudaBackend::all_finite(size_t n, const float* x) {
  if (n == 0) return true;
  PT_CU_CHECK(cudaMemsetAsync(cnt_dev_, 0, sizeof(unsigned long long), compute_));
  k_any_nonfinite<<<blocks_for(n), kThreads, 0, compute_>>>(n, x, cnt_dev_);
  PT_CU_LAUNCHED();
  auto* h = static_cast<unsigned long long*>(red_host_.data());
  PT_CU_CHECK(cudaMemcpyAsync(h, cnt_dev_, sizeof(unsigned long long), cudaMemcpyDeviceToHost, compute_));
  PT_CU_CHECK(cudaStreamSynchronize(compute_));
  return *h == 0;
}

void CudaBackend::sgd_update(size_t n, float* w, const float* g, float* buf, float lr, float momentum,
                             float weight_decay, bool nesterov, float grad_scale) {
  if (n == 0) return;
  k_sgd<<<blocks_for(n), kThreads, 0, compute_>>>(n, w, g, buf, lr, momentum, weight_decay, nesterov, grad_scale);
  PT_CU_LAUNCHED();
}

void CudaBackend::adamw_update(size_t n, float* w, const float* g, float* m, float* v, double lr, double beta1,
                               double beta2, double eps, double weight_decay, int64_t step, float grad_scale) {
  if (n == 0) return;
  // the scalars exactly as the host backend computes them
  const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(step));
  const float step_size = static_cast<float>(lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float decay = static_cast<float>(1.0 - lr * weight_decay);
  k_adamw<<<blocks_for(n), kThreads, 0, compute_>>>(n, w, g, m, v, static_cast<float>(beta1), static_cast<float>(beta2),
                                                     static_cast<float>(1.0 - beta1), static_cast<float>(1.0 - beta2),
                                                     static_cast<float>(eps), decay, step_size, bc2_sqrt, grad_scale);
  PT_CU_LAUNCHED();
}

void CudaBackend::maxpool_forward(const WindowGeom& g, int64_t n, const float* x, float* y, int32_t* argmax) {
  const size_t total = static_cast<size_t>(n * g.c_in * g.h_out * g.w_out);
  if (total == 0) return;
  k_maxpool_forward<<<blocks_for(total), kThreads, 0, compute_>>>(total, dims_of(g), x, y, argmax);
  PT_CU_LAUNCHED();
}

void CudaBackend::maxpool_backward(const WindowGeom& g, int64_t n, const float* dy, const int32_t* argmax,
                                   float* dx) {
  const size_t total = static_cast<size_t>(n * g.c_in * g.h_in * g.w_in);
  if (total == 0) return;
  k_maxpool_backward<<<blocks_for(total), kThreads, 0, compute_>>>(total, dims_of(g), dy, argmax, dx);
  PT_CU_LAUNCHED();
}

}  // namespace pt::cuda
