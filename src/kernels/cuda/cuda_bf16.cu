// bf16 compute on the CUDA backend (products called with Precision::bf16; docs/PRECISION.md).
// Contract: GEMM inputs are rounded to bf16 by k_to_bf16 (the host's and PyTorch's
// round-to-nearest-even, NaN -> 0x7FC0; bit-identical to bf16_bits in backend.hpp) into
// device scratch, then cublasGemmEx / cublasGemmStridedBatchedEx multiply them with
// CUBLAS_COMPUTE_32F (fp32 accumulation on tensor cores, CUBLAS_GEMM_DEFAULT_TENSOR_OP) into
// the fp32 C, alpha and beta as in Backend::gemm. A strided operand is converted over its
// whole extent, gaps included, so leading dimensions and batch strides carry over unchanged.
// round_bf16, pack_bf16 and unpack_bf16 (the Backend ops), gemm_views_bf16 (bf16 views go
// to cuBLAS as they are), bias_grad_rows_bf16 and the widening used by the bf16
// convolutions (cuda_dnn.cu) live here too; none allocates per call or stages through the
// host (scratch slots grow and are kept). Everything is queued on the compute stream.
#include <algorithm>

#include "cuda_backend.hpp"
#include "cuda_common.hpp"

namespace pt::cuda {
namespace {

__device__ __forceinline__ float dev_widen(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }

__global__ void k_to_bf16(size_t n, const float* x, uint16_t* y) { GRID_STRIDE(i, n) y[i] = dev_bf16_bits(x[i]); }
__global__ void k_round_bf16(size_t n, const float* x, float* y) { GRID_STRIDE(i, n) y[i] = dev_widen(dev_bf16_bits(x[i])); }
__global__ void k_widen(size_t n, const uint16_t* x, float* y) { GRID_STRIDE(i, n) y[i] = dev_widen(x[i]); }
__global__ void k_widen_add(size_t n, const uint16_t* x, float* y) { GRID_STRIDE(i, n) y[i] += dev_widen(x[i]); }
// one thread per column, rows in order, widened as read: the host's bias_grad_rows order
__global__ void k_bias_grad_rows_bf16(const uint16_t* dy, float* db, int64_t rows, int64_t cols) {
  GRID_STRIDE(c, static_cast<size_t>(cols)) {
    float acc = db[c];
    for (int64_t r = 0; r < rows; ++r) acc += dev_widen(dy[r * cols + static_cast<int64_t>(c)]);
    db[c] = acc;
  }
}

// Elements spanned by a [batch] x rows x cols operand with row stride ld and batch stride.
size_t extent(int64_t batch, int64_t rows, int64_t cols, int64_t ld, int64_t stride) {
  return static_cast<size_t>((batch - 1) * stride + (rows - 1) * ld + cols);
}

}  // namespace

void CudaBackend::round_bf16(size_t n, const float* x, float* y) {
  if (n == 0) return;
  k_round_bf16<<<blocks_for(n), kThreads, 0, compute_>>>(n, x, y);
  PT_CU_LAUNCHED();
}

// Packed words are a dense bf16 array (element i is the i-th 16-bit half). In place, the
// words would overwrite floats other threads have yet to read: the halves go through scratch
// slot 3 and come back with one device copy. An odd n zeroes the last word's upper half.
void CudaBackend::pack_bf16(size_t n, const float* x, float* packed) {
  if (n == 0) return;
  auto* out = reinterpret_cast<uint16_t*>(packed);
  if (static_cast<const void*>(x) == static_cast<const void*>(packed)) {
    const uint16_t* t = to_bf16(3, x, n);
    PT_CU_CHECK(cudaMemcpyAsync(out, t, n * sizeof(uint16_t), cudaMemcpyDeviceToDevice, compute_));
  } else {
    k_to_bf16<<<blocks_for(n), kThreads, 0, compute_>>>(n, x, out);
    PT_CU_LAUNCHED();
  }
  if (n % 2) PT_CU_CHECK(cudaMemsetAsync(out + n, 0, sizeof(uint16_t), compute_));
}

// In place, the halves are copied to scratch slot 3 first (the floats overwrite them).
void CudaBackend::unpack_bf16(size_t n, const float* packed, float* x) {
  if (n == 0) return;
  const auto* in = reinterpret_cast<const uint16_t*>(packed);
  if (static_cast<const void*>(x) == static_cast<const void*>(packed)) {
    auto* t = static_cast<uint16_t*>(bf16_scratch(3, n * sizeof(uint16_t)));
    PT_CU_CHECK(cudaMemcpyAsync(t, in, n * sizeof(uint16_t), cudaMemcpyDeviceToDevice, compute_));
    in = t;
  }
  from_bf16(in, n, x, false);
}

// Packed operands go to cuBLAS as they are; the others are rounded into scratch as gemm does,
// so the result is gemm's in bf16 bit for bit.
void CudaBackend::gemm_views_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, CView A, CView B,
                                  float beta, float* C) {
  const int64_t lda = ta ? M : K, ldb = tb ? K : N;
  const uint16_t* a = A.bf16() ? reinterpret_cast<const uint16_t*>(A.data) : to_bf16(0, A.data, static_cast<size_t>(M * K));
  const uint16_t* b = B.bf16() ? reinterpret_cast<const uint16_t*>(B.data) : to_bf16(1, B.data, static_cast<size_t>(K * N));
  gemm_bf16_ops(ta, tb, M, N, K, alpha, a, lda, 0, b, ldb, 0, beta, C, N, 0, 1);
}

void CudaBackend::bias_grad_rows_bf16(const float* dy, float* db, int64_t rows, int64_t cols) {
  if (rows == 0 || cols == 0) return;
  k_bias_grad_rows_bf16<<<blocks_for(static_cast<size_t>(cols)), kThreads, 0, compute_>>>(
      reinterpret_cast<const uint16_t*>(dy), db, rows, cols);
  PT_CU_LAUNCHED();
}

CudaFused::CudaFused(CudaBackend& cb) : FusedKernels(cb), cb_(cb) {}

void CudaFused::linear_forward(int64_t rows, int64_t in, int64_t out, CView x, CView w, const float* b, View y,
                               Precision p) {
  if (!y.bf16()) return FusedKernels::linear_forward(rows, in, out, x, w, b, y, p);
  const size_t n = static_cast<size_t>(rows * out);
  if (n == 0) return;
  auto* acc = static_cast<float*>(cb_.bf16_scratch(2, n * sizeof(float)));  // gemm rounds into slots 0 and 1
  FusedKernels::linear_forward(rows, in, out, x, w, b, acc, p);
  cb_.pack_bf16(n, acc, y.data);
}

void* CudaBackend::bf16_scratch(int slot, size_t bytes) {
  Scratch& s = bf16_scratch_.at(static_cast<size_t>(slot));
  if (bytes > s.bytes) {
    if (s.p) PT_CU_CHECK(cudaFree(s.p));  // waits for kernels that used the old one
    s.p = nullptr;
    s.bytes = 0;
    PT_CU_CHECK(cudaMalloc(&s.p, bytes));
    s.bytes = bytes;
  }
  return s.p;
}

const uint16_t* CudaBackend::to_bf16(int slot, const float* x, size_t n) {
  auto* y = static_cast<uint16_t*>(bf16_scratch(slot, std::max<size_t>(n, 1) * sizeof(uint16_t)));
  if (n == 0) return y;
  k_to_bf16<<<blocks_for(n), kThreads, 0, compute_>>>(n, x, y);
  PT_CU_LAUNCHED();
  return y;
}

void CudaBackend::from_bf16(const uint16_t* x, size_t n, float* y, bool accumulate) {
  if (n == 0) return;
  if (accumulate) k_widen_add<<<blocks_for(n), kThreads, 0, compute_>>>(n, x, y);
  else k_widen<<<blocks_for(n), kThreads, 0, compute_>>>(n, x, y);
  PT_CU_LAUNCHED();
}

void CudaBackend::gemm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                            int64_t lda, int64_t stride_a, const float* B, int64_t ldb, int64_t stride_b, float beta,
                            float* C, int64_t ldc, int64_t stride_c, int64_t batch) {
  const uint16_t* a = to_bf16(0, A, extent(batch, ta ? K : M, ta ? M : K, lda, stride_a));
  const uint16_t* b = to_bf16(1, B, extent(batch, tb ? N : K, tb ? K : N, ldb, stride_b));
  gemm_bf16_ops(ta, tb, M, N, K, alpha, a, lda, stride_a, b, ldb, stride_b, beta, C, ldc, stride_c, batch);
}

// The row-major trick of gemm(): cuBLAS computes C^T = op(B)^T op(A)^T in column-major.
void CudaBackend::gemm_bf16_ops(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* a,
                                int64_t lda, int64_t stride_a, const uint16_t* b, int64_t ldb, int64_t stride_b,
                                float beta, float* C, int64_t ldc, int64_t stride_c, int64_t batch) {
  const cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int m = static_cast<int>(N), n = static_cast<int>(M), k = static_cast<int>(K);
  if (batch == 1) {
    PT_CUBLAS_CHECK(cublasGemmEx(blas_, op_b, op_a, m, n, k, &alpha, b, CUDA_R_16BF, static_cast<int>(ldb), a,
                                 CUDA_R_16BF, static_cast<int>(lda), &beta, C, CUDA_R_32F, static_cast<int>(ldc),
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP));
    return;
  }
  PT_CUBLAS_CHECK(cublasGemmStridedBatchedEx(blas_, op_b, op_a, m, n, k, &alpha, b, CUDA_R_16BF, static_cast<int>(ldb),
                                             stride_b, a, CUDA_R_16BF, static_cast<int>(lda), stride_a, &beta, C,
                                             CUDA_R_32F, static_cast<int>(ldc), stride_c, static_cast<int>(batch),
                                             CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP));
}

}  // namespace pt::cuda
