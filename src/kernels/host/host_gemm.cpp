// Host backend, its products: which library runs each GEMM (oneDNN's matmul in bf16, and for
// the fp32 shapes the measured rule of kernel_choice.cpp gives it; OpenBLAS through KokkosBlas
// otherwise) and the linear layer's fused matmul + bias. A weight version's bf16 array
// (ParamView::operand: a CView with a version) is kept in oneDNN's layout for the input
// gradient's product with kept_weight_layouts.
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
    key_weight(a, B);
    onednn().gemm(p, a);
    return;
  }
  blas_gemm(ta, tb, M, N, K, alpha, A.data, B.data, beta, C);
}

// One oneDNN matmul with the bias where the rule gives the product to oneDNN; else the
// default composition (OpenBLAS GEMM, then the bias pass).
void HostFused::linear_forward(int64_t rows, int64_t in, int64_t out, CView x, CView w, const float* b, View y,
                               Precision p) {
  if (rows == 0 || out == 0) return;
  if (in == 0 || !hb_.onednn_gemm(false, true, rows, out, in, 1, p))
    return FusedKernels::linear_forward(rows, in, out, x, w, b, y, p);
  PT_CHECK(p == Precision::bf16 || (!x.bf16() && !y.bf16()), "linear_forward: a bf16 operand in an fp32 product");
  GemmArgs a;
  a.tb = true, a.M = rows, a.N = out, a.K = in;
  a.A = x.data, a.lda = in, a.B = w.data, a.ldb = in, a.C = y.data, a.ldc = out, a.bias = b, a.a_bf16 = x.bf16();
  a.b_bf16 = w.bf16(), a.c_bf16 = y.bf16();
  PT_CHECK(p == Precision::bf16 || !w.bf16(), "linear_forward: a bf16 weight in an fp32 product");
  HostBackend::key_weight(a, w);
  hb_.onednn().gemm(p, a);
}

// A versioned weight read by a single dense bf16 product; OneDnn keeps a layout for the
// untransposed read only (dx = dy W: 1.19-1.64x on an AMX Xeon at gpt2_small's shapes; the
// forward's transposed x W^T 0.86-1.12x, docs/PRECISION.md).
void HostBackend::key_weight(GemmArgs& a, CView B) {
  if (B.version && a.b_bf16 && a.batch == 1) a.b_key = a.B, a.b_version = B.version;
}

}  // namespace pt::host
