// Host backend: memory, GEMM (oneDNN matmul or OpenBLAS through KokkosBlas, chosen per shape
// by the measured rule in kernel_choice.cpp; always oneDNN in bf16), and the elementwise,
// loss, reduction and optimizer kernels as named Kokkos kernels on the Serial space.
#include "host_backend.hpp"

#include <KokkosBlas3_gemm.hpp>

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "pipetrain/error.hpp"
#include "pipetrain/rng.hpp"
#include "pipetrain/views.hpp"
#include "vec_math.hpp"

extern "C" char* openblas_get_corename(void);

namespace pt {

std::unique_ptr<Backend> make_host_backend() { return std::make_unique<host::HostBackend>(); }

namespace host {

namespace {

// PT_HUGE_PAGES is not "0" (alloc asks for huge pages), and the kernel may give them.
bool huge_pages_asked() {
  const char* huge = std::getenv("PT_HUGE_PAGES");
  return !(huge && std::string(huge) == "0");
}

bool huge_pages_given() {
  static const bool given = [] {
    std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string line;
    return std::getline(in, line) && line.find("[never]") == std::string::npos;
  }();
  return given;
}

constexpr size_t kHugePageBytes = size_t{2} << 20;

size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

}  // namespace

}  // namespace host

int64_t host_resident_bytes(int64_t bytes, bool huge_pages) {
  const size_t b = static_cast<size_t>(std::max<int64_t>(0, bytes));
  if (huge_pages && b >= host::kHugePageBytes && host::huge_pages_asked() && host::huge_pages_given())
    return static_cast<int64_t>(host::round_up(b, host::kHugePageBytes));
  if (b >= (size_t{128} << 10)) return static_cast<int64_t>(host::round_up(b, size_t{4} << 10));
  return static_cast<int64_t>(b);
}

namespace host {

HostBackend::HostBackend() {
  PT_CHECK(Kokkos::is_initialized(), "Kokkos must be initialised before the host backend");
  huge_pages_ = huge_pages_asked();
  onednn_threads_default();
}

std::string HostBackend::describe() const {
  return std::string("cpu (Kokkos ") + std::to_string(KOKKOS_VERSION / 10000) + "." +
         std::to_string(KOKKOS_VERSION / 100 % 100) + " Serial, OpenBLAS " + openblas_get_corename() + ", oneDNN " +
         onednn_version() + ")";
}

// Buffers of 2 MiB and more sit on 2 MiB pages where the kernel allows it (transparent huge
// pages, often "madvise" only): a token-major activation is read a head's columns at a time,
// one row per 4 KiB page otherwise, and the TLB misses showed in the attention kernel.
// PT_HUGE_PAGES=0 in the environment turns this off (docs/JOBS.md, "Memory pages").
float* HostBackend::alloc(size_t n) {
  const size_t bytes = n * sizeof(float);
  float* p = nullptr;
  if (huge_pages_ && bytes >= kHugePage) {
    const size_t span = round_up(bytes, kHugePage);
    void* v = nullptr;
    PT_CHECK(posix_memalign(&v, kHugePage, span) == 0, "host backend: cannot allocate " << span << " bytes");
    madvise(v, span, MADV_HUGEPAGE);  // advice only: without huge pages the buffer works the same
    p = static_cast<float*>(v);
    huge_.insert(p);
  } else {
    p = static_cast<float*>(Kokkos::kokkos_malloc<Kokkos::HostSpace>("pt::buffer", bytes));
  }
  std::memset(p, 0, bytes);
  return p;
}
void HostBackend::release(float* p) {
  if (huge_.erase(p)) return std::free(p);
  Kokkos::kokkos_free<Kokkos::HostSpace>(p);
}
void HostBackend::copy(float* dst, const float* src, size_t n) {
  if (dst != src) std::memcpy(dst, src, n * sizeof(float));
}
void HostBackend::to_host(float* host, const float* src, size_t n) { copy(host, src, n); }
void HostBackend::from_host(float* dst, const float* host, size_t n) { copy(dst, host, n); }
void HostBackend::fill(float* x, float v, size_t n) {
  Kokkos::parallel_for("pt::fill", Range(0, n), [=](size_t i) { x[i] = v; });
}

int32_t* HostBackend::alloc_int(size_t n) {
  auto* p = static_cast<int32_t*>(Kokkos::kokkos_malloc<Kokkos::HostSpace>("pt::labels", n * sizeof(int32_t)));
  std::memset(p, 0, n * sizeof(int32_t));
  return p;
}
void HostBackend::release_int(int32_t* p) { Kokkos::kokkos_free<Kokkos::HostSpace>(p); }
void HostBackend::labels_from_host(int32_t* dst, const int32_t* host, size_t n) {
  if (dst != host) std::memcpy(dst, host, n * sizeof(int32_t));
}

float* HostBackend::workspace(size_t n) {
  if (ws_.size() < n) ws_.resize(n);
  return ws_.data();
}

OneDnn& HostBackend::onednn() {
  if (!dnn_) dnn_ = std::make_unique<OneDnn>();
  return *dnn_;
}

bool HostBackend::onednn_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t batch, Precision p) const {
  if (p == Precision::bf16) return true;
  switch (fp32_kernels_) {
    case Fp32Kernels::openblas: return false;
    case Fp32Kernels::onednn: return true;
    default: return onednn_wins_gemm_fp32(ta, tb, M, N, K, batch);
  }
}

bool HostBackend::onednn_conv(const WindowGeom& g, int64_t n, ConvPass pass, Precision p) const {
  if (p == Precision::bf16) return true;
  switch (fp32_kernels_) {
    case Fp32Kernels::openblas: return false;
    case Fp32Kernels::onednn: return true;
    default: return onednn_wins_conv_fp32(g, n, pass);
  }
}

void HostBackend::blas_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                            const float* B, float beta, float* C) {
  ConstMatrix a(A, ta ? K : M, ta ? M : K), b(B, tb ? N : K, tb ? K : N);
  Matrix c(C, M, N);
  Lap lap;
  KokkosBlas::gemm(ta ? "T" : "N", tb ? "T" : "N", alpha, a, b, beta, c);
  blas_s_ += lap();
}

Backend::KernelClock HostBackend::kernel_clock() const {
  KernelClock k;
  k.product_s = blas_s_;
  if (dnn_) {
    k.product_s += dnn_->clock().execute_s;
    k.convert_s = dnn_->clock().prepare_s;
  }
  return k;
}

// oneDNN in bf16 and for the fp32 shapes the rule gives it (and for strided operands, which
// the KokkosBlas path does not take); OpenBLAS through KokkosBlas otherwise. oneDNN reads
// bf16 views as they are.
void HostBackend::gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, CView A, int64_t lda, CView B,
                       int64_t ldb, float beta, float* C, int64_t ldc, Precision p) {
  PT_CHECK(p == Precision::bf16 || (!A.bf16() && !B.bf16()), "gemm: a bf16 operand in an fp32 product");
  PT_CHECK((!A.bf16() || lda == (ta ? M : K)) && (!B.bf16() || ldb == (tb ? K : N)),
           "gemm: a bf16 operand must be dense (lda " << lda << ", ldb " << ldb << ")");
  if (M == 0 || N == 0) return;
  if (K == 0) {  // C = beta C
    PT_CHECK(ldc == N, "gemm with K = 0 wants a contiguous C: ldc " << ldc << " vs " << N);
    scale(static_cast<size_t>(M * N), beta, C);
    return;
  }
  const bool contiguous = lda == (ta ? M : K) && ldb == (tb ? K : N) && ldc == N;
  if (!contiguous || onednn_gemm(ta, tb, M, N, K, 1, p)) {
    GemmArgs a;
    a.ta = ta, a.tb = tb, a.M = M, a.N = N, a.K = K, a.alpha = alpha, a.beta = beta;
    a.A = A.data, a.lda = lda, a.B = B.data, a.ldb = ldb, a.C = C, a.ldc = ldc;
    a.a_bf16 = A.bf16(), a.b_bf16 = B.bf16();
    use_twins(a, p);
    onednn().gemm(p, a);
    return;
  }
  blas_gemm(ta, tb, M, N, K, alpha, A.data, B.data, beta, C);
}

// One oneDNN matmul with the bias where the rule gives the product to oneDNN; else the
// default composition (OpenBLAS GEMM, then the bias pass).
void HostBackend::linear_forward(int64_t rows, int64_t in, int64_t out, CView x, const float* w, const float* b,
                                 View y, Precision p) {
  if (rows == 0 || out == 0) return;
  if (in == 0 || !onednn_gemm(false, true, rows, out, in, 1, p)) return Backend::linear_forward(rows, in, out, x, w, b, y, p);
  PT_CHECK(p == Precision::bf16 || (!x.bf16() && !y.bf16()), "linear_forward: a bf16 operand in an fp32 product");
  GemmArgs a;
  a.tb = true, a.M = rows, a.N = out, a.K = in;
  a.A = x.data, a.lda = in, a.B = w, a.ldb = in, a.C = y.data, a.ldc = out, a.bias = b, a.a_bf16 = x.bf16();
  a.c_bf16 = y.bf16();
  use_twins(a, p);
  onednn().gemm(p, a);
}

// Forgetting a twin (packed = null: its buffers may be freed) drops the weights' kept layouts.
void HostBackend::set_bf16_twin(const float* values, size_t n, const float* packed) {
  auto it = std::find_if(twins_.begin(), twins_.end(), [&](const Twin& t) { return t.values == values; });
  if (it != twins_.end()) twins_.erase(it);
  if (packed && n) twins_.push_back({values, n, packed, ++twin_versions_});
  else if (dnn_) dnn_->forget_weights(values, values + n);
}

const HostBackend::Twin* HostBackend::twin_of(const float* p, size_t count) const {
  for (const Twin& t : twins_)
    if (p >= t.values && p + count <= t.values + t.n) return &t;
  return nullptr;
}

namespace {
const float* in_twin(const float* packed, const float* values, const float* p) {
  return reinterpret_cast<const float*>(reinterpret_cast<const unsigned char*>(packed) + 2 * (p - values));
}
}  // namespace

// Only bf16 operands oneDNN would convert as one dense block (lda/ldb dense, no batch).
void HostBackend::use_twins(GemmArgs& a, Precision p) const {
  if (p != Precision::bf16 || twins_.empty() || a.batch != 1) return;
  if (!a.a_bf16 && a.lda == (a.ta ? a.M : a.K))
    if (const Twin* t = twin_of(a.A, static_cast<size_t>(a.M * a.K))) a.A = in_twin(t->packed, t->values, a.A), a.a_bf16 = true;
  if (!a.b_bf16 && a.ldb == (a.tb ? a.K : a.N))
    if (const Twin* t = twin_of(a.B, static_cast<size_t>(a.K * a.N))) {
      // a weight read as it lies (dx = dy W): oneDNN may keep it in its layout (the products
      // 1.2-1.5x on an AMX Xeon; the forward's transposed read gained 1.06-1.12x, not worth a copy)
      if (!a.tb) a.b_key = a.B, a.b_version = t->version;
      a.B = in_twin(t->packed, t->values, a.B), a.b_bf16 = true;
    }
}

// In place or not (vec_math.hpp's pack_bf16_span).
void HostBackend::pack_bf16(size_t n, const float* x, float* packed) {
  pack_bf16_span(n, x, packed);
  if (n % 2) std::memset(reinterpret_cast<unsigned char*>(packed) + 2 * n, 0, 2);  // the last word's upper half
}

// In place (packed == x) or not. Backwards from the last element: float i takes bytes
// [4i, 4i + 4), the halves of elements 2i and 2i + 1, which are read before (2i > i, or i = 0
// and element 0 is read just before); byte copies, as the two views alias.
void HostBackend::unpack_bf16(size_t n, const float* packed, float* x) {
  const auto* in = reinterpret_cast<const unsigned char*>(packed);
  auto* out = reinterpret_cast<unsigned char*>(x);
  for (size_t i = n; i-- > 0;) {
    uint16_t b;
    std::memcpy(&b, in + 2 * i, 2);
    const float f = bf16_to_float(b);
    std::memcpy(out + 4 * i, &f, 4);
  }
}

void HostBackend::round_bf16(size_t n, const float* x, float* y) {
  bf16_span<true, false>(n, x, y, nullptr);
}

void HostBackend::round_pack_bf16(size_t n, const float* x, float* y, float* packed) {
  bf16_span<true, true>(n, x, y, packed);
  if (n % 2) std::memset(reinterpret_cast<unsigned char*>(packed) + 2 * n, 0, 2);  // as pack_bf16
}

void HostBackend::axpy(size_t n, float a, const float* x, float* y) {
  Kokkos::parallel_for("pt::axpy", Range(0, n), [=](size_t i) { y[i] += a * x[i]; });
}
void HostBackend::scale(size_t n, float a, float* x) {
  if (a == 0.0f) {
    std::memset(x, 0, n * sizeof(float));
    return;
  }
  Kokkos::parallel_for("pt::scale", Range(0, n), [=](size_t i) { x[i] *= a; });
}

void HostBackend::bias_add_rows(float* y, const float* b, int64_t rows, int64_t cols) {
  Kokkos::parallel_for("pt::bias_add_rows", Range(0, rows), [=](int64_t r) {
    float* yr = y + r * cols;
    for (int64_t c = 0; c < cols; ++c) yr[c] += b[c];
  });
}
// rows outer so the inner loop streams contiguous memory; a bf16 dy read 16 bits at a time
void HostBackend::bias_grad_rows(CView dy, float* db, int64_t rows, int64_t cols) {
  if (!dy.bf16()) {
    const float* d0 = dy.data;
    Kokkos::parallel_for("pt::bias_grad_rows", Range(0, 1), [=](int) {
      for (int64_t r = 0; r < rows; ++r) {
        const float* d = d0 + r * cols;
        for (int64_t c = 0; c < cols; ++c) db[c] += d[c];
      }
    });
    return;
  }
  const auto* h = reinterpret_cast<const unsigned char*>(dy.data);
  Kokkos::parallel_for("pt::bias_grad_rows_bf16", Range(0, 1), [=](int) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        uint16_t b;
        std::memcpy(&b, h + 2 * (r * cols + c), sizeof b);
        db[c] += bf16_to_float(b);
      }
  });
}

void HostBackend::relu_forward(size_t n, const float* x, float* y) {
  Kokkos::parallel_for("pt::relu_forward", Range(0, n), [=](size_t i) { y[i] = x[i] > 0.0f ? x[i] : 0.0f; });
}
void HostBackend::relu_backward(size_t n, const float* y, const float* dy, float* dx) {
  Kokkos::parallel_for("pt::relu_backward", Range(0, n), [=](size_t i) { dx[i] = y[i] > 0.0f ? dy[i] : 0.0f; });
}
void HostBackend::gelu_forward(size_t n, const float* x, float* y) {
  Kokkos::parallel_for("pt::gelu_forward", Range(0, n), [=](size_t i) { y[i] = x[i] * normal_cdf_pdf(x[i]).cdf; });
}
void HostBackend::gelu_backward(size_t n, const float* x, const float* dy, float* dx) {
  Kokkos::parallel_for("pt::gelu_backward", Range(0, n), [=](size_t i) {
    const float v = x[i];
    const NormalCdfPdf g = normal_cdf_pdf(v);
    dx[i] = dy[i] * (g.cdf + v * g.pdf);
  });
}

namespace {
// f(i) for i in [0, n), written packed (pack_bf16) to out: blocks of 256 values computed into
// a stack buffer by a plain loop (which GCC vectorises as it does the unpacked op), then
// rounded and stored as 16-bit values; the upper half of the last word zeroed
template <class F>
void packed_map(size_t n, float* out, F f) {
  constexpr size_t kBlock = 256;
  auto* o = reinterpret_cast<unsigned char*>(out);
  Kokkos::parallel_for("pt::packed_map", Range(0, (n + kBlock - 1) / kBlock), [=](size_t b) {
    const size_t i0 = b * kBlock, m = n - i0 < kBlock ? n - i0 : kBlock;
    float v[kBlock];
    for (size_t k = 0; k < m; ++k) v[k] = f(i0 + k);
    pack_bf16_span(m, v, o + 2 * i0);
  });
  if (n % 2) std::memset(o + 2 * n, 0, 2);
}
}  // namespace

// gelu and gelu' from one normal_cdf_pdf, the expressions of gelu_forward and gelu_backward
void HostBackend::gelu_forward_deriv(size_t n, float* x, View y) {
  if (y.bf16()) {
    return packed_map(n, y.data, [=](size_t i) {
      const float v = x[i];
      const NormalCdfPdf g = normal_cdf_pdf(v);
      x[i] = g.cdf + v * g.pdf;
      return v * g.cdf;
    });
  }
  float* yd = y.data;
  Kokkos::parallel_for("pt::gelu_forward_deriv", Range(0, n), [=](size_t i) {
    const float v = x[i];
    const NormalCdfPdf g = normal_cdf_pdf(v);
    yd[i] = v * g.cdf;
    x[i] = g.cdf + v * g.pdf;
  });
}
void HostBackend::add(size_t n, const float* a, const float* b, float* y) {
  Kokkos::parallel_for("pt::add", Range(0, n), [=](size_t i) { y[i] = a[i] + b[i]; });
}
void HostBackend::mul(size_t n, const float* a, const float* b, View y) {
  if (y.bf16()) return packed_map(n, y.data, [=](size_t i) { return a[i] * b[i]; });
  float* yd = y.data;
  Kokkos::parallel_for("pt::mul", Range(0, n), [=](size_t i) { yd[i] = a[i] * b[i]; });
}

// Row statistics in double over fixed lanes (vec_math.hpp), two passes.
void HostBackend::layernorm_forward(int64_t rows, int64_t cols, float eps, const float* x, const float* gamma,
                                    const float* beta, float* y, float* stats) {
  Kokkos::parallel_for("pt::layernorm_forward", Range(0, rows), [=](int64_t r) {
    const float* xr = x + r * cols;
    const double mean = lane_sum(cols, [&](int64_t c) { return xr[c]; }) / static_cast<double>(cols);
    const double var = lane_sum(cols, [&](int64_t c) { return (xr[c] - mean) * (xr[c] - mean); }) / static_cast<double>(cols);
    const float m = static_cast<float>(mean), rstd = static_cast<float>(1.0 / std::sqrt(var + eps));
    float* yr = y + r * cols;
    for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - m) * rstd * gamma[c] + beta[c];
    stats[2 * r] = m;
    stats[2 * r + 1] = rstd;
  });
}

// Rows in order (dgamma and dbeta accumulate row by row); each row's two sums in double lanes.
void HostBackend::layernorm_backward(int64_t rows, int64_t cols, const float* x, const float* gamma,
                                     const float* stats, const float* dy, float* dx, float* dgamma, float* dbeta) {
  Kokkos::parallel_for("pt::layernorm_backward", Range(0, 1), [=](int) {
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * cols;
      const float* dyr = dy + r * cols;
      const float m = stats[2 * r], rstd = stats[2 * r + 1];
      if (dgamma) {
        for (int64_t c = 0; c < cols; ++c) {
          dgamma[c] += dyr[c] * ((xr[c] - m) * rstd);
          dbeta[c] += dyr[c];
        }
      }
      if (!dx) continue;
      double acc[kLanes] = {}, acc_x[kLanes] = {};
      lane_add(acc, cols, [&](int64_t c) { return dyr[c] * gamma[c]; });
      lane_add(acc_x, cols, [&](int64_t c) { return dyr[c] * gamma[c] * ((xr[c] - m) * rstd); });
      const float a = static_cast<float>(lane_total(acc) / cols), b = static_cast<float>(lane_total(acc_x) / cols);
      float* dxr = dx + r * cols;
      for (int64_t c = 0; c < cols; ++c) {
        const float xhat = (xr[c] - m) * rstd;
        dxr[c] = rstd * (dyr[c] * gamma[c] - a - xhat * b);
      }
    }
  });
}

void HostBackend::dropout_forward(int64_t n, int64_t features, float p, uint64_t key, int64_t sample0,
                                  const float* x, float* y) {
  const float keep_scale = 1.0f / (1.0f - p);
  Kokkos::parallel_for("pt::dropout_forward", Range(0, n * features), [=](int64_t i) {
    const int64_t s = i / features, j = i % features;
    const bool keep = rng_uniform(key, static_cast<uint64_t>((sample0 + s) * features + j)) >= p;
    y[i] = keep ? x[i] * keep_scale : 0.0f;
  });
}
void HostBackend::dropout_backward(int64_t n, int64_t features, float p, uint64_t key, int64_t sample0,
                                   const float* dy, float* dx) {
  const float keep_scale = 1.0f / (1.0f - p);
  Kokkos::parallel_for("pt::dropout_backward", Range(0, n * features), [=](int64_t i) {
    const int64_t s = i / features, j = i % features;
    const bool keep = rng_uniform(key, static_cast<uint64_t>((sample0 + s) * features + j)) >= p;
    dx[i] = keep ? dy[i] * keep_scale : 0.0f;
  });
}

void HostBackend::softmax_xent_forward(int64_t n, int64_t classes, const float* logits, const int32_t* labels,
                                       float* loss, float* probs) {
  Kokkos::parallel_for("pt::softmax_xent_forward", Range(0, n), [=](int64_t i) {
    const float* l = logits + i * classes;
    float* pr = probs + i * classes;
    float mx = l[0];
    for (int64_t c = 1; c < classes; ++c) mx = l[c] > mx ? l[c] : mx;
    float s = 0.0f;
    for (int64_t c = 0; c < classes; ++c) {
      pr[c] = std::exp(l[c] - mx);
      s += pr[c];
    }
    const float inv = 1.0f / s;
    for (int64_t c = 0; c < classes; ++c) pr[c] *= inv;
    loss[i] = std::log(s) + mx - l[labels[i]];
  });
}
void HostBackend::softmax_xent_backward(int64_t n, int64_t classes, const float* probs, const int32_t* labels,
                                        float scale, float* dlogits) {
  Kokkos::parallel_for("pt::softmax_xent_backward", Range(0, n), [=](int64_t i) {
    const float* pr = probs + i * classes;
    float* d = dlogits + i * classes;
    for (int64_t c = 0; c < classes; ++c) d[c] = scale * pr[c];
    d[labels[i]] -= scale;
  });
}
int64_t HostBackend::count_correct(int64_t n, int64_t classes, const float* logits, const int32_t* labels) {
  int64_t correct = 0;
  Kokkos::parallel_reduce(
      "pt::count_correct", Range(0, n),
      [=](int64_t i, int64_t& acc) {
        const float* l = logits + i * classes;
        int64_t best = 0;
        for (int64_t c = 1; c < classes; ++c)
          if (l[c] > l[best]) best = c;
        acc += best == labels[i] ? 1 : 0;
      },
      correct);
  return correct;
}

double HostBackend::sum(size_t n, const float* x) {
  double s = 0;
  Kokkos::parallel_reduce("pt::sum", Range(0, n), [=](size_t i, double& acc) { acc += x[i]; }, s);
  return s;
}
double HostBackend::sum_squares(size_t n, const float* x) { return host::sum_squares(x, static_cast<int64_t>(n)); }

// The largest |x| bit pattern: above the largest finite float's is an infinity or a NaN
// (an integer max vectorises; isfinite in a reduction does not).
bool HostBackend::all_finite(size_t n, const float* x) {
  uint32_t worst = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, x + i, sizeof u);
    worst = std::max(worst, u & 0x7fffffffu);
  }
  return worst < 0x7f800000u;
}

void HostBackend::sgd_update(size_t n, float* w, const float* g, float* buf, float lr, float momentum,
                             float weight_decay, bool nesterov, float grad_scale) {
  Kokkos::parallel_for("pt::sgd_update", Range(0, n), [=](size_t i) {
    float d = g[i] * grad_scale;
    if (weight_decay != 0.0f) d += weight_decay * w[i];
    if (momentum != 0.0f) {
      buf[i] = momentum * buf[i] + d;
      d = nesterov ? d + momentum * buf[i] : buf[i];
    }
    w[i] -= lr * d;
  });
}

void HostBackend::adamw_update(size_t n, float* w, const float* g, float* m, float* v, double lr, double beta1,
                               double beta2, double eps, double weight_decay, int64_t step, float grad_scale) {
  const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(step));
  const float step_size = static_cast<float>(lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float decay = static_cast<float>(1.0 - lr * weight_decay);
  const float b1 = static_cast<float>(beta1), b2 = static_cast<float>(beta2);
  const float c1 = static_cast<float>(1.0 - beta1), c2 = static_cast<float>(1.0 - beta2), e = static_cast<float>(eps);
  Kokkos::parallel_for("pt::adamw_update", Range(0, n), [=](size_t i) {
    const float gi = g[i] * grad_scale;
    w[i] *= decay;
    m[i] = b1 * m[i] + c1 * gi;
    v[i] = b2 * v[i] + c2 * gi * gi;
    const float denom = std::sqrt(v[i]) / bc2_sqrt + e;
    w[i] -= step_size * (m[i] / denom);
  });
}

}  // namespace host
}  // namespace pt
