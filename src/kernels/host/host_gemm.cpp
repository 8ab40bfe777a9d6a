// Host backend, its products: which library runs each GEMM (oneDNN's matmul in bf16, and for
// the fp32 shapes the measured rule of kernel_choice.cpp gives it; OpenBLAS through KokkosBlas
// otherwise), the linear layer's fused matmul + bias, and the bf16 twins of the weights
// (set_bf16_twin: a dense operand inside a registered twin is read from it, and with
// kept_weight_layouts an input-gradient product's weight is kept in oneDNN's layout).
// Beside the oneDNN code it drives (onednn_matmul.cpp, onednn_conv.cpp).
#include <KokkosBlas3_gemm.hpp>

#include <algorithm>

#include "host_backend.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/views.hpp"

namespace pt::host {

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
void HostFused::linear_forward(int64_t rows, int64_t in, int64_t out, CView x, const float* w, const float* b, View y,
                               Precision p) {
  if (rows == 0 || out == 0) return;
  if (in == 0 || !hb_.onednn_gemm(false, true, rows, out, in, 1, p))
    return FusedKernels::linear_forward(rows, in, out, x, w, b, y, p);
  PT_CHECK(p == Precision::bf16 || (!x.bf16() && !y.bf16()), "linear_forward: a bf16 operand in an fp32 product");
  GemmArgs a;
  a.tb = true, a.M = rows, a.N = out, a.K = in;
  a.A = x.data, a.lda = in, a.B = w, a.ldb = in, a.C = y.data, a.ldc = out, a.bias = b, a.a_bf16 = x.bf16();
  a.c_bf16 = y.bf16();
  hb_.use_twins(a, p);
  hb_.onednn().gemm(p, a);
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

}  // namespace pt::host
